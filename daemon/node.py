"""The node daemon: the scheduler wired to the store, the broker, the launcher and the TPM.

One control thread owns the ZeroMQ broker: it receives masters' messages, ticks the
scheduler (buffers, lost jobs, cancels), reaps exited jobs and sends what the scheduler
decided. The node holds its launched jobs' processes (``daemon.jobs.node_processes``) and
takes up what a previous daemon left when it starts (``daemon.jobs.recovery``). REST threads
call the NodeService methods of the API's wrapper around the node
(``daemon.api.service_impl``); they share the scheduler and the store under one lock and
carry out decisions with ``Node.apply``, which leaves messages in an outbox for the control
thread and wakes it (``Broker.wake``). The loop sleeps up to ``IDLE_TICK_S`` while nothing is
due, ``HOUSEKEEPING_S`` while a job is ending, and until the next window closes: a node with
no jobs or steady ones wakes 4 times a second.

Isolation: every message, every launch, every record write is its own unit of failure. A
frame that raises costs that frame; a job that cannot be launched fails alone with the
reason in its events; a write that fails (a full disk) leaves the job's record marked dirty
and written again at the next tick — the scheduler's memory is the truth meanwhile.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time

from adloader.config import DaemonConfig
from adloader.errors import StorageError
from adloader.host.cpu_group import cpu_group
from adloader.protocol import ProtocolError, Register, replaced
from adloader.rest import JobSpec, RecordedSpec
from adloader.scheduling.model.throughput import ThroughputModel

from .cache.node_cache_host import NodeCacheHost
from .control.broker import Broker
from .control.scheduler import Actions, LiveJob, Scheduler
from .control.slurm_identity import check_slurm_name
from .control.tokens import TokenDigest
from .jobs.job_shares import JobShares
from .jobs.launcher import Launcher
from .jobs.node_processes import JobProcesses, cpu_share_of
from .jobs.recovery import recover
from .model.model_features import FeatureCounter
from .model.online_model import OnlineModel, prior_model
from .model.refit import RefitWorker
from .store.retention import Retention
from .store.retirement import Retirement
from .store.store import FINAL_STATES, Store

log = logging.getLogger("adloader.daemon")
STORE_CHECK_S = 2.0  # how often the daemon looks whether its state file is still there
CPU_READ_S = 6.0  # how often each job's CPU is read (a pass over the node's processes)
LOCK_CHUNK = 8  # messages handled under one hold of the node's lock
HOUSEKEEPING_S = 0.05  # the scheduler's clock ticks at most this often ...
IDLE_TICK_S = 0.25  # ... and at least this often: faster only while something is due
EMULATED_GPUS = 4  # without CUDA: the paper's node (jobs emulate their GPU steps)


class Node:
    """One node's daemon: its scheduler, store, launcher, broker and TPM, and the control
    loop that ties them (``start``, ``stop``, ``alive``). ``apply`` carries out what the
    scheduler decided, from the loop or from a request holding ``lock``."""

    def __init__(self, config: DaemonConfig, model: ThroughputModel | None = None):
        self.config = config
        state = config.state_path
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.chmod(0o700)
        self.tokens = TokenDigest.load(state / "secret")
        self.store = Store(state / "adloader.db", digest=self.tokens.digest)
        self.features = FeatureCounter(state / "model-features.json")
        self.cpu_group = cpu_group()  # the daemon's; a job reporting another is flagged
        self.capacity = config.capacity or _cores()
        found = _cuda_devices()
        self.gpus = config.gpus or found or EMULATED_GPUS
        self.gpus_emulated = not config.gpus and not found  # jobs emulate their steps
        prior = model or prior_model(config.profile, state / "prior-model.json")
        self.lock = threading.RLock()
        self.scheduler = Scheduler(
            capacity=self.capacity, gpus=self.gpus, policy=config.policy, model=prior,
            tokens=self.tokens, arrival_window_s=config.arrival_window_s,
            arrival_settle_s=config.arrival_settle_s, hold_arrivals=config.hold_arrivals,
            completion_window_s=config.completion_window_s, heartbeat_s=config.heartbeat_s,
            lost_timeout_s=config.lost_timeout_s, max_jobs_per_gpu=config.jobs_per_gpu,
            cancel_grace_s=config.cancel_grace_s, clock=time.monotonic,
            cpus_of=cpu_share_of, name_check=self._name_check,
            closed_loop=not config.open_loop, loop_most=config.loop_most)
        self._kernel_pid = 0  # the kernel's pid of the Register being read (0: none)
        self.launcher = Launcher(state, config.control_endpoint)
        self.outbox: collections.deque = collections.deque()
        self.counters = collections.Counter()
        self.dirty: set[str] = set()  # jobs whose record could not be written yet
        self.static_views: dict[str, tuple] = {}  # held job id -> (record, its JSON): pages
        self.store_note: str | None = self.store.identity_note  # not the folder's last one
        if self.store_note:
            log.error("%s", self.store_note)
            self._record_event(None, "store_lost", {"note": self.store_note})
        self.started = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.loop_at = time.monotonic()
        self._next_cpu_read = 0.0  # the next reading of the jobs' CPU (CPU_READ_S)
        self.online = OnlineModel(prior, self.store, self.scheduler, self.lock,
                                  self._record_event, RefitWorker(str(state)))
        self.shares = JobShares(config.cpu_shares, self._record_event,
                                config.cpu_share_rule) \
            if config.cpu_shares else None
        self.processes = JobProcesses(self.store, self.scheduler, self.launcher, self.tokens,
                                      self.shares, self.counters, self._record_event)
        self.node_cache = (NodeCacheHost(config.node_cache_mb << 20, self._record_event,
                                         self.lock) if config.node_cache_mb else None)
        self.retention = Retirement(
            Retention(config.retain_days * 86400, config.retain_jobs, config.retain_events),
            self.store, self.scheduler, self.online, self.launcher, self.static_views,
            self._record_event)
        for job_id, status in recover(self.store, self.scheduler, self.launcher, self.gpus,
                                      self.live_job, self._record_event):
            self.apply(self.processes.exited(job_id, status))

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self.broker = Broker(self.config.control_endpoint, self.config.socket_group or None)
        self._thread = threading.Thread(target=self._loop, name="adloader-control", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving: the control loop ends, the socket is removed, the store flushed and
        closed. Running jobs keep training and re-attach to the next daemon."""
        self._stop.set()
        if hasattr(self, "broker"):
            self.broker.wake()
        if self._thread:
            self._thread.join(5)
        broker = getattr(self, "broker", None)
        if broker:
            broker.close()
        self.online.close()
        with self.lock:
            self._guarded("store check", self._check_store)  # a deleted store: written back
            self._resync()
            self._record_store_faults()
            self.store.close()
            if self.node_cache is not None:
                self.node_cache.close()

    def alive(self, timeout_s: float) -> bool:
        """The control loop turned lately and the node's lock is free within ``timeout_s``
        (systemd's watchdog asks: a stuck daemon stays silent and is restarted)."""
        if self._thread is None or not self._thread.is_alive():
            return False
        if time.monotonic() - self.loop_at > timeout_s + 1.0:
            return False
        if not self.lock.acquire(timeout=timeout_s):
            return False
        self.lock.release()
        return True

    def _loop(self) -> None:
        next_check = next_tick = 0.0
        while not self._stop.is_set():
            self.loop_at = time.monotonic()  # the watchdog's sign of life (daemon.ops.systemd)
            try:
                received = self.broker.poll(int(self._wait_s(next_tick) * 1000))
            except Exception:  # never: poll reports bad frames as entries
                log.exception("control socket")
                self.counters["loop_errors"] += 1
                time.sleep(0.1)
                continue
            for start in range(0, len(received), LOCK_CHUNK):  # REST waits one chunk at most
                with self.lock:
                    for identity, msg in received[start:start + LOCK_CHUNK]:
                        self._guarded("message", self._receive, identity, msg)
                time.sleep(0)  # the GIL to a request waiting for the lock, before the next
            now = time.monotonic()
            if now >= next_tick:  # O(jobs): not once per message when a thousand arrive
                next_tick = now + HOUSEKEEPING_S
                with self.lock:
                    self._housekeeping(now >= next_check)
                if now >= next_check:
                    next_check = now + STORE_CHECK_S
                    self._guarded("retention", self.retention.prune, self.lock)
            with self.lock:
                sends = list(self.outbox)
                self.outbox.clear()
            for identity, msg in sends:
                if identity is None or not self._guarded("send", self.broker.send, identity,
                                                         msg):
                    self.counters["undelivered"] += 1

    def _wait_s(self, next_tick: float) -> float:
        """How long the loop may wait for messages: IDLE_TICK_S, less while a window closes
        sooner, HOUSEKEEPING_S while a job is ending or a record or orphan waits. What a
        REST request changes wakes it at once (``apply``)."""
        now = time.monotonic()
        if (self.scheduler.ending or self.processes.orphans or self.dirty
                or self.store.fault):
            wait = HOUSEKEEPING_S
        elif self.scheduler.flush_at is not None:
            wait = min(IDLE_TICK_S, self.scheduler.flush_at - self.scheduler.clock())
        else:
            wait = IDLE_TICK_S
        return max(wait, next_tick - now, 0.001)

    def _housekeeping(self, check_store: bool) -> None:
        """The clock's work: lost jobs, windows, cancels; exits; samples; the store."""
        self._guarded("tick", lambda: self.apply(self.scheduler.tick()))
        if self.online.pending:
            self._guarded("samples", self.online.flush)
        for job_id, status in self.launcher.reap():
            self._guarded("exit", lambda j=job_id, s=status: self.apply(
                self.processes.exited(j, s)))
        for job_id, pid in self.launcher.new_job_pids():
            self._guarded("job pid", self.processes.job_started, job_id, pid)
        # memory lets an ended job go at once (a burst of endings is not held for a check)
        self._guarded("retirement", self.retention.retire, self.dirty, self.processes.orphans)
        if check_store:
            self._guarded("store check", self._check_store)
            if time.monotonic() >= self._next_cpu_read:
                self._next_cpu_read = time.monotonic() + CPU_READ_S
                self._guarded("cpu", self.processes.measure_cpu)
            if not self.config.capacity:  # automatic: follow the cgroup (in-place pod resize)
                self._guarded("capacity", self._follow_capacity)
        if self.dirty:
            self._resync()
        if self.store.recovered:
            self._record_store_faults()
        if self.processes.orphans:
            self._guarded("orphans", self._settle_orphans)

    def _follow_capacity(self) -> None:
        """The node's capacity from its cgroup, re-read: a change re-plans every job."""
        now = _cores()
        if now != self.capacity:
            log.info("capacity %d -> %d workers (cgroup)", self.capacity, now)
            self._record_event(None, "capacity", {"workers": now, "was": self.capacity})
            self.capacity = now
            self.apply(self.scheduler.set_capacity(now))

    def _guarded(self, what: str, fn, *args):
        """Run one unit of work; a failure costs that unit only."""
        try:
            return fn(*args)
        except StorageError as exc:
            self.counters["storage_errors"] += 1
            log.error("%s: %s", what, exc)
        except Exception:
            self.counters["loop_errors"] += 1
            log.exception("%s failed", what)
        return None

    def _receive(self, identity: bytes, msg) -> None:
        if isinstance(msg, ProtocolError):
            self.counters["dropped_frames"] += 1
            log.warning("dropped a frame from %r: %s", identity[:64], msg)
            return
        self.counters["unknown_fields"] += msg.unknown_fields  # a newer master's, ignored
        peer, register = self.broker.peer(identity), isinstance(msg, Register)  # who, by the kernel
        if register and peer is not None and peer.pid != msg.pid:  # its word over the job's
            msg = replaced(msg, pid=peer.pid)
        self._kernel_pid = peer.pid if register and peer is not None else 0
        actions = self.scheduler.message(identity, msg, peer.uid if peer is not None else None)
        if actions.reply:
            self.counters["refused_messages"] += 1
            log.warning("refused %s for job %r: %s", msg.type, msg.job[:64],
                        actions.reply[0][1].reason)
        elif register and peer is not None and self.shares is not None:  # by hand: its group
            self.shares.adopt(self.scheduler.jobs.get(msg.job), peer)
        self.apply(actions)

    def _name_check(self, name: str, pid: int) -> tuple[bool | None, str]:
        """A Slurm name against the Slurm job its process is in — only a pid the kernel gave
        (a ``tcp://`` job states its own, which could name a process inside another's job)."""
        return check_slurm_name(name, pid if pid and pid == self._kernel_pid else 0)

    def apply(self, actions: Actions) -> None:
        """Carry out what the scheduler decided: launches, records, events, samples,
        signals and messages (sent by the control loop, woken when another thread
        applies). The caller holds ``lock`` once the node has started."""
        if self.node_cache is not None:
            self.node_cache.route(actions, self.scheduler.jobs)
        for job in actions.launch:
            self._guarded("launch", self._launch, job)
        for job in actions.changed:
            self._persist(job)
        for job_id, kind, data in actions.events:
            self._record_event(job_id, kind, data)
            if kind == "attached":
                self._flag_cpu_group(job_id, data.get("cpu_group"))
        self.online.take(self.shares.for_the_model(actions.samples) if self.shares
                         else actions.samples)
        for job_id, sig in actions.kill:
            if not self.launcher.signal(job_id, sig):
                log.info("%s: no process group to signal", job_id)
        for job_id, msg in actions.send:
            job = self.scheduler.jobs.get(job_id)
            self.outbox.append((job.peer if job else None, msg))
        self.outbox.extend(actions.reply)
        if self.shares is not None and (actions.launch or actions.changed):
            # not on every heartbeat: on a decision
            self.shares.follow(self.scheduler.jobs, self.scheduler.table)
        self.online.maybe_refit()
        if threading.current_thread() is not self._thread and hasattr(self, "broker"):
            self.broker.wake()  # a request's sends and windows: now, not at the next tick

    def _launch(self, job: LiveJob) -> None:
        unlaunched = self.processes.launch(job)
        if unlaunched is not None:
            self.apply(unlaunched)

    def _settle_orphans(self) -> None:
        for actions in self.processes.watch_orphans():
            self.apply(actions)

    def _persist(self, job: LiveJob) -> None:
        if job.origin == "attached" and self.store.get_job(job.id) is None:
            self._guarded("record", self._store_attached, job)
        fields = {"state": job.state, "workers": job.workers, "uid": job.uid}
        if job.state in FINAL_STATES:
            fields.update(finished_at=time.time(), exit_code=job.exit_code, reason=job.reason,
                          iteration=job.iteration)
        try:
            self.store.update_job(job.id, **fields)
            self.dirty.discard(job.id)
        except StorageError as exc:
            self.counters["storage_errors"] += 1
            if job.id not in self.dirty:
                log.error("%s: record not written yet: %s", job.id, exc)
            self.dirty.add(job.id)

    def _resync(self) -> None:
        for job_id in list(self.dirty):
            job = self.scheduler.jobs.get(job_id)
            if job is None:
                self.dirty.discard(job_id)
            else:
                self._persist(job)

    def _record_event(self, job_id: str | None, kind: str, data: dict) -> None:
        try:
            self.store.add_event(job_id, kind, data)
        except StorageError as exc:
            self.counters["storage_errors"] += 1
            log.error("event %s of %s not recorded: %s", kind, job_id, exc)

    def _record_store_faults(self) -> None:
        """Writes went through again: the fault, then its end, as events (neither could be
        written while it lasted)."""
        ended, self.store.recovered = self.store.recovered, []
        for fault in ended:
            log.warning("the state database takes writes again after %.1f s (%s)",
                        time.time() - fault.since, fault.cause)
            with contextlib.suppress(StorageError):
                self.store.add_event(None, "store_fault", {"cause": fault.cause,
                                                           "message": fault.message},
                                     t=fault.since)
                self.store.add_event(None, "store_recovered", {
                    "cause": fault.cause, "for_s": round(time.time() - fault.since, 1)})

    def _check_store(self) -> None:
        if self.store.fault is not None:  # nothing else may write for a while: try now
            with contextlib.suppress(StorageError):
                self.store.probe()
        note = self.store.restore_if_gone()
        if note:
            self.store_note = note
            log.error("%s", note)
            self._record_event(None, "store_restored", {"note": note})
            self.dirty.update(self.scheduler.jobs)

    def _store_attached(self, job: LiveJob) -> None:
        """A job started by hand gets a record like a submitted one (its own id)."""
        import re

        name = re.sub(r"[^A-Za-z0-9._-]", "-", job.name or job.id)[:64] or "attached"
        spec = RecordedSpec(name=name, command=["(started by hand)"],  # it may state no
                            batch_size=job.batch_size, gpus=job.gpus,  # length
                            iterations=job.iterations,
                            features={"flops_g": job.flops_g, "params_m": job.params_m})
        self.store.add_job(spec, job.token_digest, origin="attached", state="running",
                           job_id=job.id, supervisor=job.supervisor)

    def _flag_cpu_group(self, job_id: str, group: str | None) -> None:
        from adloader.host.cpu_group import separate_cpu_group

        if self.shares is not None and self.shares.has_group(job_id):
            return  # in a CPU cgroup of its own: the session's autogroup does not apply
        if separate_cpu_group(group, self.cpu_group):
            self._record_event(job_id, "separate_cpu_group", {"note": CPU_GROUP_NOTE})
            log.warning("%s: %s", job_id, CPU_GROUP_NOTE)

    def live_job(self, job_id: str, spec: JobSpec, token_digest: str, origin: str) -> LiveJob:
        """A job's ``LiveJob`` from its spec, its model's features counted when it ships
        none."""
        if spec.features is not None:
            flops_g, params_m = spec.features.flops_g, spec.features.params_m
        else:
            feat = self.features.features(spec.model)
            flops_g, params_m = feat.flops_g, feat.params_m
        return LiveJob(job_id, token_digest, spec.batch_size, spec.gpus, flops_g, params_m,
                       spec.iterations, spec.workers, origin, submitted=time.time())


CPU_GROUP_NOTE = ("started in another session while the kernel's autogroup is on: the kernel "
                  "shares the CPU per session, so its workers only partly set its loading "
                  "rate; start it with `adloader submit` or from the daemon's session")


def _cores() -> int:
    """The cores this process may use, cut to its cgroup's CPU quota or cpuset."""
    from adloader.host.cgroup import capacity
    from adloader.host.cores import node_cores

    return capacity(node_cores())


def _cuda_devices() -> int:
    from adloader.host.cores import cuda_devices

    return cuda_devices()
