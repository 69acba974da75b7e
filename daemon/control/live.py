"""What the scheduler tracks of each job (``LiveJob``), what one scheduler step asks the node
to do (``Actions``, a refusal among them), and the job states (A-Dloader §III-C's life
cycle, made truthful)."""

from __future__ import annotations

import math
import signal as signals
from dataclasses import dataclass, field

from adloader.protocol import DataSpec, Finish, Refused
from adloader.scheduling.model.intake import IntakeCeiling
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

ACTIVE = ("running", "paused")
WAITING = ("buffered", "queued")
TERMINAL = ("finished", "failed", "cancelled")  # never left again
ENDED = (*TERMINAL, "lost")
RESERVED_ID = "j-"  # ids the daemon gives submitted jobs; a job started by hand may not


@dataclass
class LiveJob:
    """What the scheduler tracks of one job."""

    id: str
    token_digest: str
    batch_size: int
    gpus: int
    flops_g: float
    params_m: float
    iterations: int | None
    requested: int | None = None
    origin: str = "rest"  # rest | attached
    name: str = ""  # a job started by hand: what it calls itself
    state: str = "buffered"
    workers: int = 0
    gpu_ids: tuple[int, ...] = ()
    seq: int = 0  # last command sent
    iteration: int = 0
    throughput: float = 0.0
    step_s: float = 0.0
    data_wait_s: float = 0.0
    last_seen: float = 0.0
    submitted: float = 0.0
    registered: bool = False  # heard from its master: only then can it be lost
    exit_code: int | None = None
    reason: str | None = None  # how it ended, in words
    supervisor: str | None = None  # "launcher" or "run": who reports the exit status
    peer: bytes | None = None  # the connection that last proved the token
    ending_since: float | None = None  # its master said Finish; the exit status is awaited
    finish: Finish | None = None  # what the master said
    cancel_at: float | None = None  # a cancel was asked at this time
    signalled: int = 0  # signals sent to stop it (launched jobs): 0, SIGTERM, SIGKILL
    cpu_percent: float | None = None  # a launched job's processes, measured by the node
    cpu_s: float = 0.0  # their CPU seconds so far (a counter), measured by the node
    pid: int | None = None  # the job's own process: its supervisor's child, or its master's
    cpus: int | None = None  # the CPUs it is confined to (a strict subset of the node's) ...
    cpu_share: float | None = None  # ... and their share of the node's CPUs
    busy_s: float = 0.0  # Σ steps × step time from heartbeats: GPU busy
    wait_s: float = 0.0  # Σ steps × data wait: GPU idle for want of data
    rate_scale: float = 1.0  # c_i: observed / predicted B·F_μ (scheduling.model.correction)
    planned_scale: float = 1.0  # c_i in the last plan
    ceiling: float = 0.0  # the last plan's c_i·B·F_μ × GPU share, samples/s
    corrected_at: float = 0.0  # when c_i was last updated
    intake: IntakeCeiling = field(default_factory=IntakeCeiling)  # C_j, from its heartbeats
    data: DataSpec | None = None  # what it reads, when it asked for the node cache
    protocol: int = 0  # its master's protocol version (adloader.protocol.PROTOCOL); 0: older
    uid: int | None = None  # the user the kernel said registered it (SO_PEERCRED); None over
    # tcp:// (no credentials): a message from another user's process is refused, token or not

    @property
    def remaining_samples(self) -> float:
        planned = self.iterations if self.iterations and self.iteration < self.iterations \
            else 10 * (self.iteration + 100)  # unknown, or past what it said: it grows
        return max(float(planned) - self.iteration, 1.0) * self.batch_size

    def max_workers(self, capacity: int) -> int | None:
        """A job confined to part of the node's CPUs gets at most that part of the node's
        ``capacity`` workers (a step on 1 of 8 cores, of 24 workers: 3); None: no cap."""
        if self.cpu_share is None:
            return None
        return max(1, math.ceil(capacity * self.cpu_share - 1e-9))


@dataclass
class Actions:
    """What a scheduler step asks the node to do."""

    launch: list[LiveJob] = field(default_factory=list)
    send: list[tuple[str, object]] = field(default_factory=list)  # (job id, message)
    reply: list[tuple[bytes, object]] = field(default_factory=list)  # (sender, message)
    kill: list[tuple[str, int]] = field(default_factory=list)  # (job id, signal) launched jobs
    events: list[tuple[str | None, str, dict]] = field(default_factory=list)
    samples: list[tuple[str, TrainingSample | LoadingSample]] = field(default_factory=list)
    changed: list[LiveJob] = field(default_factory=list)  # jobs whose record changed

    def extend(self, other: Actions) -> None:
        for name in ("launch", "send", "reply", "kill", "events", "samples", "changed"):
            getattr(self, name).extend(getattr(other, name))


def refuse(identity: bytes, msg, why: str, job: LiveJob | None = None) -> Actions:
    """A message that is not taken: answered to its sender (``identity``) only, and recorded
    against ``job`` when it names one; nothing about any job changes."""
    return Actions(reply=[(identity, Refused(reason=why))],
                   events=[(job.id if job else None, "refused",
                            {"type": msg.type, "job": msg.job[:64], "reason": why})])


def exit_text(exit_code: int | None, signal: int | None) -> str:
    if signal:
        try:
            return f"killed by {signals.Signals(signal).name}"
        except ValueError:
            return f"killed by signal {signal}"
    return "exit status unknown" if exit_code is None else f"exit code {exit_code}"
