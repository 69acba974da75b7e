"""What the REST API asks of the node: the NodeService protocol (it returns ``rest.JobView``).

The API (``daemon.api.app``) only speaks to this protocol; ``daemon.node`` implements it over the
scheduler, broker and store, and tests implement it in memory.
"""

from __future__ import annotations

from typing import Protocol

from adloader.rest import EventQuery, JobQuery, JobSpec, JobView


class NodeService(Protocol):
    """The node daemon as the REST API sees it. Unknown job ids give None."""

    def submit(self, spec: JobSpec) -> JobView:
        """Store and buffer a new job (InputError if the node cannot take it)."""
        ...

    def jobs_page(self, query: JobQuery) -> tuple[bytes, str | None]:
        """One page of jobs as a JSON array, and the next page's cursor (None: the last)."""
        ...

    def job(self, job_id: str) -> JobView | None: ...

    def cancel(self, job_id: str, signal: str | None = None) -> JobView | None:
        """Cancel a job (a running one is asked to stop, then signalled; with ``signal`` a
        launched one is sent that signal now, InputError if it names none); its view."""
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

    def node_summary(self) -> dict:
        """What the node offers a cluster scheduler (``adloader.scheduling.node_summary``)."""
        ...

    def events_page(self, query: EventQuery) -> tuple[bytes, str]:
        """One page of events as a JSON array, and the cursor that follows it."""
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

    def log_path(self, job_id: str) -> str | None:
        """Where a job's output is written ("" when it has none); None for an unknown job."""
        ...

    def log(self, job_id: str, tail_bytes: int) -> str | None:
        """The last ``tail_bytes`` of a job's output; None for an unknown job."""
        ...
