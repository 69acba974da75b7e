"""A NodeService in memory (jobs queued on submit, cancelled on request), for the REST API's
tests: in process (``unit/contracts/test_api.py``) and behind a real server
(``integration/cli/test_client_cli.py``)."""

from __future__ import annotations

import json
import threading

from pydantic import TypeAdapter

from adloader.daemon.store.history import EVENT_CURSOR, JOB_CURSOR, decode_cursor, encode_cursor
from adloader.errors import InputError
from adloader.rest import EventQuery, JobQuery, JobSpec, JobView

TOKEN = "s3cret-token"


class FakeService:
    """A NodeService in memory: jobs are queued on submit and cancelled on request."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobView] = {}
        self._events: list[dict] = []
        self._lock = threading.Lock()
        self.fail: Exception | None = None  # raised by every call when set
        self.fits = 0
        self.signals: dict[str, str] = {}  # each job cancelled with a signal: its signal

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def _event(self, job: str, kind: str) -> None:
        self._events.append({"id": len(self._events) + 1, "t": 1.0, "job": job, "kind": kind,
                             "data": {}})  # fmt: skip

    def submit(self, spec: JobSpec) -> JobView:
        self._check()
        if spec.gpus > 8:
            raise InputError(f"job {spec.name!r}: asks for {spec.gpus} GPUs, the node has 8")
        with self._lock:
            job_id = f"j-{len(self._jobs) + 1:06d}"
            view = JobView(id=job_id, name=spec.name, state="queued", submitted_at=1000.0,
                           spec=spec, workers=spec.workers)  # fmt: skip
            self._jobs[job_id] = view
            self._event(job_id, "submitted")
        return view

    def jobs(self) -> list[JobView]:
        self._check()
        return list(self._jobs.values())

    def job(self, job_id: str) -> JobView | None:
        self._check()
        return self._jobs.get(job_id)

    def cancel(self, job_id: str, signal: str | None = None) -> JobView | None:
        self._check()
        with self._lock:
            if job_id not in self._jobs:
                return None
            if signal is not None:
                self.signals[job_id] = signal
            view = self._jobs[job_id].model_copy(update={"state": "cancelled"})
            self._jobs[job_id] = view
            self._event(job_id, "cancelled")
        return view

    def allocations(self) -> dict:
        self._check()
        jobs = {j: v.workers or 0 for j, v in self._jobs.items()}
        return {"policy": "optimal", "capacity": 16, "gpus": 4, "jobs": jobs,
                "node_workers": sum(jobs.values())}  # fmt: skip

    def jobs_page(self, query: JobQuery) -> tuple[bytes, str | None]:
        self._check()
        after = decode_cursor(JOB_CURSOR, query.cursor) if query.cursor else ""
        found = [v for k, v in sorted(self._jobs.items()) if k > after
                 and (not query.state or v.state in query.state)
                 and query.name in (None, v.name)]
        page = found[:query.limit]
        more = len(found) > query.limit
        return (TypeAdapter(list[JobView]).dump_json(page),
                encode_cursor(JOB_CURSOR, page[-1].id) if more else None)

    def events_page(self, query: EventQuery) -> tuple[bytes, str]:
        after = query.since
        if query.cursor:
            after = max(after, decode_cursor(EVENT_CURSOR, query.cursor))
        page = [e for e in self.events(after, query.limit)
                if (not query.kind or e["kind"] in query.kind)
                and query.job in (None, e["job"])]
        return json.dumps(page).encode(), encode_cursor(EVENT_CURSOR,
                                                        page[-1]["id"] if page else after)

    def events(self, since: int, limit: int) -> list[dict]:
        self._check()
        return [e for e in self._events if e["id"] > since][:limit]

    def model(self) -> dict:
        self._check()
        part = {"regressor": "linear", "r2": {"linear": 0.99}}
        return {"source": "online" if self.fits else "prior", "refits_skipped": 0,
                "refit_interval_s": 20.0,
                "fitter": None, "samples": {"training": 0, "loading": 0}, "fits": self.fits,
                "training": part, "loading": {**part, "contention_from": 8,
                                              "saturation_at": 16, "slopes": [1.0, 0.5, 0.0]}}

    def fit_model(self) -> dict:
        self._check()
        self.fits += 1
        return self.model()

    def metrics(self) -> str:
        self._check()
        return f"# TYPE adloader_jobs gauge\nadloader_jobs {len(self._jobs)}\n"

    def health(self) -> dict:
        self._check()
        return {"status": "ok", "version": "0", "uptime_s": 1.0, "capacity": 16, "gpus": 4,
                "pid": 1}

    def log_path(self, job_id: str) -> str | None:
        return "" if job_id in self._jobs else None

    def log(self, job_id: str, tail_bytes: int) -> str | None:
        self._check()
        if job_id not in self._jobs:
            return None
        text = "".join(f"line {i}\n" for i in range(100))
        return text[-tail_bytes:] if tail_bytes else ""
