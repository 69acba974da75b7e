"""What the master's control channel calls: ``ChannelHandler`` (commands, heartbeats,
silence and refusal)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

from adloader.protocol import Heartbeat, Stop

from .master_state import MasterState


class ChannelHandler:
    """The channel thread's side of a job's master, on the ``MasterState`` it shares with it.

    ``receive`` queues a command newer than the last applied for the next batch boundary; the
    first Stop also ends the process (``pid``: SIGTERM, then SIGKILL) if it is still there
    after the Stop's grace. ``heartbeat`` reports the interval since the last heartbeat, to
    the last batch boundary, and starts the next there. ``silent`` and ``refused`` log that
    the job runs with its own workers.
    """

    def __init__(self, state: MasterState, *, job: str, endpoint: str | None, token: str,
                 pid: int, log: Callable[[str], None]):
        self._state = state
        self._job = job
        self._endpoint = endpoint
        self._token = token
        self._pid = pid
        self._log = log
        self._stop_at: float | None = None  # cancelled: the grace ends then

    def receive(self, command) -> None:
        if command.seq <= self._state.applied_seq:
            return
        self._state.commands.put(command)
        if isinstance(command, Stop) and self._stop_at is None:
            self._stop_at = time.monotonic() + command.grace_s
            watchdog = threading.Thread(target=self._end_after_grace, args=(command.grace_s,),
                                        name="adloader-cancel", daemon=True)
            watchdog.start()

    def _end_after_grace(self, grace_s: float) -> None:
        """A cancelled job that has not stopped by itself: SIGTERM, then SIGKILL."""
        time.sleep(grace_s)
        self._log(f"adloader: job {self._job!r} was cancelled and has not stopped; ending it")
        os.kill(self._pid, signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(self._pid, signal.SIGKILL)

    def silent(self) -> None:
        self._log(f"adloader: no daemon at {self._endpoint}; "
                  f"running with {self._state.workers} workers")

    def refused(self, reason: str) -> None:
        self._log(f"adloader: daemon refused job {self._job!r}: {reason}; "
                  f"running with {self._state.workers} workers")

    def heartbeat(self) -> Heartbeat:
        """Means over the interval since the last heartbeat (rank 0's own numbers).

        The interval runs from one batch boundary to the last one before the beat (none in
        it: it goes on from the last), so the intervals tile the job's clock and each count
        is the count at a known boundary: the daemon rebuilds when each count was reached
        from the rates (``ClosedLoop.beat``), whole batches with no part of one at either
        end."""
        state = self._state
        with state.lock:
            count = state.count
            end = state.last_batch if count else state.since
            elapsed = end - state.since
            beat = Heartbeat(
                job=self._job, token=self._token, iteration=state.iteration,
                step_s=state.step_sum / state.steps if state.steps else 0.0,
                data_wait_s=state.wait_sum / count if count else 0.0,
                samples_per_s=state.samples / elapsed if elapsed > 0 else 0.0,
                workers=state.workers, applied_seq=max(state.applied_seq, 0),
            )
            state.reset_interval(since=end)
        return beat
