"""The closed loop: a plan is a hypothesis, and the node's measurements keep it or undo it.

The model proposes, the node decides. When the set of running jobs changes, the loop
measures where to start: the counts the jobs asked for (``num_workers``, where every job
said one and they ask for more workers in all than the even split gives — fewer would leave
cores idle — but no more than the loop ever runs, ``grow_to`` × the node's; first, so a new
set of jobs starts as it would without a daemon), and the even split of the node's workers
(first where the jobs asked for none, and after a job ends: its workers are free now).
Where a job arrived and the others ran before it, the first start is where the loop stood,
*carried*: the new job its even share, the others the rest in proportion to the workers
they had (what the loop had measured and kept), measured against the even split; the
asked-for counts are not measured then. Where the policy's plan for a new set of jobs
*sheds* the even split (fewer workers in all, none for any job over its even share: the
node's measured loading peaks below its workers), the plan is the first start: it cannot
hoard, and it forks no worker the even split would; the even split is measured after it
only where every job's time left pays back a trial (``payback``), else the plan is the
base; where the even split measures better, no shed toward the plan is tried while the same
jobs run. Where such a plan was the base and a job ends, the others start where they stand
(the node measured fewer workers no worse; the even split would fork workers for them), the
even split measured after it on the same payback rule. Once every job has trained its first
batch and the new workers have delivered theirs, one window measures the node's rate (Σ of
the jobs' measured samples/s) under each start in turn; the better one is the *base* (the
carried start where it measured within ``tolerance`` of the best, which the guard still
measures against; the asked-for counts where they measured within the noise of the best —
``tolerance`` or the start windows' half-to-half spread, whichever is wider: what the jobs
run with no daemon is left only for a split measured better than the node's noise). From
then on the loop walks toward the policy's plan in moves from one job to another, the pair
the model ranks best (the donor whose predicted rate falls least, the receiver whose rises
most): ``step`` workers first, and each kept move along a pair is followed at once by one
twice as large along it (the kept trial's window measured where the node stands). Each move
is a trial:
the jobs apply it, the new workers deliver their first batches, a window measures the node
again, and the move stays only if the measured rate did not fall by more than the windows'
noise (``tolerance`` at least). A move that failed goes back at once and that pair is not
tried again until the job set changes.

Where the plan runs fewer workers in all than the node runs (a node whose loading peaks
below its workers), the loop also sheds toward it: ``step`` workers fewer for the job
furthest over its planned count, a trial kept unless the node's rate fell, like a move.
A kept shed or probe, like a kept move, is followed at once by the next trial.
Once no move toward the plan is left to try, or where the model predicts a probe gains more
than the next move, the loop probes the node's capacity: a worker
or two more for the job furthest below its ceiling, past the node's cores if need be (a
worker that waits on a full queue or on the trainer leaves its core idle), kept only if the
node's measured rate rose by ``grow_gain`` at least, and never past ``grow_to`` × the node's
workers in all.

A trial must be one the node could tell from its noise and the judge could keep. A shed or
a probe exists only to raise the node's rate: it is tried only where the model predicts a
gain, relative to the node's measured rate, at least the *floor* — the median of how far
apart the two halves of each window read since the job set changed (what the measurement
alone varies by at fixed counts). A move toward the plan may be worth its place in the
plan's order while the node's rate stays flat, so it needs no predicted gain, but a move
the model predicts to lose more than ``tolerance`` (the judge would revert it) is not
tried. A trial left untried is logged once (``loop_untold``); the predicted rate stands
beside the measured one in each trial's log entry.

A guard watches every window: a node measured below its base's rate by more than ``guard``
for ``guard_windows`` windows in a row goes back to the base and holds it for ``hold_s``;
the moves that led there are not tried again while the same jobs run.
Moves respect a dwell (a job is resized at most once every ``dwell_s``),
and a move is not tried for a receiver whose measured time left could not pay back a
trial (``payback`` × the trial's length). No trial (move, shed or probe) starts while any
job's measured time left is shorter than one trial: the job would end before the trial's
window, the loop starts anew when the job set changes, and the trial, never judged, would
cost (forked workers, a worse split) and buy nothing.

Pure: the scheduler feeds it heartbeats and the clock, and carries out the counts it
returns.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence

CLOCK_SLACK_S = 1.0  # a beat's delay, rebuilt, within this of the least seen: trusted


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    window_s: float = 4.0  # a measuring window (at least 4 heartbeats: see ``for_heartbeat``)
    # ... and long enough for the slowest job to train this many batches: heartbeats count
    # whole batches, so a window of 10 batches reads a rate ±10 %
    batches: int = 20
    longest_s: float = 30.0  # the most a window is stretched for that
    settle_s: float = 1.0  # after a resize is applied, at least this before its window
    tolerance: float = 0.03  # a move stays unless the node's rate fell by more
    guard: float = 0.03  # below the even split's rate by more than this ...
    guard_windows: int = 2  # ... this many windows in a row: back to even, and hold
    hold_s: float = 60.0  # how long the guard holds the even split
    dwell_s: float = 5.0  # a job's resizes at least this far apart
    step: int = 2  # the workers a pair's first move takes (each kept move: twice the last)
    payback: float = 2.0  # a receiver needs this many trials' time left
    grow_to: float = 1.5  # capacity probes up to this × the node's workers in all (0: none)
    grow_gain: float = 0.01  # a probe's workers stay if the node's rate rose this much
    floor_windows: int = 3  # a shed or probe waits until the floor is read on this many

    def for_heartbeat(self, heartbeat_s: float) -> LoopSettings:
        """These settings with windows long enough for ``heartbeat_s`` (4 beats a window)."""
        return dataclasses.replace(self, window_s=max(self.window_s, 4 * heartbeat_s),
                                   settle_s=max(self.settle_s, heartbeat_s))


@dataclasses.dataclass
class _Job:
    batch_size: int
    beats: collections.deque = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=256))  # (time, iteration)
    applied: bool = False  # its last command applied (its heartbeats say so)
    applied_at: float = 0.0
    resized_at: float = -math.inf
    clock: float | None = None  # its own clock at its last beat, rebuilt from its beats
    # (None: its beats come with no rate, and its counts are timed on arrival)
    offset: float = math.inf  # the least (received − own clock) of its beats since then
    reached: float = -math.inf  # when its last new count was reached (its beat's time)


@dataclasses.dataclass
class _Trial:
    donor: str | None  # None: a capacity probe (workers added, none taken)
    receiver: str | None  # None: a shed (workers taken, none given: the plan runs fewer)
    workers: int
    before: float  # the node's measured rate before the move
    noise: float  # the relative spread of the windows before it
    since: float | None = None  # its window's start (None: not yet applied and settled)
    predicted: float | None = None  # the model's gain for it, samples/s (None: no model)


class ClosedLoop:
    """Even split first, then measured moves toward the policy's plan (module docstring)."""

    def __init__(self, capacity: int, settings: LoopSettings | None = None):
        self.capacity = max(1, int(capacity))
        self.settings = settings or LoopSettings()
        self.jobs: dict[str, _Job] = {}
        self.target: dict[str, int] = {}  # the policy's plan
        self.predict: Callable[[str, int], float] | None = None  # T_j(d), the model's
        self.ceiling: dict[str, float] = {}  # the model's ceiling of each job, samples/s
        self.phase = "idle"  # start | base | steady | trial | held
        self.even_rate: float | None = None  # the node measured under the even split
        self.even_counts: dict[str, int] = {}
        self.starts: list[tuple[str, dict[str, int]]] = []  # (name, counts) to measure
        self.measured: list[tuple[str, dict[str, int], float]] = []  # ... and their rates
        self.base_counts: dict[str, int] = {}  # the better start: what the guard goes back to
        self.base_rate: float | None = None
        self.base_start: str | None = None  # the start the base came from
        self.caps: dict[str, int | None] = {}
        self.rates: list[float] = []  # the steady windows' node rates, newest last
        self.spreads: list[float] = []  # each window's halves apart, relative (``_floor``)
        self.untold: set[tuple[str | None, str | None]] = set()  # trials under the floor
        self.window_from = 0.0
        self.low = 0  # windows in a row below the guard
        self.held_until = 0.0
        self.rejected: set[tuple[str, str]] = set()
        self.kept: set[tuple[str, str]] = set()  # moves kept since the even split
        self.stride: dict[tuple[str, str], int] = {}  # a pair's next move: doubles when kept
        self.trial: _Trial | None = None
        self.events: list[tuple[str | None, str, dict]] = []  # for the daemon's event log
        self._step_window: float | None = None  # the window of the step under way

    # -- the job set ---------------------------------------------------------------------
    @property
    def names(self) -> set[str]:
        return set(self.jobs)

    def even(self, names: Sequence[str],
             caps: Mapping[str, int | None] | None = None) -> dict[str, int]:
        """The node's workers split evenly over ``names`` (the first in order get the rest),
        at least one each; a job with a cap (its part of the node's CPUs) at most that, what
        it cannot take split over the others."""
        names, caps = sorted(names), caps or {}
        out: dict[str, int] = {}
        left, free = self.capacity, list(names)
        while free:
            share, rest = divmod(left, len(free))
            capped = [n for i, n in enumerate(free)
                      if caps.get(n) is not None and caps[n] < share + (1 if i < rest else 0)]
            if not capped:
                out.update({n: share + (1 if i < rest else 0) for i, n in enumerate(free)})
                break
            for n in capped:
                out[n] = caps[n]
                left -= caps[n]
                free.remove(n)
        return {n: max(1, out[n]) for n in names}

    def reset(self, now: float, batch_sizes: Mapping[str, int],
              caps: Mapping[str, int | None] | None = None,
              requested: Mapping[str, int | None] | None = None,
              first: str = "requested",
              current: Mapping[str, int] | None = None,
              planned: Mapping[str, int] | None = None) -> dict[str, int]:
        """A new set of running jobs (name → batch size; ``caps``: the most workers a job
        may have, where it has a most; ``requested``: the counts the jobs asked for;
        ``current``: the workers each job has now): the starts to measure, the first of them
        returned (``first``: ``requested`` or ``even``, where both are measured; the carried
        start first where there is one; ``planned``: the policy's plan for these jobs, the
        first start where it sheds the even split, ``_sheds``; where a job left, the shed
        it had kept, ``_stays``)."""
        before = set(self.jobs)
        self.jobs = {n: self.jobs.get(n) or _Job(b) for n, b in batch_sizes.items()}
        for job in self.jobs.values():
            job.applied = False
        self.caps = dict(caps or {})
        self.even_counts = self.even(list(batch_sizes), self.caps)
        if planned is None:
            planned = self._stays(list(batch_sizes), before, current or {})
        self.starts = [("even", dict(self.even_counts))]
        carried = self.carried(list(batch_sizes), before, current or {})
        asked = self._requested(list(batch_sizes), requested)
        if carried is not None and carried != self.even_counts:
            self.starts.insert(0, ("carried", carried))
        elif self._sheds(planned):
            self.starts.insert(0, ("planned", {n: int(planned[n]) for n in sorted(batch_sizes)}))
        elif asked is not None and sum(self.even_counts.values()) < sum(asked.values()) \
                <= self.most():
            self.starts.insert(0 if first == "requested" else 1, ("requested", asked))
        self.measured, self.base_counts, self.base_rate = [], {}, None
        self.base_start = None
        self.phase, self.even_rate, self.rates, self.low = "start", None, [], 0
        self.spreads, self.untold = [], set()
        self.trial, self.rejected, self.kept, self.held_until = None, set(), set(), 0.0
        self.stride = {}
        return dict(self.starts[0][1])

    def carried(self, names: Sequence[str], before: set[str],
                current: Mapping[str, int]) -> dict[str, int] | None:
        """Where the loop stood, for the new set ``names``: each job new to it its even
        share, the jobs that ran before (``before``, with their ``current`` workers) the rest
        of the node's workers in proportion to what they had (largest remainders; at least
        one each, within caps); None where no job ran before."""
        had = {n: current[n] for n in names if n in before and current.get(n, 0) > 0}
        if not had or not before <= set(names):  # a job left: its workers are free now
            return None
        out = {n: self.even_counts[n] for n in names if n not in had}
        room = self.capacity - sum(out.values())
        if room < len(had):
            return None
        total = sum(had.values())
        share = {n: max(1, room * d // total) for n, d in had.items()}
        rest = room - sum(share.values())
        while rest < 0:  # the ones lifted to 1 took more than the rest: from the largest
            top = max(share, key=lambda n: (share[n], n))
            share[top], rest = share[top] - 1, rest + 1
        for n in sorted(had, key=lambda n: (-(room * had[n] % total), n)):
            if rest <= 0:
                break
            share[n], rest = share[n] + 1, rest - 1
        for n in share:
            cap = self.caps.get(n)
            out[n] = min(share[n], cap) if cap is not None else share[n]
        return {n: out[n] for n in sorted(names)}

    def _stays(self, names: Sequence[str], before: set[str],
               current: Mapping[str, int]) -> dict[str, int] | None:
        """Where a job left (its workers free now) and the base the loop had kept was a
        shedding plan (the node measured fewer workers no worse than the even split, or a
        job ending soon left no time to measure it), or the jobs still run at such a plan's
        start, no window yet measured against it: the workers the jobs left have now, a
        start that forks none (``_sheds``: the even split measured after it on the payback
        rule); None otherwise (a job arrived: the carried start; or the base was the even
        split or the asked-for counts)."""
        if not set(names) < before or any(current.get(n, 0) < 1 for n in names):
            return None
        if self.base_start == "planned" or (
                self.base_start is None and self.starts and self.starts[0][0] == "planned"):
            return {n: int(current[n]) for n in sorted(names)}
        return None

    def _sheds(self, planned: Mapping[str, int] | None) -> bool:
        """Whether ``planned`` runs the jobs on fewer workers in all than the even split
        and gives none more than its even share (at least one each): a start that cannot
        hoard, where the node's measured loading peaks below its workers."""
        if not planned or set(planned) != set(self.even_counts):
            return False
        if any(not 1 <= planned[n] <= self.even_counts[n] for n in planned):
            return False
        return sum(planned.values()) < sum(self.even_counts.values())

    def most(self) -> int:
        """The most workers the loop runs in all (``grow_to`` × the node's)."""
        return max(self.capacity, int(self.settings.grow_to * self.capacity))

    def _requested(self, names: Sequence[str],
                   requested: Mapping[str, int | None] | None) -> dict[str, int] | None:
        """The counts the jobs asked for, each within its cap and the node's workers; None
        unless every job asked."""
        if not requested or any(requested.get(n) is None for n in names):
            return None
        out = {}
        for n in names:
            d = min(max(1, int(requested[n])), self.capacity)
            if self.caps.get(n) is not None:
                d = min(d, self.caps[n])
            out[n] = d
        return out

    # -- what the node measures ----------------------------------------------------------
    def beat(self, now: float, name: str, iteration: int, applied: bool,
             samples_per_s: float | None = None) -> None:
        """A heartbeat of job ``name``, received at ``now``: its iterations so far; whether
        its last command is applied; ``samples_per_s``: the rate its master measured over the
        beat's interval, on the job's own clock (None: not known).

        The count is timed by the job's clock, not by when the beat arrived: a beat that
        waited for a busy core, in the job or here, lands late, and a count timed by its
        arrival reads the rates around it wrong. The master ends each interval at its last
        batch boundary and the next starts there, so the intervals tile its clock, each as
        long as its samples over its rate: the clock when each count was reached is rebuilt
        from the beats (iterations × batch ÷ rate, beat by beat) and shifted onto this
        clock by the least delay seen since (never after ``now``): a window reads whole
        batches at both ends. A beat with no batch since the one before is timed on arrival
        (its count still holds) and leaves the clock where it was. A count that went back,
        or one whose delay so rebuilt is off the least by more than ``CLOCK_SLACK_S`` and a
        batch (a beat is read up to a batch after its count's end; more: a batch counted
        otherwise than the daemon was told, a master started anew), starts the clock anew
        at the arrival."""
        job = self.jobs.get(name)
        if job is None:
            return
        last = job.beats[-1] if job.beats else None
        at = self._own_clock(job, now, iteration, last, samples_per_s)
        if last is not None and iteration == last[1]:
            at = max(at, last[0])
        else:  # a new count: after the one before (a beat with none since, on arrival, may
            at = max(at, job.reached)  # be later: it was timed by its delay)
            job.reached = at
        job.beats.append((at, iteration))
        if applied and not job.applied:
            job.applied_at = now
        job.applied = applied

    @staticmethod
    def _own_clock(job: _Job, now: float, iteration: int, last: tuple[float, int] | None,
                   samples_per_s: float | None) -> float:
        """When ``job``'s count ``iteration`` was reached, on this clock (``beat``); moves
        the job's rebuilt clock on, or starts it anew at ``now``."""
        if samples_per_s is None:
            job.clock = None
            return now
        going = job.clock is not None and last is not None
        if going and iteration == last[1]:  # no batch since the beat before: it holds now
            return now
        if going and iteration > last[1] and samples_per_s:
            batch_s = job.batch_size / samples_per_s  # a batch: how long a beat may trail one
            clock = job.clock + (iteration - last[1]) * batch_s
            if abs(now - clock - job.offset) <= CLOCK_SLACK_S + batch_s:  # trusted
                job.clock, job.offset = clock, min(job.offset, now - clock)
                return min(now, clock + job.offset)
        job.clock, job.offset = now, 0.0  # anew, from this beat's arrival
        return now

    def resized(self, now: float, name: str) -> None:
        """The scheduler sent ``name`` a new count."""
        job = self.jobs.get(name)
        if job is not None:
            job.applied, job.resized_at = False, now

    def job_rate(self, name: str, since: float, until: float) -> float | None:
        """Samples/s job ``name`` trained between its first and last beat in the window;
        None when its beats cover less than half of it. Where its counts are timed at their
        batches' ends (``beat``), between the first and last count reached in the window
        where it has two: a beat that found no new batch is timed on arrival, a part of a
        batch after the count's end."""
        job = self.jobs[name]
        inside, reached, before = [], [], None
        for t, i in job.beats:
            if since <= t <= until:
                inside.append((t, i))
                if job.clock is not None and before is not None and i > before:
                    reached.append((t, i))
            before = i
        if len(inside) < 2 or max(inside)[0] - min(inside)[0] < 0.5 * (until - since):
            return None
        covered = len(reached) >= 2 and reached[-1][0] - reached[0][0] >= 0.5 * (until - since)
        ends = reached if covered else inside
        (ta, ia), (tb, ib) = ends[0], ends[-1]
        return (ib - ia) * job.batch_size / (tb - ta)

    def recent_rate(self, name: str) -> float | None:
        """Job ``name``'s rate over its last two windows of beats."""
        beats = self.jobs[name].beats
        if not beats:
            return None
        last = beats[-1][0]
        return self.job_rate(name, last - 2 * self.window(), last)

    def node_rate(self, since: float, until: float) -> float | None:
        rates = [self.job_rate(n, since, until) for n in self.jobs]
        return None if any(r is None for r in rates) else sum(rates)

    # -- the loop --------------------------------------------------------------------------
    def step(self, now: float, current: Mapping[str, int],
             remaining: Mapping[str, float] | None = None) -> dict[str, int]:
        """The counts to send now (only the jobs that change; empty: nothing)."""
        if not self.jobs:
            return {}
        self._step_window = self.window()  # once a step: it reads every job's beats
        try:
            return self._step(now, current, remaining)
        finally:
            self._step_window = None

    def _step(self, now: float, current: Mapping[str, int],
              remaining: Mapping[str, float] | None) -> dict[str, int]:
        if self.phase == "start":  # a start's counts sent: wait for every job's batches
            started = all(j.applied and j.beats and j.beats[-1][1] > 0
                          for j in self.jobs.values())
            if started:
                self.phase = "base"
                self.window_from = now + self._settle(current)
            return {}
        if self.phase == "base":
            rate = self._window(now, self.window_from)
            if rate is None:
                return {}
            return self._measured_start(now, current, remaining, rate)
        if self.phase == "held":
            if now >= self.held_until:
                self.phase, self.window_from = "steady", now
            return {}
        if self.phase == "trial":
            return self._judge(now, current, remaining)
        # steady: a window, the guard, then perhaps a move
        if now < self.window_from + self.window():
            return {}
        since, self.window_from = self.window_from, now
        rate = self.node_rate(since, now)
        if rate is None:
            return {}
        self._spread(since, now, rate)
        self.rates = (self.rates + [rate])[-3:]
        if self._guard(now, rate, current):
            return self._back_to_even(now, current)
        return self._move(now, current, remaining)

    def _measured_start(self, now: float, current: Mapping[str, int],
                        remaining: Mapping[str, float] | None, rate: float) -> dict[str, int]:
        """A start measured: the next one to measure, or the better of them as the base."""
        name, counts = self.starts[len(self.measured)]
        self.measured.append((name, counts, rate))
        if name == "even":
            self.even_rate = rate
            self.events.append((None, "loop_even", {"rate": round(rate, 1)}))
        else:
            self.events.append((None, "loop_start", {"start": name, "rate": round(rate, 1)}))
        if len(self.measured) < len(self.starts) and name == "planned" \
                and not all(self._pays_back(n, current, remaining) for n in self.jobs):
            # the even split would fork workers for a window that a job ending soon leaves
            # no time to pay back: the plan, fewer workers, is the base
            self.starts = self.starts[:len(self.measured)]
        if len(self.measured) < len(self.starts):
            self.phase = "start"
            for job in self.jobs.values():
                job.applied = False
            return self._counts(self.starts[len(self.measured)][1], current)
        best = max(self.measured, key=lambda m: m[2])
        chosen = self._incumbent(best) or best
        self.base_counts, self.base_rate = dict(chosen[1]), best[2]
        self.base_start = chosen[0]
        if chosen[0] != "planned" and any(m[0] == "planned" for m in self.measured):
            # the plan's fewer workers measured worse: its sheds are not tried again
            self.rejected |= {(n, None) for n in self.jobs}
        if len(self.measured) > 1:
            self.events.append((None, "loop_base", {
                "start": chosen[0], "rates": {m[0]: round(m[2], 1) for m in self.measured}}))
        self.rates = [chosen[2]]
        self.phase, self.window_from = "steady", now
        if dict(current) != self.base_counts:  # back to the better start, measured anew
            self.window_from = now + self._settle(current)
            return self._counts(self.base_counts, current)
        return self._move(now, current, remaining)

    def _incumbent(self, best: tuple[str, dict[str, int], float]
                   ) -> tuple[str, dict[str, int], float] | None:
        """The start that stays unless another measured better beyond the noise: where the
        loop stood (``carried``: what it had measured and kept), within ``tolerance`` of the
        best; the counts the jobs asked for (``requested``: what they run with no daemon),
        within ``tolerance`` or the start windows' floor, whichever is wider (two windows
        of one setting read that far apart, so a smaller difference is no evidence that the
        even split is better). None: the best is the base."""
        s = self.settings
        for name, allowed in (("carried", s.tolerance),
                              ("requested", max(s.tolerance, self._floor()))):
            start = next((m for m in self.measured if m[0] == name), None)
            if start is not None and start[2] >= (1 - allowed) * best[2]:
                return start
        return None

    @staticmethod
    def _counts(counts: Mapping[str, int], current: Mapping[str, int]) -> dict[str, int]:
        return {n: d for n, d in counts.items() if current.get(n) != d}

    def _window(self, now: float, since: float) -> float | None:
        """The node's rate over a window from ``since``, once it is over (None before; a
        window the beats did not cover starts again now)."""
        if now < since + self.window():
            return None
        rate = self.node_rate(since, now)
        if rate is not None:
            self._spread(since, now, rate)
        if rate is None:
            if self.trial is not None and self.trial.since == since:
                self.trial.since = now
            else:
                self.window_from = now
        return rate

    def _settle(self, current: Mapping[str, int], name: str | None = None) -> float:
        """Time for new workers' first batches: one worker's batch time of the job (its
        measured rate per worker), within [settle_s, 2 windows]."""
        s = self.settings
        names = [name] if name else list(self.jobs)
        longest = 0.0
        for n in names:
            rate = self.recent_rate(n)
            if rate:
                longest = max(longest, current.get(n, 1) * self.jobs[n].batch_size / rate)
        return min(max(s.settle_s, longest), 2 * s.window_s)

    def window(self) -> float:
        """A measuring window: ``window_s``, stretched (to ``longest_s`` at most) until the
        slowest job trains ``batches`` batches in it at its rate over its last beats."""
        if self._step_window is not None:
            return self._step_window
        s = self.settings
        slowest = math.inf
        for job in self.jobs.values():
            beats = job.beats
            if len(beats) >= 2 and beats[-1][0] > beats[0][0]:
                recent = [b for b in beats if b[0] >= beats[-1][0] - 2 * s.longest_s]
                (ta, ia), (tb, ib) = recent[0], recent[-1]
                if tb > ta and ib > ia:
                    slowest = min(slowest, (ib - ia) / (tb - ta))
        if slowest == math.inf:
            return s.window_s
        return min(max(s.window_s, s.batches / slowest), max(s.longest_s, s.window_s))

    def _spread(self, since: float, until: float, rate: float) -> None:
        """How far apart the node's rate reads over the two halves of a window (relative to
        the whole window's): what the node's measurement alone varies by, at fixed counts."""
        mid = (since + until) / 2
        first, second = self.node_rate(since, mid), self.node_rate(mid, until)
        if first is not None and second is not None and rate > 0:
            self.spreads = (self.spreads + [abs(first - second) / rate])[-8:]

    def _floor(self) -> float:
        """The gain a trial must be predicted to make to be told from noise: the median of
        the windows' half-to-half spreads measured since the job set changed (0 before any)."""
        return statistics.median(self.spreads) if self.spreads else 0.0

    def _told(self, gain: float | None) -> bool:
        """Whether a trial the model predicts to add ``gain`` samples/s (None: no model)
        could be told from the node's noise by its window: the gain, relative to the node's
        measured rate, at least the floor. A trial below it, judged on noise, would be kept
        or reverted by chance and pay its cold start either way."""
        if gain is None or not self.rates:
            return True
        return gain / max(self.rates[-1], 1e-9) >= self._floor()

    def _known(self) -> bool:
        """Whether the floor is read on enough windows (``floor_windows``) to gate a trial
        on: before, a shed or a probe waits (one or two windows' spreads, read over a start,
        can put the floor anywhere)."""
        return self.predict is None or len(self.spreads) >= self.settings.floor_windows

    def _untold(self, pair: tuple[str | None, str | None], gain: float) -> None:
        """A trial left untried under the floor: logged once while the same jobs run."""
        if pair not in self.untold:
            self.untold.add(pair)
            self.events.append((None, "loop_untold", {
                "from": pair[0], "to": pair[1],
                "gain": round(gain / max(self.rates[-1], 1e-9), 3),
                "floor": round(self._floor(), 3)}))

    def _guard(self, now: float, rate: float, current: Mapping[str, int]) -> bool:
        s = self.settings
        if self.base_rate is None or dict(current) == self.base_counts:
            self.low = 0
            return False
        self.low = self.low + 1 if rate < (1 - s.guard) * self.base_rate else 0
        return self.low >= s.guard_windows

    def _back_to_even(self, now: float, current: Mapping[str, int]) -> dict[str, int]:
        """The guard: the base (the better measured start), held; the moves that led below
        it are not tried again (until the job set changes)."""
        self.phase, self.held_until, self.low = "held", now + self.settings.hold_s, 0
        self.rejected |= self.kept
        self.kept = set()
        self.events.append((None, "loop_guard", {
            "rate": round(self.rates[-1], 1), "even_rate": round(self.even_rate or 0.0, 1),
            "base_rate": round(self.base_rate or 0.0, 1), "hold_s": self.settings.hold_s}))
        return self._counts(self.base_counts, current)

    def _move(self, now: float, current: Mapping[str, int],
              remaining: Mapping[str, float] | None) -> dict[str, int]:
        s = self.settings
        if self._ends_within_trial(current, remaining):
            return {}
        donors = [n for n in self.jobs if current.get(n, 0) > max(self.target.get(n, 1), 1)
                  and now - self.jobs[n].resized_at >= s.dwell_s]
        receivers = [n for n in self.jobs if current.get(n, 0) < self.target.get(n, 0)
                     and now - self.jobs[n].resized_at >= s.dwell_s
                     and self._pays_back(n, current, remaining)]
        pairs = [(d, r) for d in donors for r in receivers if (d, r) not in self.rejected]
        if not pairs:
            return self._shed(current, donors) or self._grow(now, current, remaining)
        donor, receiver = max(pairs, key=lambda p: self._worth(p, current))
        k = min(self.stride.get((donor, receiver), s.step),
                current[donor] - max(self.target.get(donor, 1), 1),
                self.target[receiver] - current[receiver])
        gain = None if self.predict is None else k * self._worth((donor, receiver), current)
        if gain is not None and self.rates \
                and gain < -s.tolerance * self.rates[-1]:  # the judge would revert it
            self._untold((donor, receiver), gain)
            self.rejected.add((donor, receiver))
            return self._move(now, current, remaining)
        if gain is not None:  # the trial the model predicts gains most goes first
            probe = self._grow(now, current, remaining, beyond=gain)
            if probe:
                return probe
        self.trial = _Trial(donor, receiver, k, self.rates[-1], self._noise(), predicted=gain)
        self.phase = "trial"
        return {donor: current[donor] - k, receiver: current[receiver] + k}

    def _shed(self, current: Mapping[str, int], donors: Sequence[str]) -> dict[str, int]:
        """Where the plan runs fewer workers in all than the node runs now, ``step`` workers
        fewer for the job furthest over its planned count, none given to another (the plan's
        hypothesis: they add nothing); kept unless the node's rate fell (a move's
        tolerance)."""
        if sum(self.target.get(n, 0) for n in self.jobs) >= sum(
                current.get(n, 0) for n in self.jobs):
            return {}
        over = [n for n in donors if (n, None) not in self.rejected]
        if not over or not self._known():
            return {}
        donor = max(over, key=lambda n: (current[n] - max(self.target.get(n, 1), 1), n))
        k = min(self.settings.step, current[donor] - max(self.target.get(donor, 1), 1))
        gain = self._gain(donor, current[donor], current[donor] - k)
        if not self._told(gain):  # the plan's hypothesis, that they add nothing: no gain
            self._untold((donor, None), gain)
            return {}
        self.trial = _Trial(donor, None, k, self.rates[-1], self._noise(), predicted=gain)
        self.phase = "trial"
        return {donor: current[donor] - k}

    def _noise(self) -> float:
        """The relative spread of the steady windows' rates, at most the floor: one window
        read far off (a job's phase, a start-up) does not widen the judge past what the
        node's measurement varies by at fixed counts."""
        before = self.rates[-1]
        spread = (max(self.rates) - min(self.rates)) / max(before, 1e-9) \
            if len(self.rates) > 1 else 0.0
        return min(spread, self._floor()) if self.spreads else spread

    def _grow(self, now: float, current: Mapping[str, int],
              remaining: Mapping[str, float] | None,
              beyond: float | None = None) -> dict[str, int]:
        """A capacity probe: ``step`` workers more for the job furthest below its ceiling
        (measured rate against the model's), none taken from another; with ``beyond`` (a
        move's predicted gain, samples/s), only where the model predicts the probe gains
        more (else nothing: the move goes first)."""
        s = self.settings
        room = self.most() - sum(current.get(n, 0) for n in self.jobs)
        if room <= 0 or not self._known():
            return {}
        ratios = {}
        for n in self.jobs:
            cap = self.caps.get(n)
            if (None, n) in self.rejected or (cap is not None and current.get(n, 0) >= cap) \
                    or now - self.jobs[n].resized_at < s.dwell_s \
                    or not self._pays_back(n, current, remaining):
                continue
            rate, ceiling = self.recent_rate(n), self.ceiling.get(n, 0.0)
            ratios[n] = rate / ceiling if rate and ceiling > 0 else 0.5
        ratios = {n: r for n, r in ratios.items() if r < 0.95}  # at its ceiling: no use
        if not ratios:
            return {}
        receiver = min(ratios, key=lambda n: (ratios[n], n))
        k = min(s.step, room)
        cap = self.caps.get(receiver)
        if cap is not None:
            k = min(k, cap - current[receiver])
        gain = self._gain(receiver, current[receiver], current[receiver] + k)
        if beyond is not None and (gain is None or gain <= beyond):
            return {}
        if not self._told(gain):
            self._untold((None, receiver), gain)
            return {}
        self.trial = _Trial(None, receiver, k, self.rates[-1], self._noise(), predicted=gain)
        self.phase = "trial"
        return {receiver: current[receiver] + k}

    def _gain(self, name: str, workers: int, to: int) -> float | None:
        """The model's predicted change of job ``name``'s rate from ``workers`` workers to
        ``to`` (None without a model)."""
        return None if self.predict is None else self.predict(name, to) - self.predict(
            name, workers)

    def _worth(self, pair: tuple[str, str], current: Mapping[str, int]) -> float:
        """The model's predicted gain of moving one worker along ``pair`` (0 without one)."""
        if self.predict is None:
            return 0.0
        d, r = pair
        return self._gain(r, current[r], current[r] + 1) + self._gain(d, current[d], current[d] - 1)

    def _time_left(self, name: str, remaining: Mapping[str, float] | None) -> float | None:
        """Job ``name``'s measured time left, s (None: not known)."""
        rate = self.recent_rate(name)
        if not remaining or name not in remaining or not rate:
            return None
        return remaining[name] / rate

    def _pays_back(self, name: str, current: Mapping[str, int],
                   remaining: Mapping[str, float] | None) -> bool:
        left = self._time_left(name, remaining)
        return left is None or \
            left >= self.settings.payback * (self._settle(current, name) + self.window())

    def _ends_within_trial(self, current: Mapping[str, int],
                           remaining: Mapping[str, float] | None) -> bool:
        """Whether a job's measured time left is shorter than a trial started now (its new
        workers' first batches and a window): the job would end before the trial's window,
        the job set would change and the loop start anew, so the trial could not be judged
        and its cost (forked workers, a worse split) would buy nothing."""
        if not remaining:
            return False
        trial_s = self._settle(current) + self.window()
        lefts = (self._time_left(name, remaining) for name in self.jobs)
        return any(left is not None and left < trial_s for left in lefts)

    def _judge(self, now: float, current: Mapping[str, int],
               remaining: Mapping[str, float] | None = None) -> dict[str, int]:
        trial, s = self.trial, self.settings
        if trial.since is None:
            if (trial.donor is None or self.jobs[trial.donor].applied) \
                    and (trial.receiver is None or self.jobs[trial.receiver].applied):
                trial.since = now + self._settle(current, trial.receiver or trial.donor)
            return {}
        rate = self._window(now, trial.since)
        if rate is None:
            return {}
        if trial.donor is None:  # a probe: its workers must pay for themselves
            tolerance = -max(s.grow_gain, trial.noise / 2)
        else:
            tolerance = max(s.tolerance, trial.noise)
        kept = rate >= (1 - tolerance) * trial.before
        data = {"from": trial.donor, "to": trial.receiver, "workers": trial.workers,
                "before": round(trial.before, 1), "after": round(rate, 1),
                "tolerance": round(tolerance, 3)}
        if trial.predicted is not None:  # what the model said the node would read
            data["predicted"] = round(trial.before + trial.predicted, 1)
        self.trial, self.phase = None, "steady"
        if kept:
            self.kept.add((trial.donor, trial.receiver))
            self.rates = [rate]
            self.window_from = now
            self.events.append((None, "loop_kept", data))
            if self._guard(now, rate, current):
                return self._back_to_even(now, current)
            # a trial kept: its window measured where the node stands, so the next trial
            # starts now (a move along this pair twice as large, measured the same way)
            if trial.donor is not None and trial.receiver is not None:
                self.stride[(trial.donor, trial.receiver)] = 2 * trial.workers
            return self._move(now, current, remaining)
        self.rejected.add((trial.donor, trial.receiver))
        self.events.append((None, "loop_reverted", data))
        if trial.donor is None:
            self.window_from = now + self._settle(current, trial.receiver)
            return {trial.receiver: current[trial.receiver] - trial.workers}
        if trial.receiver is None:
            self.window_from = now + self._settle(current, trial.donor)
            return {trial.donor: current[trial.donor] + trial.workers}
        self.window_from = now + self._settle(current, trial.donor)
        return {trial.donor: current[trial.donor] + trial.workers,
                trial.receiver: current[trial.receiver] - trial.workers}
