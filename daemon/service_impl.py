"""The node as the REST API sees it (``daemon.service.NodeService``), over the scheduler,
the store and the launcher that ``daemon.node.Node`` wires together.

Reads come from memory (the store keeps its job records written through), so listing a
thousand jobs costs no query. A submit counts an unknown model's features before it takes
the node's lock, so a slow count never holds up the control loop or another request.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from adloader.errors import InputError
from adloader.rest import JobView

from .scheduler import ACTIVE


class NodeServiceMixin:
    """The NodeService methods of ``Node`` (which provides the attributes used here)."""

    def submit(self, spec) -> JobView:
        if spec.gpus > self.gpus:
            raise InputError(f"field 'gpus': {spec.gpus} but the node has {self.gpus}")
        if spec.features is None:
            self.features.features(spec.model)  # counted now, outside the lock
        with self.lock:
            job_id = self.store.add_job(spec, "", origin="rest", state="buffered",
                                        supervisor="launcher")
            job = self._live(job_id, spec, "", "rest")
            job.supervisor = "launcher"
            self._apply(self.scheduler.add(job))
            return self.job(job_id)

    def _view(self, rec) -> JobView:
        live = self.scheduler.jobs.get(rec.id)
        running = live is not None and live.state in ACTIVE
        return JobView.from_record(rec, throughput=live.throughput if running else None,
                                   iteration=live.iteration if live else None,
                                   cpu_percent=live.cpu_percent if running else None)

    def jobs(self) -> list[JobView]:
        with self.lock:
            records = self.store.list_jobs()
            return [self._view(r) for r in records]

    def jobs_json(self) -> bytes:
        """The job list as JSON: each record's part is serialised once per change of the
        record, the live part (samples/s, iteration) per call — a thousand jobs that
        heartbeat every second cost a concatenation, not a thousand validations."""
        parts = []
        with self.lock:
            cache = self.static_views
            for rec in self.store.list_jobs():
                kept = cache.get(rec.id)
                if kept is None or kept[0] is not rec:
                    body = JobView.from_record(rec).model_dump_json(
                        exclude={"throughput", "iteration", "cpu_percent"})
                    kept = cache[rec.id] = (rec, body[1:].encode())
                live = self.scheduler.jobs.get(rec.id)
                running = live is not None and live.state in ACTIVE
                rate = repr(float(live.throughput)) if running else "null"
                step = str(live.iteration) if live else "null"
                cpu = "null" if not running or live.cpu_percent is None else \
                    repr(round(live.cpu_percent, 1))
                parts.append(f'{{"throughput":{rate},"iteration":{step},"cpu_percent":{cpu},'
                             .encode() + kept[1])
        return b"[" + b",".join(parts) + b"]"

    def job(self, job_id: str) -> JobView | None:
        with self.lock:
            rec = self.store.get_job(job_id)
            return self._view(rec) if rec else None

    def cancel(self, job_id: str) -> JobView | None:
        with self.lock:
            if self.store.get_job(job_id) is None:
                return None
            self._apply(self.scheduler.cancel(job_id))
            return self.job(job_id)

    def pause(self, job_id: str, checkpoint: bool) -> JobView | None:
        with self.lock:
            if self.store.get_job(job_id) is None:
                return None
            self._apply(self.scheduler.pause(job_id, checkpoint))
            return self.job(job_id)

    def resume(self, job_id: str) -> JobView | None:
        with self.lock:
            if self.store.get_job(job_id) is None:
                return None
            self._apply(self.scheduler.resume(job_id))
            return self.job(job_id)

    def allocations(self) -> dict:
        with self.lock:
            jobs = {j.id: j.workers for j in self.scheduler.jobs.values() if j.state in ACTIVE}
            return {"policy": self.config.policy, "capacity": self.capacity, "gpus": self.gpus,
                    "jobs": jobs, "node_workers": sum(jobs.values())}

    def node_summary(self) -> dict:
        """Spare loading capacity and the gain of one more worker
        (adloader.scheduling.node_summary),
        and the node cache's room, for a cluster scheduler."""
        from adloader.scheduling.node_summary import summary
        from adloader.scheduling.planner import demands

        with self.lock:
            sched = self.scheduler
            live = [j for j in sched.jobs.values() if j.state == "running" and j.gpu_ids]
            views = sched._views(live)
            wanted = demands(views, {j.id: j.gpu_ids for j in live}, sched.model, sched.table)
            out = summary({w.name: w.training_rate for w in wanted},
                          {j.id: j.workers for j in live}, sched.capacity, sched.table)
            cache = self.node_cache.summary() if self.node_cache is not None else None
        out["cache"] = cache
        return out

    def events(self, since: int, limit: int) -> list[dict]:
        return self.store.events(since, limit)

    def events_json(self, since: int, limit: int) -> bytes:
        return self.store.events_json(since, limit)

    def model(self) -> dict:
        with self.lock:
            m = self.scheduler.model
            counts = self.store.sample_counts()
        st = m.loading.stages
        return {
            "source": self.online.source,
            "samples": {"training": counts.get("training", 0),
                        "loading": counts.get("loading", 0)},
            "training": {"regressor": m.training.regressor, "r2": m.training.scores},
            "loading": {"regressor": m.loading.regressor, "r2": m.loading.scores,
                        "contention_from": st.contention_from, "saturation_at": st.saturation_at,
                        "slopes": list(st.slopes)},
        }

    def health(self) -> dict:
        out = {"status": "ok", "uptime_s": round(time.time() - self.started, 1),
               "capacity": self.capacity, "gpus": self.gpus, "pid": os.getpid()}
        if self.store_note:
            out["store"] = self.store_note
        if self.dirty:
            out["status"] = "degraded"
            out["unwritten_jobs"] = len(self.dirty)
        return out

    def log_path(self, job_id: str) -> str | None:
        rec = self.store.get_job(job_id)
        return None if rec is None else (rec.log_path or "")

    def log(self, job_id: str, tail_bytes: int) -> str | None:
        rec = self.store.get_job(job_id)
        if rec is None:
            return None
        if not rec.log_path or not Path(rec.log_path).exists():
            return ""
        with open(rec.log_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - tail_bytes))
            return fh.read().decode("utf-8", "replace")

    def metrics(self) -> str:
        return self.metrics_cache.text()

    def _metrics_snapshot(self) -> dict:
        with self.lock:
            live = list(self.scheduler.jobs.values())
            records = self.store.list_jobs()
            counters = dict(self.counters)
        states: dict[str, int] = {}
        for rec in records:
            states[rec.state] = states.get(rec.state, 0) + 1
        jobs = [(j.id, j.state, j.workers, j.throughput, j.cpu_percent)
                for j in live if j.state in ACTIVE]
        return {"capacity": self.capacity, "jobs": jobs, "states": states,
                "counters": counters}
