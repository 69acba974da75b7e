"""The node daemon: the scheduler wired to the store, the broker, the launcher and the TPM.

One control thread owns the ZeroMQ broker: it receives masters' messages, ticks the
scheduler (buffers, lost jobs), reaps exited jobs and sends what the scheduler decided.
REST threads call the NodeService methods; they share the scheduler and the store under
one lock and leave messages in an outbox for the control thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import secrets
import threading
import time
from pathlib import Path

from adloader.client.cpu_group import cpu_group, separate_cpu_group
from adloader.config import DaemonConfig
from adloader.daemon.broker import Broker
from adloader.daemon.launcher import Launcher, job_cpu_percent
from adloader.daemon.scheduler import ACTIVE, Actions, LiveJob, Scheduler
from adloader.daemon.service import JobView
from adloader.daemon.store import FINAL_STATES, Store
from adloader.errors import InputError
from adloader.jobspec import JobSpec
from adloader.models import features
from adloader.protocol import ProtocolError
from adloader.throughput import LoadingRateModel, ThroughputModel, TrainingRateModel

log = logging.getLogger("adloader.daemon")
REFIT_EVERY = 10  # new samples between online refits ...
REFIT_INTERVAL_S = 20.0  # ... and at most one refit in this long
SAMPLE_INTERVAL_S = 2.0  # one sample per job in this long (heartbeats come faster)
FIT_WINDOW = 2000  # the newest samples of each kind a fit uses
CPU_GROUP_NOTE = ("started in another session while the kernel's autogroup is on: the kernel "
                  "shares the CPU per session, so its workers only partly set its loading "
                  "rate; start it with `adloader submit` or from the daemon's session")
MIN_REAL = 6  # real samples of a kind before they replace the prior


def prior_model(profile_name: str, seed: int = 0) -> ThroughputModel:
    """The TPM a node starts with, before its own heartbeats: fitted from noisy samples of a
    device profile (``paper`` unless configured; ``adloader profile`` measures this one)."""
    from adloader.workloads import synth
    from adloader.workloads.profile import load_profile

    profile = load_profile(profile_name or "paper")
    training, loading = synth.samples(profile, seed)
    return ThroughputModel.fit(training, loading, seed)


class Node:
    def __init__(self, config: DaemonConfig, model: ThroughputModel | None = None):
        self.config = config
        state = config.state_path
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store = Store(state / "adloader.db")
        self.cpu_group = cpu_group()  # the daemon's; a job reporting another is flagged
        self.capacity = config.capacity or _cores()
        self.gpus = config.gpus or _cuda_devices() or 1
        self.prior = model or prior_model(config.profile)
        self.model_source = "prior"
        self.lock = threading.RLock()
        self.scheduler = Scheduler(
            capacity=self.capacity, gpus=self.gpus, policy=config.policy, model=self.prior,
            arrival_window_s=config.arrival_window_s,
            completion_window_s=config.completion_window_s, heartbeat_s=config.heartbeat_s,
            lost_timeout_s=config.lost_timeout_s, max_jobs_per_gpu=config.jobs_per_gpu,
            clock=time.monotonic)
        self.launcher = Launcher(state / "logs", config.control_endpoint)
        self.outbox: collections.deque = collections.deque()
        self.counters = collections.Counter()
        self.new_samples = 0
        self.last_refit = 0.0
        self.refitting = False
        self.last_sample: dict[str, float] = {}
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._refit_lock = threading.Lock()
        self._recover()

    # -- lifecycle -------------------------------------------------------------------
    def _recover(self) -> None:
        """Jobs a previous daemon left: running ones get a grace period to reconnect."""
        grace = time.monotonic() + 5.0
        for rec in self.store.list_jobs():
            if rec.state in FINAL_STATES:
                continue
            job = self._live(rec.id, rec.spec, rec.token, rec.origin)
            job.workers = rec.workers or 0
            job.submitted = rec.submitted_at
            if rec.state in ACTIVE:
                job.state, job.last_seen, job.registered = "running", grace, True
                job.gpu_ids = tuple(range(min(job.gpus, self.gpus)))
            self.scheduler.add(job)
            self.store.add_event(rec.id, "recovered", {"state": rec.state})

    def start(self) -> None:
        self.broker = Broker(self.config.control_endpoint)
        self._thread = threading.Thread(target=self._loop, name="adloader-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        broker = getattr(self, "broker", None)
        if broker:
            broker.close()
        self.store.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                received = self.broker.poll(50)
                with self.lock:
                    for identity, msg in received:
                        self._receive(identity, msg)
                    self._apply(self.scheduler.tick())
                    for job_id, code in self.launcher.reap():
                        # killed by a signal: lost mid-step; a non-zero exit: failed
                        state = "finished" if code == 0 else "lost" if code < 0 else "failed"
                        self._apply(self.scheduler.finished(job_id, state, code))
                        self.store.update_job(job_id, exit_code=code)
                    sends = list(self.outbox)
                    self.outbox.clear()
                for job_id, msg in sends:
                    if not self.broker.send(job_id.encode(), msg):
                        self.counters["undelivered"] += 1
            except Exception:  # the control loop must survive anything a job sends
                log.exception("control loop")
                self.counters["loop_errors"] += 1
                time.sleep(0.1)

    def _receive(self, identity: bytes, msg) -> None:
        if isinstance(msg, ProtocolError):
            self.counters["dropped_frames"] += 1
            log.warning("dropped a frame from %r: %s", identity[:64], msg)
            return
        try:
            who = identity.decode()
        except UnicodeDecodeError:
            self.counters["dropped_frames"] += 1
            return
        actions = self.scheduler.message(who, msg)
        if any(kind == "refused" for _, kind, _ in actions.events):
            self.counters["refused_messages"] += 1
            log.warning("refused %s from %r for job %r", msg.type, who, msg.job)
        self._apply(actions)

    def _apply(self, actions: Actions) -> None:
        now = time.time()
        for job in actions.launch:
            rec = self.store.get_job(job.id)
            spec = rec.spec
            try:
                started = self.launcher.start(job.id, job.token, spec.command, spec.cwd,
                                              spec.env, job.workers, job.gpu_ids)
            except OSError as exc:
                self.store.add_event(job.id, "launch_failed", {"error": str(exc)})
                self._apply(self.scheduler.finished(job.id, "failed"))
                continue
            self.store.update_job(job.id, pid=started.pid, log_path=started.log_path,
                                  started_at=now)
            self.store.add_event(job.id, "launched", {"pid": started.pid,
                                                      "workers": job.workers,
                                                      "gpu_ids": list(job.gpu_ids)})
        for job in actions.changed:
            if job.origin == "attached" and self.store.get_job(job.id) is None:
                self._store_attached(job)
            fields = {"state": job.state, "workers": job.workers}
            if job.state in FINAL_STATES:
                fields["finished_at"] = now
                if job.exit_code is not None:
                    fields["exit_code"] = job.exit_code
            self.store.update_job(job.id, **fields)
        for job_id, kind, data in actions.events:
            self.store.add_event(job_id, kind, data)
            if kind == "attached" and separate_cpu_group(data.get("cpu_group"), self.cpu_group):
                self.store.add_event(job_id, "separate_cpu_group", {"note": CPU_GROUP_NOTE})
                log.warning("%s: %s", job_id, CPU_GROUP_NOTE)
        for job_id, sample in actions.samples:
            key = f"{job_id}/{type(sample).__name__}"
            if time.monotonic() - self.last_sample.get(key, -1e9) >= SAMPLE_INTERVAL_S:
                self.last_sample[key] = time.monotonic()
                self.store.add_sample(job_id, sample)
                self.new_samples += 1
        if (self.new_samples >= REFIT_EVERY and not self.refitting
                and time.monotonic() - self.last_refit >= REFIT_INTERVAL_S):
            self.new_samples, self.refitting = 0, True
            self.last_refit = time.monotonic()
            threading.Thread(target=self._refit_quietly, daemon=True).start()
        self.outbox.extend(actions.send)

    def _store_attached(self, job: LiveJob) -> None:
        """A job started by hand gets a record like a submitted one (its own id)."""
        import re

        from adloader.jobspec import JobSpec

        name = re.sub(r"[^A-Za-z0-9._-]", "-", job.id)[:64] or "attached"
        spec = JobSpec(name=name, command=["(started by hand)"], batch_size=job.batch_size,
                       gpus=job.gpus, iterations=job.iterations,
                       features={"flops_g": job.flops_g, "params_m": job.params_m})
        self.store.add_job(spec, job.token, origin="attached", state="running",
                           job_id=job.id)

    # -- the online model ------------------------------------------------------------
    def _refit_quietly(self) -> None:
        with contextlib.suppress(InputError):
            self.fit_model(quiet=True)

    def fit_model(self, quiet: bool = False) -> dict:
        """Refit from the node's own samples; each part keeps the prior until it has some."""
        with self._refit_lock:
            with self.lock:
                training, loading = self.store.samples()
            training, loading = training[-FIT_WINDOW:], loading[-FIT_WINDOW:]
            if not quiet and len(training) < MIN_REAL and len(loading) < MIN_REAL:
                raise InputError(f"too few samples to refit: {len(training)} training, "
                                 f"{len(loading)} loading (need {MIN_REAL} of one kind)")
            part_t = (TrainingRateModel.fit(training) if len(training) >= MIN_REAL
                      else self.prior.training)
            spread = len({s.node_workers for s in loading})  # stages need several totals
            part_l = (LoadingRateModel.fit(loading) if len(loading) >= MIN_REAL and spread >= 4
                      else self.prior.loading)
            model = ThroughputModel(part_t, part_l)
            with self.lock:
                self.scheduler.set_model(model)
                self.model_source = "online"
                self.store.save_model(model.to_json())
                self.store.add_event(None, "model_fit", {"training": len(training),
                                                         "loading": len(loading)})
            return self.model()

    # -- NodeService -------------------------------------------------------------------
    def _live(self, job_id: str, spec: JobSpec, token: str, origin: str) -> LiveJob:
        if spec.features is not None:
            flops_g, params_m = spec.features.flops_g, spec.features.params_m
        else:
            feat = features(spec.model)
            flops_g, params_m = feat.flops_g, feat.params_m
        return LiveJob(job_id, token, spec.batch_size, spec.gpus, flops_g, params_m,
                       spec.iterations, spec.workers, origin, submitted=time.time())

    def submit(self, spec: JobSpec) -> JobView:
        if spec.gpus > self.gpus:
            raise InputError(f"field 'gpus': {spec.gpus} but the node has {self.gpus}")
        token = secrets.token_hex(16)
        with self.lock:
            job_id = self.store.add_job(spec, token, origin="rest", state="buffered")
            self._apply(self.scheduler.add(self._live(job_id, spec, token, "rest")))
            return self.job(job_id)

    def _view(self, rec) -> JobView:
        live = self.scheduler.jobs.get(rec.id)
        running = live is not None and live.state in ACTIVE
        return JobView.from_record(rec, throughput=live.throughput if running else None,
                                   iteration=live.iteration if live else None)

    def jobs(self) -> list[JobView]:
        with self.lock:
            return [self._view(r) for r in self.store.list_jobs()]

    def job(self, job_id: str) -> JobView | None:
        with self.lock:
            rec = self.store.get_job(job_id)
            return self._view(rec) if rec else None

    def cancel(self, job_id: str) -> JobView | None:
        with self.lock:
            rec = self.store.get_job(job_id)
            if rec is None:
                return None
            if rec.state in FINAL_STATES:
                return self._view(rec)
            live = self.scheduler.jobs.get(job_id)
            running = live is not None and live.state in ACTIVE
        if running:
            self.launcher.stop(job_id, rec.pid)
        with self.lock:
            self._apply(self.scheduler.finished(job_id, "cancelled"))
            return self._view(self.store.get_job(job_id))

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

    def events(self, since: int, limit: int) -> list[dict]:
        with self.lock:
            return self.store.events(since, limit)

    def model(self) -> dict:
        with self.lock:
            m = self.scheduler.model
            training, loading = self.store.samples()
        st = m.loading.stages
        return {
            "source": self.model_source,
            "samples": {"training": len(training), "loading": len(loading)},
            "training": {"regressor": m.training.regressor, "r2": m.training.scores},
            "loading": {"regressor": m.loading.regressor, "r2": m.loading.scores,
                        "contention_from": st.contention_from, "saturation_at": st.saturation_at,
                        "slopes": list(st.slopes)},
        }

    def health(self) -> dict:
        return {"status": "ok", "uptime_s": round(time.time() - self.started, 1),
                "capacity": self.capacity, "gpus": self.gpus}

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
        with self.lock:
            jobs = list(self.scheduler.jobs.values())
            recs = {r.id: r for r in self.store.list_jobs()}
            counters = dict(self.counters)
        lines = [
            "# TYPE adloader_capacity_workers gauge",
            f"adloader_capacity_workers {self.capacity}",
            "# TYPE adloader_node_workers gauge",
            f"adloader_node_workers {sum(j.workers for j in jobs if j.state in ACTIVE)}",
            "# TYPE adloader_jobs gauge",
        ]
        states = collections.Counter(r.state for r in recs.values())
        lines += [f'adloader_jobs{{state="{s}"}} {n}' for s, n in sorted(states.items())]
        lines += ["# TYPE adloader_job_workers gauge", "# TYPE adloader_job_samples_per_second "
                  "gauge", "# TYPE adloader_job_cpu_percent gauge"]
        for j in jobs:
            if j.state in ACTIVE:
                pid = recs[j.id].pid if j.id in recs else None
                lines.append(f'adloader_job_workers{{job="{j.id}"}} {j.workers}')
                lines.append(f'adloader_job_samples_per_second{{job="{j.id}"}} {j.throughput:.3f}')
                lines.append(f'adloader_job_cpu_percent{{job="{j.id}"}} '
                             f"{job_cpu_percent(pid):.1f}")
        for name in ("dropped_frames", "refused_messages", "undelivered", "loop_errors"):
            lines += [f"# TYPE adloader_{name}_total counter",
                      f"adloader_{name}_total {counters.get(name, 0)}"]
        return "\n".join(lines) + "\n"


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _cuda_devices() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0
