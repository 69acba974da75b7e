"""The per-job autotuner a user would write without adloader: one job tunes its own
``num_workers`` from what it sees, with no view of the node (a baseline of ``adloader bench
live``).

The algorithm, fixed before anything was measured (docs/benchmarks.md, "The baselines"):

1. start at ``start`` workers (1);
2. every ``window`` batches (10), read the window's rate r (samples/s) and its data-wait
   fraction w (time blocked on the loader / the window's time);
3. if w > ``wait_threshold`` (0.05) — the GPU waited for data — and either no worker was
   added yet or the last one raised r by ≥ ``min_gain`` (5 %) against the window before
   it, add one worker (up to ``most``, the cores the job sees);
4. once an added worker raised r by less than ``min_gain``, take it back if r fell with it
   (oversubscribed), and stop: the count stays where it is for the rest of the job.

What it cannot see is the point of the comparison: every job on a node runs its own copy,
each sees the whole machine, and each stops only when its own gain flattens — which on a
shared node is when the cores are oversubscribed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adloader.scheduling.tuners.batch_window import BatchWindow


@dataclass
class Autotuner:
    """One job's tuner (see the module). ``observe`` once a batch; it says the workers."""

    start: int = 1
    most: int = 64
    window: int = 10
    wait_threshold: float = 0.05
    min_gain: float = 0.05
    workers: int = field(init=False)
    stopped: bool = field(init=False, default=False)
    history: list[tuple[int, float, float]] = field(init=False, default_factory=list)
    _window: BatchWindow = field(init=False)

    def __post_init__(self) -> None:
        self.workers = max(0, min(int(self.start), int(self.most)))
        self._window = BatchWindow(self.window)

    def observe(self, samples: int, wait_s: float, step_s: float) -> int:
        """One batch: ``samples`` in it, ``wait_s`` blocked on the loader, ``step_s`` the
        rest of the iteration. Returns the workers to use from the next batch on."""
        read = self._window.add(samples, wait_s, step_s)
        if read is None:
            return self.workers
        rate, waited = read
        self.history.append((self.workers, rate, waited))
        if self.stopped or self.workers >= self.most:
            return self.workers
        rates = [r for d, r, _ in self.history if d == self.workers - 1]
        if rates and rate < (1 + self.min_gain) * rates[-1]:  # the last worker gained < 5 %
            self.stopped = True
            if rate < rates[-1]:  # and cost: take it back
                self.workers -= 1
            return self.workers
        if waited > self.wait_threshold:
            self.workers += 1
        return self.workers
