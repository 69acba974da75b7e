"""The application master (A-Dloader §III-C): applies the daemon's decisions inside a job.

``attach(loader, model=...)`` is the change a training script makes. The master installs
itself as the loader's ``on_batch`` hook; at each batch boundary, in the consumer's thread,
it records the step statistics the heartbeats report and applies the pending commands:
Allocation/Resize → ``loader.resize(d)``; Pause → ``loader.release()``, an optional
checkpoint, ``Paused``, then wait for Resume → ``loader.resize(d)``; Stop (cancel) → raise
``JobCancelled`` (a SystemExit) in the training loop, and if the process is still there
after the grace period, end it (SIGTERM, then SIGKILL). Commands carry a
sequence number; one not newer than the last applied is dropped. In a multi-rank job only
rank 0 talks to the daemon and broadcasts its pending commands to every rank at every
boundary, so all ranks apply the same decision at the same iteration (d is per rank, as
the paper's WAA allocates workers per GPU). Without a daemon it logs one line and the
loader keeps the workers it was built with. At exit the master sends Finish with the exit
status it saw: 0, 1 after an uncaught exception (its last line as ``error``), -2 after
Ctrl-C; a job's supervisor (the launcher, ``adloader run``) reports the exact status.
"""

from __future__ import annotations

import atexit
import os
import queue
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from adloader import env as names
from adloader.host.cpu_group import cpu_group
from adloader.host.threads import FullCollections, named_threads_cpu_s
from adloader.protocol import (
    SUPERVISORS,
    Allocation,
    DataSpec,
    Finish,
    JobFeatures,
    Pause,
    Paused,
    Register,
    Resize,
    Resume,
    Stop,
)

from .channel import Channel
from .channel_handler import ChannelHandler
from .launcher_name import job_name
from .master_state import MasterState
from .node_ranks import NodeGroup, _dist, _rank_world, part_id, topology
from .pause import JobPause

CANCEL_EXIT_CODE = 128 + signal.SIGTERM
PAUSE_POLL_S = 1.0  # how often paused ranks meet to look for Resume
_LAUNCHER_STOP = object()  # queued by stop_requested; made a Stop newer than what it meets


