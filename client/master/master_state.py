"""The state a job's master shares with its channel handler and its pause: ``MasterState``."""

from __future__ import annotations

import queue
import threading
import time


class MasterState:
    """What ``JobMaster``, its ``ChannelHandler`` and its ``JobPause`` hold in common.

    ``lock`` guards ``iteration`` and the heartbeat interval's statistics (``count`` to
    ``since``): the consumer's thread records batch boundaries while the channel's thread
    takes the interval for a heartbeat. ``commands`` is thread-safe. The other fields are
    written in the consumer's thread only.
    """

    def __init__(self, workers: int):
        self.lock = threading.Lock()
        self.commands: queue.SimpleQueue = queue.SimpleQueue()  # received, not yet taken
        self.workers = workers  # what the loader runs with (0 while paused/released)
        self.target = workers  # what it runs with once resumed
        self.applied_seq = -1  # the last command applied (-1 before the Allocation)
        self.iteration = 0  # batches consumed, counting those before a resume_from
        self.paused = False
        self.last_batch = time.monotonic()  # the last batch boundary's time
        self.reset_interval()

    def reset_interval(self, since: float | None = None) -> None:
        """Start a heartbeat interval at ``since`` (default: now; under ``lock`` once the
        channel's thread runs)."""
        self.count = 0
        self.steps = 0  # boundaries with a measured step (the first of an epoch has none)
        self.step_sum = 0.0
        self.wait_sum = 0.0
        self.samples = 0
        self.since = time.monotonic() if since is None else since

    def record(self, stats) -> None:
        """One batch boundary (a BatchStats): the iteration, its step, data wait and samples;
        the loader's workers, unless paused."""
        with self.lock:
            self.last_batch = time.monotonic()
            self.iteration += 1
            self.count += 1
            step = float(stats.step_s or 0.0)
            if step > 0:
                self.steps += 1
                self.step_sum += step
            self.wait_sum += max(float(stats.wait_s or 0.0), 0.0)
            self.samples += int(stats.samples or 0)
            if not self.paused and stats.workers is not None:
                self.workers = int(stats.workers)

    def mean_wait(self) -> float:
        """The data wait per batch over the interval so far (0 before any batch)."""
        with self.lock:
            return self.wait_sum / max(self.count, 1)
