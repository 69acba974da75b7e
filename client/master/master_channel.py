"""The master's control-channel callbacks: commands, heartbeats, silence and refusal."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from adloader.protocol import Heartbeat, Stop

if TYPE_CHECKING:
    import queue


class ChannelCallbacks:
    """What the channel thread calls on a ``JobMaster`` (a mixin: the master's own state)."""

    job: str
    endpoint: str | None
    _token: str
    _pid: int
    _log: Callable[[str], None]
    _lock: threading.Lock
    _commands: queue.SimpleQueue
    _applied_seq: int
    _stop_at: float | None
    _workers: int
    _iteration: int

    def _receive(self, command) -> None:
        if command.seq <= self._applied_seq:
            return
        self._commands.put(command)
        if isinstance(command, Stop) and self._stop_at is None:
            self._stop_at = time.monotonic() + command.grace_s
            watchdog = threading.Thread(target=self._end_after_grace, args=(command.grace_s,),
                                        name="adloader-cancel", daemon=True)
            watchdog.start()

    def _end_after_grace(self, grace_s: float) -> None:
        """A cancelled job that has not stopped by itself: SIGTERM, then SIGKILL."""
        time.sleep(grace_s)
        self._log(f"adloader: job {self.job!r} was cancelled and has not stopped; ending it")
        os.kill(self._pid, signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(self._pid, signal.SIGKILL)

    def _silent(self) -> None:
        self._log(f"adloader: no daemon at {self.endpoint}; running with {self._workers} workers")

    def _refused(self, reason: str) -> None:
        self._log(f"adloader: daemon refused job {self.job!r}: {reason}; "
                  f"running with {self._workers} workers")

    def _reset_interval(self) -> None:
        self._count = 0
        self._steps = 0  # boundaries with a measured step (the first of an epoch has none)
        self._step_sum = 0.0
        self._wait_sum = 0.0
        self._samples = 0
        self._since = time.monotonic()

    def _heartbeat(self) -> Heartbeat:
        """Means over the interval since the last heartbeat (rank 0's own numbers)."""
        with self._lock:
            elapsed = time.monotonic() - self._since
            count = self._count
            beat = Heartbeat(
                job=self.job, token=self._token, iteration=self._iteration,
                step_s=self._step_sum / self._steps if self._steps else 0.0,
                data_wait_s=self._wait_sum / count if count else 0.0,
                samples_per_s=self._samples / elapsed if elapsed > 0 else 0.0,
                workers=self._workers, applied_seq=max(self._applied_seq, 0),
            )
            self._reset_interval()
        return beat