class JobCancelled(SystemExit):
    """Raised in the training loop at the batch boundary after the daemon cancelled the job
    (a SystemExit: ``except Exception`` in a script does not swallow it)."""

    def __init__(self, job: str):
        super().__init__(CANCEL_EXIT_CODE)
        self.job = job

    def __str__(self) -> str:
        return f"job {self.job!r} was cancelled"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class JobMaster:
    """One job's application master; built by ``attach``. It holds the ``MasterState`` it
    shares with its ``ChannelHandler`` (what the channel's thread calls) and its ``JobPause``
    (the workers released, the checkpoint, ``resume_from``)."""

    def __init__(
        self,
        loader=None,
        *,
        job: str,
        token: str = "",
        endpoint: str | None = None,
        features: JobFeatures | None = None,
        workers: int = 0,
        requested: int | None = None,
        checkpoint_dir: str | os.PathLike | None = None,
        state: Callable[[], dict] | None = None,
        log: Callable[[str], None] = _stderr,
        connect_timeout_s: float = 2.0,
        miss_load: Callable[[], float] | None = None,
        supervisor: str | None = None,
        data: DataSpec | None = None,
        on_cache: Callable[[str], None] | None = None,
    ):
        self.loader = loader
        self._miss_load = miss_load
        self._on_cache = on_cache  # the node cache segment the daemon granted (share_cache)
        self.job = job
        self.endpoint = endpoint
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self._token = token
        self._log = log
        self._pid = os.getpid()
        self.rank, self.world_size = _rank_world()
        self.local_rank, self.local_world, self.node, self.nodes = topology(self.rank,
                                                                             self.world_size)
        self._node_group: NodeGroup | None = None  # multi-node: made at the first boundary
        if self.nodes > 1:  # this node's part, registered with this node's daemon
            job = self.job = part_id(job, self.node, self.nodes)
        self._hook_cpu_s = 0.0  # CPU seconds spent in on_batch (full collections apart)
        self._hook_gc_s = 0.0  # full collections that fell in on_batch
        self._resize_cpu_s = 0.0  # of the hook's, the pools a resize started (torch's iter())
        self._collections = FullCollections()  # started with the channel; until then 0
        self._state = MasterState(workers)
        self._handler = ChannelHandler(self._state, job=job, endpoint=endpoint, token=token,
                                       pid=self._pid, log=log)
        self._pause = JobPause(self._state, loader, job=job, rank=self.rank,
                               checkpoint_dir=self.checkpoint_dir, user_state=state, log=log)
        self._finished = False
        self._distributed: bool | None = None  # decided at the first batch boundary
        self._exit_code = 0  # what the master saw of how the process ends
        self._error: str | None = None
        self._stopped_by: str | None = None  # its launcher asked it to stop (stop_requested)
        self.channel: Channel | None = None
        if self.local_rank == 0 and endpoint and features is not None:
            register = Register(job=job, token=token, pid=self._pid, cpu_group=cpu_group(),
                                features=features,
                                workers=min(workers, 1024), requested=requested,
                                world_size=self.local_world,
                                supervisor=supervisor if supervisor in SUPERVISORS else None,
                                name=job_name(features), data=data)
            self._collections.start()
            self.channel = Channel(endpoint, register, self._handler.receive,
                                   self._handler.heartbeat, connect_timeout_s=connect_timeout_s,
                                   on_silent=self._handler.silent,
                                   on_refused=self._handler.refused,
                                   collections=self._collections)
            self.channel.start()
        elif self.local_rank == 0:
            where = endpoint or f"({names.ENDPOINT} unset)"
            log(f"adloader: no daemon at {where}; running with {workers} workers")
        atexit.register(self._at_exit)

    # -- what the script and tests can read ---------------------------------------------
    @property
    def workers(self) -> int:
        """Workers the loader runs with now (0 while paused)."""
        return self._state.workers

    @property
    def applied_seq(self) -> int:
        """Sequence number of the last command applied (-1 before the Allocation)."""
        return self._state.applied_seq

    @property
    def iteration(self) -> int:
        """Batches consumed, counting those before a ``resume_from`` checkpoint."""
        return self._state.iteration

    @property
    def paused(self) -> bool:
        return self._state.paused

    @property
    def connected(self) -> bool:
        """Whether the daemon has answered with an Allocation."""
        return self.channel is not None and self.channel.allocated.is_set()

    def wait_connected(self, timeout_s: float | None = None) -> bool:
        """Block until the daemon answered, refused, or ``connect_timeout_s`` passed."""
        if self.channel is None:
            return False
        self.channel.settled.wait(timeout_s)
        return self.connected

    # -- what the script and its launcher call ------------------------------------------
    def stop_requested(self, by: str) -> None:
        """Its launcher asked the job to stop (Slurm's SIGTERM on ``scancel`` or a time
        limit): it ends at the next batch boundary as if the daemon had cancelled it
        (``JobCancelled``), and its Finish says who asked. Safe in a signal handler. With
        several ranks, rank 0's request is the one broadcast, as the daemon's would be."""
        if self._stopped_by is None:
            self._stopped_by = by
            self._state.commands.put(_LAUNCHER_STOP)  # its seq is given when taken: see _take

    def note_exception(self, kind: type, value: BaseException) -> None:
        """What ends the process (from the except hook): Ctrl-C, or an uncaught error."""
        if issubclass(kind, KeyboardInterrupt):
            self._exit_code, self._error = -signal.SIGINT, "KeyboardInterrupt"
        elif not issubclass(kind, SystemExit):
            self._exit_code = 1
            self._error = f"{kind.__name__}: {value}"[:1000]

    # -- the consumer's thread ----------------------------------------------------------
    def cpu_s(self) -> float:
        """CPU seconds the master cost this job so far: its channel thread, libzmq's I/O
        threads and the batch hook (what ``bench live`` counts as its overhead); the
        process's full collections that fell in them are ``gc_s``, not this."""
        channel = self.channel.cpu_s if self.channel is not None else 0.0
        return channel + self._hook_cpu_s + named_threads_cpu_s("ZMQbg")

    def resize_cpu_s(self) -> float:
        """Of ``cpu_s``, what the loader spent applying the daemon's resizes in this thread:
        forking the workers added (~8 ms of the trainer's CPU a worker here) or retiring
        some; to or from no workers, starting a pool and stopping the old one."""
        return self._resize_cpu_s

    def gc_s(self) -> float:
        """CPU seconds of the process's full collections that ran in the master's threads."""
        channel = self.channel.gc_s if self.channel is not None else 0.0
        return channel + self._hook_gc_s

    def on_batch(self, stats) -> None:
        """The loader hook: record ``stats`` (a BatchStats), then apply pending commands."""
        if os.getpid() != self._pid or self._finished:
            return
        began = time.thread_time()
        gc_began = self._collections.spent()
        try:
            self._on_batch(stats)
        finally:
            collected = self._collections.spent() - gc_began
            self._hook_gc_s += collected
            self._hook_cpu_s += time.thread_time() - began - collected

    def _on_batch(self, stats) -> None:
        self._state.record(stats)
        for command in self._exchange(self._take()):
            self._apply(command)

    def apply_pending(self) -> None:
        """Apply what the daemon sent so far, now (single rank: no batch boundary needed)."""
        for command in self._take():
            self._apply(command)

    def _take(self, timeout_s: float | None = None) -> list:
        """What the daemon sent since the last call; the launcher's stop, if asked, last,
        with a seq newer than any of them and than the last applied (given any sooner, a
        resize the daemon numbered alike would make it stale, and the job would train on
        until its launcher's SIGKILL)."""
        out = []
        commands = self._state.commands
        try:
            if timeout_s is not None:
                out.append(commands.get(timeout=timeout_s))
            while True:
                out.append(commands.get_nowait())
        except queue.Empty:
            pass
        if any(c is _LAUNCHER_STOP for c in out):
            out = [c for c in out if c is not _LAUNCHER_STOP]
            newest = max([self._state.applied_seq, *(c.seq for c in out)])
            out.append(Stop(seq=newest + 1, grace_s=0.0))
        return out

    def _exchange(self, commands: list) -> list:
        """Rank 0's commands, the same on every rank (a broadcast when multi-rank)."""
        if self._distributed is None:
            self._distributed = _dist() is not None and self.world_size > 1
        if not self._distributed:
            return commands
        if self.nodes > 1:  # the node's master's commands, to the node's ranks
            return self._group().broadcast(commands or None) or []
        box = [commands or None]
        _dist().broadcast_object_list(box, src=0)
        return box[0] or []

    def _group(self) -> NodeGroup:
        if self._node_group is None:
            self._node_group = NodeGroup(_dist(), self.rank, self.local_world, self.nodes)
        return self._node_group

    def _apply(self, command) -> None:
        state = self._state
        if command.seq <= state.applied_seq:
            return  # stale: queued while we were away, or already applied
        if isinstance(command, Stop):
            state.applied_seq = command.seq
            by = f" by {self._stopped_by}" if self._stopped_by else ""
            self._exit_code, self._error = CANCEL_EXIT_CODE, f"cancelled{by}"
            raise JobCancelled(self.job)
        if isinstance(command, Pause):
            self._apply_pause(command)
            return
        if isinstance(command, Allocation) and command.cache and self._on_cache is not None:
            self._on_cache(command.cache)  # before the workers (re)start: they inherit it
        if isinstance(command, Allocation | Resize | Resume):
            state.target = command.workers
            if not state.paused or isinstance(command, Resume):
                if state.paused:  # the next beat's interval starts now, not at the last
                    with state.lock:  # batch before the pause: its rate is the job's
                        state.reset_interval()
                state.paused = False
                self._resize(command.workers)
        state.applied_seq = command.seq

    def _apply_pause(self, command: Pause) -> None:
        """Release the workers, checkpoint if asked, say Paused; wait for Resume if new."""
        waiting = self._state.paused  # already paused: only answer again
        path = self._pause.release(command)
        self._exchange([])  # every rank has released (and rank 0 saved) before Paused
        self._state.applied_seq = command.seq
        if self.channel is not None:
            self.channel.post(Paused(job=self.job, token=self._token, seq=command.seq,
                                     checkpoint=str(path) if path else None))
        while not waiting and self._state.paused and not self._finished:
            for later in self._exchange(self._take(PAUSE_POLL_S) if self.local_rank == 0
                                        else []):
                self._apply(later)

    def resume_from(self, path: str | os.PathLike | None = None, *,
                    weights_only: bool = True) -> dict | None:
        """Load a Pause checkpoint after a relaunch (``path`` or ADLOADER_RESUME): the
        loader's state and the iteration count; returns the user's state (what ``state()``
        gave), or None when there is nothing to resume from (``JobPause.resume_from``)."""
        return self._pause.resume_from(path, weights_only=weights_only)

    def _resize(self, workers: int) -> None:
        """The job's workers; with several ranks, this rank's share of them in proportion
        to its predicted miss load (Lobster §4.2) — every rank computes the same split."""
        share = self._rank_share(workers) if self._distributed else workers
        if self.loader is not None:
            began, gc_began = time.thread_time(), self._collections.spent()
            self.loader.resize(share)
            collected = self._collections.spent() - gc_began
            self._resize_cpu_s += time.thread_time() - began - collected
        self._state.workers = workers

    def _rank_share(self, total: int) -> int:
        from adloader.datapath.locality_batch import split_workers

        # without a miss load, the data wait per batch so far: a rank that misses more waits more
        load = (float(self._miss_load()) if self._miss_load is not None
                else self._state.mean_wait())
        if self.nodes > 1:  # the node's share, among the node's ranks
            return int(split_workers(total, self._group().all_gather(max(load, 0.0)))
                       [self.local_rank])
        loads = [0.0] * self.world_size
        _dist().all_gather_object(loads, max(load, 0.0))
        return int(split_workers(total, loads)[self.rank])

    # -- the end --------------------------------------------------------------------------
    def finish(self, exit_code: int = 0) -> None:
        """Send Finish and close the channel; idempotent; a no-op in forked children."""
        if self._finished or os.getpid() != self._pid:
            return
        self._finished = True
        atexit.unregister(self._at_exit)
        if self.channel is not None:
            final = Finish(job=self.job, token=self._token, iterations=self._state.iteration,
                           exit_code=max(min(exit_code, 2**31 - 1), -(2**31)),
                           error=self._error, stopped_by=self._stopped_by)
            self.channel.stop(final if self.channel.allocated.is_set() else None)
        self._collections.stop()

    def _at_exit(self) -> None:
        self.finish(self._exit_code)

    def __enter__(self) -> JobMaster:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.note_exception(exc_type, exc)
            if issubclass(exc_type, SystemExit) and not isinstance(exc, JobCancelled):
                code = exc.code
                self._exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        self.finish(self._exit_code)
