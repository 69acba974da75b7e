"""The ranking behind the CPU-share rule ``order``: strict priority on a fluid node.

Under ``order`` the job ranked first gets all the CPU its processes can use, the next what
that leaves, and so on (``adloader.host.cpu_share``). On a fluid node — the node loads at
most ``peak`` samples/s (L(D), D its workers), a job at most its ``cap`` (its GPU's ceiling
c_i·B·F_μ, and what its own d_i workers load with the node to themselves, L(d_i)) — a ranking
gives the first job min(cap, peak), the next min(cap, what is left), and its completions
follow, re-shared at each one (``completions``); the last job left takes the node up to its
GPU's ceiling (the daemon plans it the node's workers then). ``rank`` picks the ranking with
the least sum of completions (the least mean JCT) among those whose makespan is within
``MAKESPAN_SLACK`` of the least any ranking reaches: every ranking for up to ``EXHAUSTIVE``
jobs, else a local search from the plain rule's (each job moved to each place while that
helps; past ``SEARCHED`` jobs the plain rule's ranking). A job whose GPU binds it takes only
its cap when ranked first, and ranked last it would end alone at its GPU's rate while the
node's CPU sat idle — the makespan bound keeps it ahead; the jobs loading binds go shortest
first, but a job whose own workers cannot take the node's CPU leaves the rest to the next
one, which the caps count.

The estimates behind the caps move from one decision to the next: a ceiling depends on which
of the job's GPU co-tenants still run, and the online correction moves it (several-fold
within one run). With exact caps the best ranking of a fixed set of jobs stays the best as
they progress, so a change of ranking between arrivals and completions follows noise: it
hands the CPU from the job that was ahead to one that then ends no sooner. So while no job
is new to it (a job that ends leaves it, the others keep their order), the ranking in force
stays unless its makespan is ``KEEP_SPAN`` over the least; when a job arrives it stays (the
new job placed where the best ranking places it) while it is within the makespan bound and
its sum within ``KEEP_GAIN`` of the best's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAKESPAN_SLACK = 0.02  # a ranking may end the last job this much later than the least
KEEP_GAIN = 0.03  # a new job: the ranking in force stays unless another ends them this sooner
KEEP_SPAN = 0.25  # no new job: it stays unless its makespan is this much over the least
EXHAUSTIVE = 6  # every ranking up to this many jobs (6! = 720); a local search past it
SEARCHED = 12  # the local search up to this many jobs; past it the plain rule's ranking
_SEARCH_PASSES = 4


@dataclass(frozen=True)
class Lane:
    """One job as the fluid node sees it: samples left; the most it can take while others
    run (``cap``, samples/s: its GPU's ceiling and its own workers' loading) and once it runs
    alone (``alone``: its GPU's ceiling — the daemon then plans it the node's workers);
    ``math.inf`` where nothing bounds it but the node."""

    id: str
    remaining: float
    cap: float = math.inf
    alone: float = math.inf


def completions(lanes: Sequence[Lane], peak: float) -> list[float]:
    """Each lane's completion (seconds from now) when the lanes are ranked as given: the
    first takes min(cap, peak), each next min(cap, what the ones ahead leave), until a lane
    ends and the rest share again; the last one left min(alone, peak). A lane that gets
    nothing for ever ends at ``math.inf``."""
    if not peak > 0:
        raise ValueError(f"the node's loading must be positive, not {peak!r}")
    left = [max(float(lane.remaining), 0.0) for lane in lanes]
    done = [0.0] * len(lanes)
    active = [i for i, r in enumerate(left) if r > 0]
    now = 0.0
    while active:
        free, rates = float(peak), {}
        for i in active:
            cap = lanes[i].alone if len(active) == 1 else lanes[i].cap
            rates[i] = max(0.0, min(cap, free))
            free -= rates[i]
        moving = [i for i in active if rates[i] > 0]
        if not moving:  # nothing can move again: the rest never end
            for i in active:
                done[i] = math.inf
            break
        first = min(moving, key=lambda i: left[i] / rates[i])
        step = left[first] / rates[first]
        now += step
        for i in moving:
            left[i] = 0.0 if i == first else max(0.0, left[i] - rates[i] * step)
        ended = [i for i in active if left[i] <= 1e-9 * max(1.0, lanes[i].remaining)]
        for i in ended:
            done[i] = now
        active = [i for i in active if i not in ended]
    return done


def _score(lanes: Sequence[Lane], peak: float) -> tuple[float, float]:
    """(makespan, sum of completions) of one ranking."""
    ends = completions(lanes, peak)
    return max(ends, default=0.0), sum(ends)


def plain_key(lane: Lane, peak: float) -> tuple:
    """The plain rule, the search's start and its tie-break: jobs their cap keeps under the
    node's loading first, the longest at its cap first; then the fewest samples left."""
    if lane.cap < peak:
        return (0, -lane.remaining / max(lane.cap, 1e-9), lane.id)
    return (1, lane.remaining, lane.id)


def _scored(lanes: list[Lane], peak: float) -> list[tuple[tuple[Lane, ...], float, float]]:
    """(ranking, makespan, sum) of every ranking (few jobs), else of the rankings a local
    search visits from the plain one (up to ``SEARCHED`` jobs; past that the plain one)."""
    if len(lanes) <= EXHAUSTIVE:
        return [(r, *_score(r, peak)) for r in itertools.permutations(lanes)]
    best = tuple(lanes)
    seen = [(best, *_score(best, peak))]
    if len(lanes) > SEARCHED:
        return seen
    span, total = seen[0][1:]
    for _ in range(_SEARCH_PASSES):
        moved = False
        for i, j in itertools.permutations(range(len(best)), 2):
            trial = list(best)
            trial.insert(j, trial.pop(i))
            trial_span, trial_total = _score(trial, peak)
            seen.append((tuple(trial), trial_span, trial_total))
            if trial_span <= span * (1 + MAKESPAN_SLACK) and trial_total < total * (1 - 1e-9):
                best, span, total, moved = tuple(trial), trial_span, trial_total, True
        if not moved:
            break
    return seen


def rank(lanes: Sequence[Lane], peak: float, current: Sequence[str] = ()) -> list[str]:
    """The lanes' ids in the ranking to run (see the module's text); ``current``: the ranking
    in force, kept while it stays good enough."""
    if not lanes:
        return []
    seed = sorted(lanes, key=lambda lane: plain_key(lane, peak))
    scored = _scored(seed, peak)
    least = min(span for _, span, _ in scored)
    bound = least * (1 + MAKESPAN_SLACK) + 1e-9
    # among the rankings within the bound, the least sum; of those alike, the first visited
    _, _, total, best = min((round(t, 6), n, t, r) for n, (r, s, t) in enumerate(scored)
                            if s <= bound)
    best_ids = [lane.id for lane in best]
    by_id = {lane.id: lane for lane in lanes}
    kept = [i for i in dict.fromkeys(current) if i in by_id]
    same = len(kept) == len(by_id)  # no job new to it (those that ended are left out)
    for place, i in enumerate(best_ids):  # a job new to the ranking: where the best puts it
        if i not in kept:
            kept.insert(min(place, len(kept)), i)
    if kept != best_ids:
        span, kept_total = _score([by_id[i] for i in kept], peak)
        if same and span <= least * (1 + KEEP_SPAN) + 1e-9 \
                or span <= bound and kept_total <= total * (1 + KEEP_GAIN):
            return kept
    return best_ids

