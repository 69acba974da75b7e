"""The node as the REST API sees it: ``NodeApi`` wraps a ``daemon.node.Node`` and implements
``daemon.api.service.NodeService`` over the scheduler, the store and the launcher the node
wires together.

The jobs the node manages are read from memory (the store holds their records, written
through); the history from the store's file, a page at a time (``daemon.store.history``), nothing
of it kept in memory. A submit counts an unknown model's features before it takes
the node's lock, so a slow count never holds up the control loop or another request.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from adloader.errors import ConflictError
from adloader.host import heap
from adloader.rest import JobView, signal_number
from adloader.version import __version__

from ..control.live import ACTIVE, TERMINAL, WAITING
from .metrics import MetricsCache

if TYPE_CHECKING:
    from ..node import Node

# a page whose body is this big or bigger gives its freed blocks back to the system once
# built (``adloader.host.heap``): one of 5,000 jobs (2.2 MB) builds ~7 MB of rows in blocks
# over 512 bytes; the default page of 500 (~0.2 MB) does not pay the ~1 ms
BIG_PAGE_BYTES = 512 * 1024


class NodeApi:
    """``NodeService`` over ``node``: requests take the node's lock where they change or
    read across jobs, apply the scheduler's decisions through ``Node.apply`` and read a
    job's live part without the lock. ``metrics_cache`` serves ``GET /metrics``."""

    def __init__(self, node: Node):
        self.node = node
        self.metrics_cache = MetricsCache(self._metrics_snapshot)

    def submit(self, spec) -> JobView:
        node = self.node
        if spec.gpus > node.gpus:
            raise ConflictError(f"field 'gpus': {spec.gpus} but the node has {node.gpus}")
        if spec.features is None:
            node.features.features(spec.model)  # counted now, outside the lock
        with node.lock:
            job_id = node.store.add_job(spec, "", origin="rest", state="buffered",
                                        supervisor="launcher")
            job = node.live_job(job_id, spec, "", "rest")
            job.supervisor = "launcher"
            node.apply(node.scheduler.add(job))
            return self.job(job_id)

    def _view(self, rec) -> JobView:
        live = self.node.scheduler.jobs.get(rec.id)
        running = live is not None and live.state in ACTIVE
        return JobView.from_record(rec, throughput=live.throughput if running else None,
                                   iteration=live.iteration if live else rec.iteration,
                                   cpu_percent=live.cpu_percent if running else None,
                                   pid=live.pid if live else None)

    def jobs_page(self, query) -> tuple[bytes, str | None]:
        """One page of ``GET /v1/jobs`` (a ``rest.JobQuery``) as JSON, and the next cursor:
        the held jobs' views from ``_job_json``, the history's as the store wrote them."""
        page, cursor = self.node.store.job_page(query)
        parts = [view if rec is None else self._job_json(rec) for _, rec, view in page]
        body = b"[" + b",".join(parts) + b"]"
        if len(body) >= BIG_PAGE_BYTES:
            del page, parts
            heap.trim()  # its rows' blocks, freed: not resident until the next big page
        return body, cursor

    def _job_json(self, rec) -> bytes:
        """A held job's view as JSON: its record's part is serialised once per change of the
        record (kept in the node's ``static_views``), the live part (samples/s, iteration)
        per call — a thousand jobs that heartbeat every second cost a concatenation, not a
        thousand validations. Read without the node's lock: each live field is one attribute
        read (a view may pair one heartbeat's rate with the next one's iteration, never a
        torn value). The view kept for a job that was retired meanwhile is dropped again:
        retirement releases the record before it drops the view, so whichever comes last,
        nothing stays behind."""
        node = self.node
        cache = node.static_views
        kept = cache.get(rec.id)
        if kept is None or kept[0] is not rec:
            body = JobView.from_record(rec).model_dump_json(
                exclude={"throughput", "iteration", "cpu_percent", "pid"})
            kept = cache[rec.id] = (rec, body[1:].encode())
            if not node.store.held(rec.id):  # retired while this view was made
                cache.pop(rec.id, None)
        live = node.scheduler.jobs.get(rec.id)
        running = live is not None and live.state in ACTIVE
        rate = repr(float(live.throughput)) if running else "null"
        done = rec.iteration  # ended and dropped by the scheduler, not yet retired: its last
        step = str(live.iteration) if live else ("null" if done is None else str(done))
        cpu = "null" if not running or live.cpu_percent is None else \
            repr(round(live.cpu_percent, 1))
        pid = live.pid if live and live.pid else "null"
        return (f'{{"throughput":{rate},"iteration":{step},"cpu_percent":{cpu},'
                f'"pid":{pid},'.encode() + kept[1])

    def job(self, job_id: str) -> JobView | None:
        store = self.node.store
        rec = store.get_job(job_id)  # held: from memory; else the history's row
        if rec is None:
            return None
        if not store.held(job_id):
            return JobView.from_record(rec, iteration=rec.iteration)
        return self._view(rec)  # the live part as _job_json reads it: no lock

    def cancel(self, job_id: str, signal: str | None = None) -> JobView | None:
        node = self.node
        sig = signal_number(signal) if signal is not None else None
        with node.lock:
            if node.store.get_job(job_id) is None:
                return None
            live = node.scheduler.jobs.get(job_id)
            if (sig is not None and live is not None and live.supervisor != "launcher"
                    and live.state not in (*WAITING, *TERMINAL)):
                raise ConflictError(f"job {job_id} was not started by the daemon, which signals "
                                 f"only the processes it started"
                                 + (f" (its pid: {live.pid})" if live.pid else ""))
            node.apply(node.scheduler.cancel(job_id, sig))
            return self.job(job_id)

    def pause(self, job_id: str, checkpoint: bool) -> JobView | None:
        return self._unless_ended(job_id, "a running job can pause",
                                  lambda: self.node.scheduler.pause(job_id, checkpoint))

    def resume(self, job_id: str) -> JobView | None:
        return self._unless_ended(job_id, "a paused job can resume",
                                  lambda: self.node.scheduler.resume(job_id))

    def _unless_ended(self, job_id: str, only: str, decide) -> JobView | None:
        """Under the node's lock, ``decide()``'s actions applied to a job that has not
        ended (ConflictError saying that only ``only`` if it has); its view, None for an
        unknown job."""
        node = self.node
        with node.lock:
            rec = node.store.get_job(job_id)
            if rec is None:
                return None
            if rec.state in TERMINAL:
                raise ConflictError(f"job {job_id!r} is {rec.state}: only {only}")
            node.apply(decide())
            return self.job(job_id)

    def allocations(self) -> dict:
        """Each active job's workers, read without the node's lock: the jobs copied in one
        step (``list`` of a dict's values runs whole under the GIL), each count one read."""
        node = self.node
        live = list(node.scheduler.jobs.values())
        jobs = {j.id: j.workers for j in live if j.state in ACTIVE}
        return {"policy": node.config.policy, "capacity": node.capacity, "gpus": node.gpus,
                "jobs": jobs, "node_workers": sum(jobs.values())}

    def node_summary(self) -> dict:
        """Spare loading capacity and the gain of one more worker
        (adloader.scheduling.node_summary),
        and the node cache's room, for a cluster scheduler."""
        from adloader.scheduling.node_summary import summary
        from adloader.scheduling.planner import demands

        node = self.node
        with node.lock:
            sched = node.scheduler
            live = [j for j in sched.jobs.values() if j.state == "running" and j.gpu_ids]
            views = sched._views(live)
            wanted = demands(views, {j.id: j.gpu_ids for j in live}, sched.model, sched.table)
            out = summary({w.name: w.training_rate for w in wanted},
                          {j.id: j.workers for j in live}, sched.capacity, sched.table)
            cache = node.node_cache.summary() if node.node_cache is not None else None
        out["cache"] = cache
        return out

    def events_page(self, query) -> tuple[bytes, str]:
        body, cursor = self.node.store.event_page(query)
        if len(body) >= BIG_PAGE_BYTES:  # a poll that finds a few events does not trim
            heap.trim()
        return body, cursor

    def model(self) -> dict:
        node = self.node
        with node.lock:
            m = node.scheduler.model
        counts = node.store.sample_counts()  # kept by the store: not under the node's lock
        st = m.loading.stages
        online = node.online
        return {
            "source": online.source,
            "refits_skipped": online.skipped,  # the model in use predicted the samples
            "refit_interval_s": online.interval_s,  # doubled while fits do not help
            "fitter": dict(online.fitter.usage) if online.fitter else None,
            "samples": {"training": counts.get("training", 0),
                        "loading": counts.get("loading", 0)},
            "training": {"regressor": m.training.regressor, "r2": m.training.scores},
            "loading": {"regressor": m.loading.regressor, "r2": m.loading.scores,
                        "contention_from": st.contention_from, "saturation_at": st.saturation_at,
                        "slopes": list(st.slopes)},
        }

    def fit_model(self, quiet: bool = False) -> dict:
        """Refit the TPM now (``POST /v1/model/fit``); the model's summary."""
        self.node.online.fit(quiet)
        return self.model()

    def health(self) -> dict:
        node = self.node
        out = {"status": "ok", "version": __version__,
               "uptime_s": round(time.time() - node.started, 1),
               "capacity": node.capacity, "gpus": node.gpus, "pid": os.getpid()}
        if node.store_note:
            out["store"] = node.store_note
        fault = node.store.fault
        if fault is not None:  # writes fail: jobs go on, their records wait in memory
            out["status"] = "degraded"
            out["store_fault"] = fault.to_json()
        if node.dirty:
            out["status"] = "degraded"
            out["unwritten_jobs"] = len(node.dirty)
        return out

    def log_path(self, job_id: str) -> str | None:
        rec = self.node.store.get_job(job_id)
        return None if rec is None else (rec.log_path or "")

    def log(self, job_id: str, tail_bytes: int) -> str | None:
        rec = self.node.store.get_job(job_id)
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
        node = self.node
        with node.lock:
            live = list(node.scheduler.jobs.values())
            counters = dict(node.counters)
        states = node.store.state_counts()  # the jobs kept: the held and the history
        jobs = [(j.id, j.state, j.workers, j.iteration * j.batch_size,
                 j.cpu_s if j.cpu_percent is not None else None)
                for j in live if j.state in ACTIVE]
        return {"capacity": node.capacity, "jobs": jobs, "states": states,
                "counters": counters}
