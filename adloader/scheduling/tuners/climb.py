"""A competent per-job tuner, the strongest thing a user runs without a node daemon: the job
climbs its own ``num_workers`` on its measured rate, in-process, and never stops looking.

The algorithm (as tf.data's AUTOTUNE does for its parallelism: a sensible start under a
CPU budget, then in-process optimisation without restarting the pool):

1. start at ``start`` workers — the node's cores ÷ the jobs the user runs on it (what a
   careful user sets) — within [1, ``budget``], the node's cores;
2. measure windows of ``window`` batches: the rate (samples over the window's wall time);
   the ``settle`` batches after a change are the new workers' cold start and are not read;
3. a step tries one worker more (the job waited on its loader for more than
   ``wait_threshold`` of the window) or one fewer (it did not: a worker may be idle); it
   stays if the rate rose by ``min_gain`` at least against the best count's last window in
   ``confirm`` windows running (one window's gain on a noisy node is as often chance as
   not), and the climb goes on that way; otherwise the count goes back to the best, and the
   other way is tried once if the step read clearly worse (by ``min_gain``: past a peak, the
   other side may be higher) — a step that read as the best count did is a plateau, where
   the other way gains no more; when neither way gains, the count holds. A step reading
   clearly worse is judged early: over 2 × ``abort_loss`` under the best at a quarter of its
   window, over ``abort_loss`` at half of it;
4. held, it looks again every ``repeat`` windows (the node around it changes: other jobs
   start and end), from the best count, with the best count's rate measured anew; the way
   that read nearer the best at the last look is tried first (one that read as the best did
   ends the look as a plateau, so a step that read clearly worse is not paid for again
   while the other way still reads level). A look that keeps the best count doubles the
   hold before the next (to ``repeat`` × ``backoff`` at most: each look costs a step's
   windows at a worse count, and each change a cold start); a new best count, or
   ``confirm`` windows running at the best count that read off the hold's rate (the mean of
   its level windows) by over ``drift`` (the node changed), resets it and looks again at
   once.

Pure: ``observe`` once a batch; the caller resizes its loader when the count changes
(``ElasticDataLoader.resize``: no pool restart).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adloader.scheduling.tuners.batch_window import BatchWindow


@dataclass
class ClimbingTuner:
    """One job's tuner (see the module). ``observe`` once a batch; it says the workers."""

    start: int
    budget: int
    window: int = 20
    settle: int = 5
    wait_threshold: float = 0.05
    min_gain: float = 0.03
    repeat: int = 20
    abort_loss: float = 0.15
    confirm: int = 2
    backoff: int = 8
    drift: float = 0.15
    workers: int = field(init=False)
    best: int = field(init=False)
    best_rate: float = field(init=False, default=0.0)
    history: list[tuple[int, float, float]] = field(init=False, default_factory=list)
    _direction: int = field(init=False, default=0)  # the step under trial: +1, −1; 0: none
    _tried: set = field(init=False, default_factory=set)  # the ways that failed from best
    _held: int = field(init=False, default=0)  # windows held since the climb stopped
    _hold: int = field(init=False, default=0)  # windows to hold before the next look
    _held_rate: float = field(init=False, default=0.0)  # the hold's rate: its level readings' mean
    _level: int = field(init=False, default=0)  # the readings in that mean
    _drifted: int = field(init=False, default=0)  # windows running read off the hold's rate
    _last: dict = field(init=False, default_factory=dict)  # way → its last read ÷ the best's
    _skip: int = field(init=False, default=0)  # batches of a cold start still to skip
    _gained: int = field(init=False, default=0)  # windows running the step under trial gained
    _window: BatchWindow = field(init=False)

    def __post_init__(self) -> None:
        self.budget = max(1, int(self.budget))
        self.workers = self.best = max(1, min(int(self.start), self.budget))
        self._skip = self.settle
        self._hold = self.repeat
        self._window = BatchWindow(self.window)

    def observe(self, samples: int, wait_s: float, step_s: float) -> int:
        """One batch: ``samples`` in it, ``wait_s`` blocked on the loader, ``step_s`` the
        rest of the iteration. Returns the workers to use from the next batch on."""
        if self._skip > 0:  # the new workers' first batches: not the count's rate
            self._skip -= 1
            return self.workers
        read = self._window.add(samples, wait_s, step_s)
        if read is None and self._direction:  # a step under trial, clearly worse: judged early
            loss = {self.window // 4: 2 * self.abort_loss,
                    self.window // 2: self.abort_loss}.get(self._window.batches)
            if loss is not None and self._window.peek()[0] < (1 - loss) * self.best_rate:
                read = self._window.close()
        if read is None:
            return self.workers
        rate, waited = read
        self.history.append((self.workers, rate, waited))
        return self._decide(rate, waited)

    def _decide(self, rate: float, waited: float) -> int:
        if self._direction == 0:  # at the best count: its rate, then perhaps a step
            # neither way gained: held (judged against the rate before this window's)
            holding = len(self._tried) == 2 and self._holds(rate)
            self.best_rate = rate
            if holding:
                return self.workers
            way = 1 if waited > self.wait_threshold else -1
            if self._last.get(-way, 0.0) > self._last.get(way, 0.0):
                way = -way  # the other way read nearer the best at the last look
            if way in self._tried:
                way = -way
            return self._step(way)
        self._last[self._direction] = rate / max(self.best_rate, 1e-9)
        if rate >= (1 + self.min_gain) * self.best_rate:  # the step gained
            self._gained += 1
            if self._gained < self.confirm:  # once more, to be sure
                return self.workers
            self.best, self.best_rate, self._tried = self.workers, rate, set()
            self._hold, self._last = self.repeat, {}  # a new best: its neighbours unread
            return self._step(self._direction)  # it did: keep climbing
        self._tried.add(self._direction)  # it did not: back to the best count
        if rate > (1 - self.min_gain) * self.best_rate:  # within the noise of the best: a
            self._tried.add(-self._direction)  # plateau, where the other way gains no more
        self._direction = 0
        return self._set(self.best)

    def _holds(self, rate: float) -> bool:
        """A window at the best count while held: whether the hold goes on (else a look)."""
        if self._held == 0:  # from the best count's rate the last look measured
            self._held_rate, self._level, self._drifted = self.best_rate, 1, 0
        self._held += 1
        off = abs(rate - self._held_rate) > self.drift * self._held_rate
        if not off:  # the hold's rate: the mean of its readings that read level
            self._level += 1
            self._held_rate += (rate - self._held_rate) / self._level
        self._drifted = self._drifted + 1 if off else 0
        if self._drifted >= self.confirm:  # the node changed: look at once
            self._hold = self.repeat
        elif self._held < self._hold:
            return True
        else:  # a look that keeps the best count: the next one later
            self._hold = min(2 * self._hold, self.repeat * self.backoff)
        self._held, self._tried = 0, set()
        return False

    def _step(self, way: int) -> int:
        target = self.best + way
        if not 1 <= target <= self.budget:
            self._tried.add(way)
            if len(self._tried) == 2:
                self._direction = 0
                return self.workers
            way, target = -way, self.best - way
            if not 1 <= target <= self.budget:
                self._tried.add(way)
                self._direction = 0
                return self.workers
        self._direction, self._gained = way, 0
        return self._set(target)

    def _set(self, workers: int) -> int:
        if workers != self.workers:
            self.workers, self._skip = workers, self.settle
        return self.workers
