"""What the REST API asks of the node: the NodeService protocol and the JobView it returns.

The API (``daemon.api``) only speaks to this protocol; ``daemon.node`` implements it over the
scheduler, broker and store, and tests implement it in memory.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from adloader.jobspec import JobSpec


class JobView(BaseModel):
    """A job as the API shows it: its record, plus its live throughput and iteration."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    state: str
    workers: int | None = None
    pid: int | None = None
    exit_code: int | None = None  # negative: killed by that signal
    reason: str | None = None  # how it ended ("exit code 3", "killed by SIGKILL", ...)
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    spec: JobSpec
    throughput: float | None = None  # samples/s over the last heartbeat interval
    iteration: int | None = None

    @classmethod
    def from_record(cls, record: Any, throughput: float | None = None,
                    iteration: int | None = None) -> JobView:
        """A view of a ``daemon.store.JobRecord`` (or anything with the same attributes)."""
        fields = ("id", "name", "state", "workers", "pid", "exit_code", "reason",
                  "submitted_at", "started_at", "finished_at", "spec")  # fmt: skip
        return cls(**{f: getattr(record, f, None) for f in fields}, throughput=throughput,
                   iteration=iteration)  # fmt: skip


class NodeService(Protocol):
    """The node daemon as the REST API sees it. Unknown job ids give None."""

    def submit(self, spec: JobSpec) -> JobView:
        """Store and buffer a new job (InputError if the node cannot take it)."""
        ...

    def jobs(self) -> list[JobView]: ...

    def jobs_json(self) -> bytes:
        """``jobs()`` as a JSON array (the node serves it from per-job caches)."""
        ...

    def job(self, job_id: str) -> JobView | None: ...

    def cancel(self, job_id: str) -> JobView | None:
        """Cancel a job (a running one is asked to stop, then signalled); its view."""
        ...

    def pause(self, job_id: str, checkpoint: bool) -> JobView | None:
        """Ask a running job to pause (InputError if it is not running); its view."""
        ...

    def resume(self, job_id: str) -> JobView | None:
        """Resume a paused job (InputError if it is not paused); its view."""
        ...

    def allocations(self) -> dict:
        """``{"policy": str, "capacity": int, "jobs": {job_id: workers}}``."""
        ...

    def events(self, since: int, limit: int) -> list[dict]:
        """Events with id > ``since``: ``{"id", "t", "job", "kind", "data"}``."""
        ...

    def events_json(self, since: int, limit: int) -> bytes:
        """``events(since, limit)`` as a JSON array."""
        ...

    def model(self) -> dict:
        """The current TPM (``ThroughputModel.to_json()``-like) and its sample counts."""
        ...

    def fit_model(self) -> dict:
        """Refit the TPM from the stored samples now (InputError if too few); its summary."""
        ...

    def metrics(self) -> str:
        """Prometheus text exposition of the node's gauges and counters."""
        ...

    def health(self) -> dict:
        """``{"status": "ok", ...}``; cheap, no authentication needed."""
        ...

    def log(self, job_id: str, tail_bytes: int) -> str | None:
        """The last ``tail_bytes`` of a job's output; None for an unknown job."""
        ...
