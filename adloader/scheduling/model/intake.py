"""A job's intake ceiling C_j: the most samples a second its training loop can take in,
whatever its workers deliver.

Between two ``next()`` calls a trainer receives the batch, copies it to the device, launches
its step and synchronises; no worker shortens that. The master reports, per heartbeat, the
mean time outside ``next()`` a batch (``step_s``) and the mean time inside it
(``data_wait_s``). With batches always ready, a batch takes the time outside plus
``next()``'s floor (handing over a ready batch), so

    C_j = B / (outside + floor)

The time outside is followed as an exponentially weighted mean from the first heartbeat
that has one (no warm-up gate: a first estimate beats none, and later beats refine it). The
floor is the least mean wait seen, never more than ``FLOOR_MAX`` of the time outside: a job
whose loader binds it waits long on every beat, and that wait is not its floor.
"""

from __future__ import annotations

import dataclasses

WEIGHT = 0.3  # of a new heartbeat in the mean time outside next()
FLOOR_MAX = 0.1  # the floor counted at most this part of the time outside next()


@dataclasses.dataclass
class IntakeCeiling:
    """C_j of one job, from its heartbeats."""

    outside_s: float = 0.0  # mean time outside next() a batch (0: none measured yet)
    floor_s: float = 0.0  # next()'s least mean time seen
    beats: int = 0  # heartbeats that measured a time outside next()

    def observe(self, outside_s: float, wait_s: float) -> None:
        """One heartbeat's means (seconds a batch); one without a step changes nothing."""
        if outside_s <= 0:
            return
        if self.beats == 0:
            self.outside_s, self.floor_s = outside_s, max(wait_s, 0.0)
        else:
            self.outside_s += WEIGHT * (outside_s - self.outside_s)
            self.floor_s = min(self.floor_s, max(wait_s, 0.0))
        self.beats += 1

    def rate(self, batch_size: int) -> float:
        """C_j in samples/s (0.0: not measured yet)."""
        if self.beats == 0:
            return 0.0
        floor = min(self.floor_s, FLOOR_MAX * self.outside_s)
        return batch_size / max(self.outside_s + floor, 1e-9)
