"""The closed loop (``adloader.scheduling.closed_loop``) and the intake ceiling C_j
(``adloader.scheduling.model.intake``), driven by a truth the model gets wrong.

No sockets, processes or sleeps: a ``Truth`` plays the node — each job trains at the rate
the truth gives its applied workers, heartbeats every half second, and applies a count one
second after it was sent (its new workers' cold start). Time is the truth's own clock.
"""

from __future__ import annotations

import numpy as np
import pytest

from adloader.daemon.control.live import LiveJob
from adloader.daemon.control.scheduler import Scheduler
from adloader.daemon.control.tokens import TokenDigest
from adloader.protocol import Allocation, Heartbeat, JobFeatures, Paused, Register, Resize
from adloader.scheduling.closed_loop import ClosedLoop, LoopSettings
from adloader.scheduling.model.intake import FLOOR_MAX, WEIGHT, IntakeCeiling
from adloader.scheduling.planner import PlanJob, plan

B = 32
PER_WORKER = 400.0  # samples/s a worker loads, in the truths below


# -- the intake ceiling ---------------------------------------------------------------------

def test_the_first_heartbeat_gives_a_ceiling_no_warm_up():
    c = IntakeCeiling()
    assert c.rate(B) == 0.0  # unknown before any beat
    c.observe(0.1, 0.002)
    assert c.rate(B) == pytest.approx(B / 0.102)


def test_a_loader_bound_jobs_wait_is_not_taken_for_its_floor():
    c = IntakeCeiling()
    c.observe(0.1, 0.5)  # waits 5x its trainer's time: the loader binds it
    assert c.rate(B) == pytest.approx(B / (0.1 * (1 + FLOOR_MAX)))
    c.observe(0.1, 0.001)  # a beat with batches ready shows the floor
    assert c.rate(B) == pytest.approx(B / 0.101)


def test_the_time_outside_next_is_followed_and_a_beat_without_a_step_ignored():
    c = IntakeCeiling()
    c.observe(0.1, 0.0)
    c.observe(0.2, 0.0)
    assert c.outside_s == pytest.approx(0.1 + WEIGHT * 0.1)
    c.observe(0.0, 0.3)  # no batch boundary with a step in this beat
    assert c.beats == 2 and c.outside_s == pytest.approx(0.1 + WEIGHT * 0.1)


# -- the plan, on a truth with ceilings -----------------------------------------------------

@pytest.mark.parametrize("policy", ["balance", "waa", "optimal", "fair", "jct", "ftf"])
def test_a_plan_with_measured_ceilings_never_predicts_less_than_the_even_split(
        paper_model, policy):
    """Jobs whose training loops take in far less than their GPUs could train (C_j ≪ B·F_μ):
    the plan's predicted node rate, min(C_j, B·F_μ, λ(d)), is at least the even split's,
    and no job gets workers its ceiling cannot use."""
    capacity = 16
    table = paper_model.loading_table(capacity)
    node = table[capacity]
    per = float(node[1])  # one worker's rate with the node full
    for ceilings in ([2.2 * per, 2.5 * per, 9 * per], [1.5 * per, 7 * per, 12 * per],
                     [3 * per, 3 * per, 3 * per]):
        jobs = [PlanJob(f"j{i}", 128, 1, 1.8, 11.7, remaining_samples=128 * (100 + 50 * i),
                        running=True, workers=5 + (i == 0), gpu_ids=(i,), intake=c)
                for i, c in enumerate(ceilings)]
        out = plan(jobs, capacity=capacity, gpus=3, model=paper_model, table=table,
                   policy=policy, max_jobs_per_gpu=1)
        d = out.workers
        total = min(sum(d.values()), capacity)
        rate = sum(min(out.ceiling[n], float(table[total, d[n]])) for n in d)
        even = {"j0": 6, "j1": 5, "j2": 5}
        rate_even = sum(min(out.ceiling[n], float(table[capacity, even[n]])) for n in even)
        assert rate >= rate_even * (1 - 1e-9), (policy, ceilings, d)
        # a worker past a job's need (one fewer still feeds its ceiling) while another job
        # is short of its own: the waste the measured node showed
        at = {n: min(out.ceiling[n], float(table[total, d[n]])) for n in d}
        short = [n for n in d if at[n] < 0.97 * out.ceiling[n]]
        spare = [n for n in d if d[n] > 1 and min(out.ceiling[n], float(
            table[total, d[n] - 1])) >= out.ceiling[n] * (1 - 1e-9)]
        if policy != "balance":  # balance splits evenly whatever the jobs need
            assert not (short and spare), (policy, ceilings, d)
        for job in jobs:
            assert out.ceiling[job.name] <= job.intake * (1 + 1e-9)


# -- the loop, pure -------------------------------------------------------------------------

class Truth:
    """The node as it is: job ``n`` trains at ``rate(n, d)`` samples/s with ``d`` workers
    applied, a count sent is applied ``delay`` s later, a heartbeat every ``dt``."""

    def __init__(self, loop: ClosedLoop, rate, names, delay: float = 1.0, dt: float = 0.5,
                 requested: dict[str, int] | None = None,
                 planned: dict[str, int] | None = None):
        self.loop, self.rate, self.delay, self.dt = loop, rate, delay, dt
        self.t = 0.0
        self.sent = loop.reset(self.t, {n: B for n in names},  # what the daemon holds
                               requested=requested, planned=planned)
        self.applied = dict(self.sent)
        self.pending: list[tuple[float, str, int]] = []
        self.done = dict.fromkeys(names, 0.0)
        self.history: list[tuple[float, dict[str, int]]] = [(0.0, dict(self.sent))]
        self.node: list[tuple[float, float]] = []  # (time, the truth's node rate)

    def send(self, counts: dict[str, int]) -> None:
        for n, d in counts.items():
            self.sent[n] = d
            self.loop.resized(self.t, n)
            self.pending.append((self.t + self.delay, n, d))
        if counts:
            self.history.append((self.t, dict(self.sent)))

    def run(self, seconds: float, remaining=None) -> None:
        end = self.t + seconds
        while self.t < end - 1e-9:
            self.t += self.dt
            for at, n, d in [p for p in self.pending if p[0] <= self.t]:
                self.applied[n] = d
                self.pending.remove((at, n, d))
            rates = {n: self.rate(n, d) for n, d in self.applied.items()}
            self.node.append((self.t, sum(rates.values())))
            for n in self.done:
                self.done[n] += rates[n] * self.dt / B
                waiting = any(p[1] == n for p in self.pending)
                self.loop.beat(self.t, n, int(self.done[n]), applied=not waiting)
            self.send(self.loop.step(self.t, dict(self.sent), remaining))


def even_truth_rate(truth: Truth) -> float:
    return sum(truth.rate(n, d) for n, d in truth.loop.even_counts.items())


def late_beats(delays, per_beat: int = 5, beats: int = 120):
    """Three jobs train 10 batches/s each, exactly; a beat every 0.5 s, each reaching the
    daemon ``delays`` late (in order: one socket a job). (arrival, job, iteration)."""
    out = []
    for i, n in enumerate("abc"):
        arrived = 0.0
        for k in range(1, beats):
            arrived = max(arrived, k * 0.5 + delays[3 * k + i])
            out.append((arrived, n, per_beat * k))
    return sorted(out)


def test_a_count_is_timed_by_the_jobs_own_clock_rebuilt_from_its_beats_not_by_arrival():
    """Beats 0–0.6 s late, as under a busy core. Timed on arrival, the node's 4 s windows read
    up to tens of per cent off and their halves far apart (the floor); timed by each job's
    clock rebuilt from its beats' rates (samples over the master's interval), every window
    reads the true rate — and no beat is timed after it arrived."""
    delays = np.random.default_rng(3).uniform(0.0, 0.6, 400)
    for timed in (False, True):
        loop = ClosedLoop(16, LoopSettings(window_s=4.0))
        loop.reset(0.0, dict.fromkeys("abc", B))
        for now, n, iteration in late_beats(delays):
            loop.beat(now, n, iteration, True, 10.0 * B if timed else None)
            assert loop.jobs[n].beats[-1][0] <= now
        rates = [loop.node_rate(t, t + 4.0) for t in range(5, 50, 4)]
        errors = [abs(r / (3 * 10 * B) - 1) for r in rates]
        for t in range(5, 50, 4):
            loop._spread(t, t + 4.0, loop.node_rate(t, t + 4.0))
        if timed:
            assert max(errors) < 0.01 and loop._floor() < 0.01
        else:
            assert max(errors) > 0.05 and loop._floor() > 0.03


@pytest.mark.parametrize("per_s, window_s", [(2.3, 8.0), (0.7, 30.0)])
def test_counts_timed_at_their_batches_ends_read_whole_batches_with_no_quantum(per_s,
                                                                               window_s):
    """Slow jobs (2.3 batches/s; 0.7: most beats find no new batch) beat every second
    mid-batch; each beat's count is the count when its last batch ended and its rate over
    whole batches (the master's interval), and arrives 0–0.6 s late. Timed on arrival, a
    half-window of ~10 batches reads ±1 batch (the floor several per cent); timed at the
    batches' ends, every window and half reads the true rate."""
    delays = np.random.default_rng(5).uniform(0.0, 0.6, 400)
    starts = np.arange(10.0, 120.0 - window_s, window_s)
    for timed in (False, True):
        loop = ClosedLoop(16, LoopSettings(window_s=window_s))
        loop.reset(0.0, dict.fromkeys("abc", B))
        beats = []
        for i, n in enumerate("abc"):
            arrived, ended = 0.0, 0.0
            for k in range(1, 130):
                read = k + 0.1 * i
                count = int(read * per_s)
                end = count / per_s  # when the count's batch ended
                new = count - int((read - 1) * per_s)
                rate = B * new / (end - ended) if new else 0.0  # over whole batches
                arrived = max(arrived, read + delays[3 * k + i])
                beats.append((arrived, n, count, rate))
                ended = end if new else ended
        for now, n, count, rate in sorted(beats):
            loop.beat(now, n, count, True, rate if timed else None)
        for t in starts:
            loop._spread(t, t + window_s, loop.node_rate(t, t + window_s))
        errors = [abs(loop.node_rate(t, t + window_s) / (3 * per_s * B) - 1) for t in starts]
        if timed:
            assert max(errors) < 0.01 and loop._floor() < 0.01
        else:
            assert loop._floor() > 0.03


def test_a_clock_that_cannot_be_rebuilt_is_never_trusted_past_the_slack():
    """Masters that count samples otherwise (job a's batches twice the size the daemon was
    told: its rebuilt clock runs at half speed; job c's half: twice as fast) and a stall
    (beats with no samples): no count is timed after it arrived nor more than the slack and
    the largest delay before it, and the others' windows read the true rate again after the
    stall."""
    from adloader.scheduling.closed_loop import CLOCK_SLACK_S

    delays = np.random.default_rng(4).uniform(0.0, 0.6, 400)
    loop = ClosedLoop(16, LoopSettings(window_s=4.0))
    loop.reset(0.0, dict.fromkeys("abc", B))
    told = {"a": 20.0 * B, "b": 10.0 * B, "c": 5.0 * B}
    slow = []
    for now, n, iteration in late_beats(delays):
        stalled = 20.0 <= now < 25.0
        loop.beat(now, n, iteration, True, 0.0 if stalled else told[n])
        at = loop.jobs[n].beats[-1][0]
        assert now - CLOCK_SLACK_S - 0.6 <= at <= now
        slow.append(now - at) if n == "a" else None
    assert max(slow) > 0.5 * CLOCK_SLACK_S  # the slow clock was followed, then started anew
    for t in (8.0, 30.0, 45.0):
        assert loop.job_rate("b", t, t + 4.0) == pytest.approx(10 * B, rel=0.01)


def test_the_loop_starts_even_and_moves_nothing_before_every_job_trained_a_batch():
    loop = ClosedLoop(16, LoopSettings(window_s=2.0))
    loop.target = {"a": 12, "b": 2, "c": 2}
    assert loop.reset(0.0, {"a": B, "b": B, "c": B}) == {"a": 6, "b": 5, "c": 5}
    for t in range(1, 40):  # c never trains a batch (its start-up): nothing moves
        loop.beat(t, "a", 10 * t, True)
        loop.beat(t, "b", 10 * t, True)
        loop.beat(t, "c", 0, True)
        assert loop.step(t, {"a": 6, "b": 5, "c": 5}) == {}
    assert loop.phase == "start" and loop.even_rate is None


def test_a_move_the_node_measures_worse_is_moved_back_and_not_tried_again():
    """The model wants 12/2/2; the truth's jobs cannot use more than 5 workers each (a
    ceiling the model does not know): the first move loses 2 workers' worth, is measured,
    and goes back; the node ends at the even split and stays there."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))
    loop.target = {"a": 12, "b": 2, "c": 2}
    truth = Truth(loop, lambda n, d: PER_WORKER * min(d, 5), ["a", "b", "c"])
    truth.run(60)
    assert truth.sent == {"a": 6, "b": 5, "c": 5}
    reverted = [e for e in loop.events if e[1] == "loop_reverted"]
    assert reverted and reverted[0][2]["after"] < reverted[0][2]["before"]
    assert not [e for e in loop.events if e[1] == "loop_kept"]
    # tried each way once at most (the pairs toward the plan), then never again (a capacity
    # probe, workers added past 16, is not a move)
    moves = [h for h in truth.history[1:] if h[1]["a"] > 6 and sum(h[1].values()) == 16]
    assert 1 <= len(moves) <= 2
    # never below the even split's rate for longer than a trial (cold start + two windows)
    low = [t for t, r in truth.node if r < 0.97 * even_truth_rate(truth)]
    assert len(low) * truth.dt <= 2 * (truth.delay + 2 * loop.settings.window_s)


def test_a_move_the_node_measures_better_is_kept():
    """The truth agrees with the model here (job a loads 2x per worker): the loop walks all
    the way to the plan, each move kept (a pair's second move is what its gap leaves)."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=0.0))  # no
    loop.target = {"a": 12, "b": 2, "c": 2}  # probes: every worker adds in this truth
    truth = Truth(loop, lambda n, d: PER_WORKER * d * (2 if n == "a" else 1), ["a", "b", "c"])
    truth.run(80)
    assert truth.sent == {"a": 12, "b": 2, "c": 2}
    kept = [e[2] for e in loop.events if e[1] == "loop_kept"]
    assert sum(k["workers"] for k in kept) == 6 and all(k["workers"] <= 2 for k in kept)
    assert not [e for e in loop.events if e[1] in ("loop_reverted", "loop_guard")]


def test_a_kept_move_is_followed_at_once_by_one_twice_as_large_along_the_same_pair():
    """The truth agrees with the model (a loads 2x per worker): 2 workers, kept, then 4 at
    once (no steady window between), then what is left of the plan's gap."""
    settings = LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=0.0)
    loop = ClosedLoop(16, settings)
    loop.target = {"a": 15, "b": 1}
    truth = Truth(loop, lambda n, d: PER_WORKER * d * (2 if n == "a" else 1), ["a", "b"])
    truth.run(60)
    assert truth.sent == {"a": 15, "b": 1}
    kept = [e[2]["workers"] for e in loop.events if e[1] == "loop_kept"]
    assert kept == [2, 4, 1]
    # each next move is sent in the step that kept the one before: three trials, back to back
    moves = [t for t, counts in truth.history[1:]]
    assert len(moves) == 3
    trial = truth.delay + truth.dt + settings.window_s  # applied, settled, one window
    assert all(b - a <= trial + 2 * settings.settle_s + 2 * truth.dt
               for a, b in zip(moves, moves[1:], strict=False))


def arrival(truth: Truth, name: str) -> dict[str, int]:
    """Job ``name`` arrives: the loop's new set, its first start sent and applied at once."""
    counts = truth.loop.reset(truth.t, {**dict.fromkeys(truth.done, B), name: B},
                              current=dict(truth.sent))
    truth.done[name] = 0.0
    truth.sent, truth.applied = dict(counts), dict(counts)
    truth.history.append((truth.t, dict(counts)))
    return counts


def test_an_arrival_starts_where_the_loop_stood_and_keeps_it_where_the_node_measures_no_worse():
    """a and b at a kept 14/2; c arrives: its even share (5), a and b the other 11 in
    proportion (10/1), measured first, then the even split; the jobs load alike per worker,
    so both measure the same and the carried start stays the base."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=0.0))
    loop.target = {"a": 14, "b": 2}
    truth = Truth(loop, lambda n, d: PER_WORKER * d, ["a", "b"])
    truth.run(40)
    assert truth.sent == {"a": 14, "b": 2}
    loop.target = {"a": 10, "b": 1, "c": 5}
    assert arrival(truth, "c") == {"a": 10, "b": 1, "c": 5}
    assert [name for name, _ in loop.starts] == ["carried", "even"]
    truth.run(30)
    base = [e[2] for e in loop.events if e[1] == "loop_base"]
    assert base and base[-1]["start"] == "carried"
    assert truth.sent == {"a": 10, "b": 1, "c": 5} == loop.base_counts
    # the guard measures against the better of the two
    assert loop.base_rate == max(base[-1]["rates"].values())


def test_an_arrival_the_carried_start_measures_worse_for_goes_to_the_even_split():
    """a cannot use more than 5 workers in this truth: carried (a 10) loses what even does
    not, and the even split is the base."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=0.0))
    loop.target = {"a": 14, "b": 2}
    truth = Truth(loop, lambda n, d: PER_WORKER * (min(d, 5) if n == "a" else d), ["a", "b"])
    truth.sent = truth.applied = {"a": 14, "b": 2}  # where an earlier plan had left it
    arrival(truth, "c")
    truth.run(30)
    base = [e[2] for e in loop.events if e[1] == "loop_base"]
    assert base and base[-1]["start"] == "even"
    assert base[-1]["rates"]["carried"] < base[-1]["rates"]["even"]
    assert loop.base_counts == {"a": 6, "b": 5, "c": 5}


def test_a_carried_start_never_runs_more_workers_than_the_node_has():
    """a had 8 of a node of 8 after probes past its workers (11 in all); e arrives with its
    even share (1): the other 7 in proportion would give b, c and d none, each keeps one, and
    a gives up what that takes."""
    loop = ClosedLoop(8)
    loop.reset(0.0, dict.fromkeys("abcd", B))
    loop.reset(1.0, dict.fromkeys("abcde", B), current={"a": 8, "b": 1, "c": 1, "d": 1})
    name, carried = loop.starts[0]
    assert name == "carried"
    assert carried == {"a": 4, "b": 1, "c": 1, "d": 1, "e": 1}


def test_after_a_job_ends_the_others_start_from_the_even_split():
    loop = ClosedLoop(16)
    loop.reset(0.0, {"a": B, "b": B, "c": B})
    counts = loop.reset(1.0, {"a": B, "b": B}, first="even", current={"a": 14, "b": 1})
    assert counts == {"a": 8, "b": 8} and [name for name, _ in loop.starts] == ["even"]


def test_the_guard_returns_to_even_when_small_losses_add_up_and_holds_it():
    """Each move alone loses ~2 % (within the tolerance, so each is kept), but together they
    leave the node more than 3 % below its even split: the guard goes back to even within
    two windows of the second loss and holds it."""
    def rate(n, d):  # a's workers past 6 load 85 % as much each: each move of 2 costs ~2 %
        return PER_WORKER * (min(d, 6) + 0.85 * max(d - 6, 0)) if n == "a" \
            else PER_WORKER * d
    settings = LoopSettings(window_s=2.0, dwell_s=0.0, hold_s=30.0, grow_to=0.0)
    loop = ClosedLoop(16, settings)
    loop.target = {"a": 12, "b": 2, "c": 2}
    truth = Truth(loop, rate, ["a", "b", "c"])
    truth.run(70)
    guard = [e for e in loop.events if e[1] == "loop_guard"]
    assert guard and truth.sent == {"a": 6, "b": 5, "c": 5}
    # bounded: from the first window the node was > 3 % below even to the guard's resize
    even = even_truth_rate(truth)
    first_low = next(t for t, r in truth.node if r < 0.97 * even)
    back = next(t for t, counts in truth.history if t > first_low and counts["a"] == 6)
    assert back - first_low <= settings.guard_windows * settings.window_s + 2 * settings.window_s
    # held: no move for hold_s after it
    assert all(counts["a"] == 6 for t, counts in truth.history if back <= t < back + 25)


def test_a_jobs_resizes_are_a_dwell_apart():
    loop = ClosedLoop(16, LoopSettings(window_s=1.0, dwell_s=10.0, grow_to=0.0))
    loop.target = {"a": 12, "b": 2, "c": 2}
    truth = Truth(loop, lambda n, d: PER_WORKER * d * (2 if n == "a" else 1), ["a", "b", "c"])
    truth.run(60)
    times = [t for t, counts in truth.history[1:]]
    assert len(times) >= 2
    assert all(b - a >= 10.0 - 1e-9 for a, b in zip(times, times[1:], strict=False))


def test_no_worker_goes_to_a_job_that_ends_before_its_trial_could_pay_back():
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=0.0))
    loop.target = {"a": 12, "b": 2, "c": 2}
    truth = Truth(loop, lambda n, d: PER_WORKER * d * (2 if n == "a" else 1), ["a", "b", "c"])
    # a has 3 s of samples left at its rate: a trial (settle + window) could not pay back
    truth.run(40, remaining={"a": 3 * PER_WORKER * 12, "b": 1e9, "c": 1e9})
    assert truth.sent == {"a": 6, "b": 5, "c": 5}


def test_no_trial_starts_while_a_job_ends_before_it_could_be_judged():
    """The probe of the test below (a below its ceiling) is not tried while b has less time
    left than one trial: b would end before the probe's window, the job set would change,
    and the probe, never judged, would cost (forked workers) and buy nothing. With b's
    time left long, the same node probes."""
    def node(remaining_b: float) -> tuple[Truth, ClosedLoop]:
        loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))
        loop.target = {"a": 6, "b": 5, "c": 5}
        loop.ceiling = {"a": 7 * PER_WORKER, "b": 5 * PER_WORKER, "c": 5 * PER_WORKER}
        truth = Truth(loop, lambda n, d: PER_WORKER * min(d, 7 if n == "a" else 5),
                      ["a", "b", "c"])
        truth.run(30, remaining={"a": 1e9, "b": remaining_b, "c": 1e9})
        return truth, loop

    truth, loop = node(2 * PER_WORKER * 5)  # 2 s left at b's rate; a trial is 1 s + 2 s
    assert truth.sent == {"a": 6, "b": 5, "c": 5}
    assert not [e for e in loop.events if e[1] in ("loop_kept", "loop_reverted")]
    truth, loop = node(1e9)
    assert truth.sent == {"a": 8, "b": 5, "c": 5}


def test_the_counts_the_jobs_asked_for_are_measured_then_the_even_split_the_better_kept():
    """Each job asked for 8 workers (24 on a node of 16: its workers wait on the trainer part
    of the time, so more of them load more): the loop starts the jobs as asked, measures,
    then measures the even split, and keeps the better as its base."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))  # 24: its most, no probes
    loop.target = {"a": 6, "b": 5, "c": 5}
    names = ["a", "b", "c"]
    truth = Truth(loop, lambda n, d: PER_WORKER * min(d, 8) * 0.5, names,
                  requested=dict.fromkeys(names, 8))
    assert truth.sent == dict.fromkeys(names, 8)  # as asked, first
    truth.run(40)
    assert any(counts == {"a": 6, "b": 5, "c": 5} for _, counts in truth.history)  # tried
    base = [e[2] for e in loop.events if e[1] == "loop_base"]
    assert base and base[0]["start"] == "requested"
    assert base[0]["rates"]["requested"] > base[0]["rates"]["even"]
    assert truth.sent == dict.fromkeys(names, 8) and loop.base_counts == truth.sent


def test_asked_for_counts_the_node_measures_worse_are_left_for_the_even_split():
    """Past 5 workers a job's extra workers only contend: the asked-for 8 each measure worse,
    and the loop goes back to the even split, its base and the guard's (and no probe
    pays)."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))  # 24: its most, no probes
    loop.target = {"a": 6, "b": 5, "c": 5}
    names = ["a", "b", "c"]
    truth = Truth(loop, lambda n, d: PER_WORKER * (min(d, 5) - 0.5 * max(d - 5, 0)), names,
                  requested=dict.fromkeys(names, 8))
    truth.run(40)
    base = [e[2] for e in loop.events if e[1] == "loop_base"]
    assert base and base[0]["start"] == "even"
    assert truth.sent == {"a": 6, "b": 5, "c": 5} == loop.base_counts


def test_asked_for_counts_stay_where_the_even_split_measures_better_only_within_the_noise():
    """Extra workers contend a little: the even split trains the node 1.2 % faster than the
    asked-for 7 each, less than a window's noise (``tolerance``): no evidence to leave what
    the jobs would run with no daemon, so the asked-for counts are the base. Past the noise
    (the test before) the even split is."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))
    loop.target = dict.fromkeys(["a", "b", "c"], 7)  # the plan: as asked, no move to try
    names = ["a", "b", "c"]
    truth = Truth(loop, lambda n, d: PER_WORKER * 5 * (1 - 0.007 * max(d - 5, 0)), names,
                  requested=dict.fromkeys(names, 7))
    truth.run(40)
    base = [e[2] for e in loop.events if e[1] == "loop_base"]
    assert base and base[0]["rates"]["even"] > base[0]["rates"]["requested"]
    assert base[0]["start"] == "requested"
    assert truth.sent == dict.fromkeys(names, 7) == loop.base_counts


def test_asked_for_counts_are_measured_only_between_the_even_split_and_the_loops_bound():
    loop = ClosedLoop(16)
    assert loop.reset(0.0, {"a": B, "b": B}, requested={"a": 2, "b": 2}) == {"a": 8, "b": 8}
    assert [name for name, _ in loop.starts] == ["even"]
    assert loop.reset(0.0, {"a": B, "b": B}, requested={"a": 9, "b": 9},
                      first="even") == {"a": 8, "b": 8}  # after an ending: even first
    assert [name for name, _ in loop.starts] == ["even", "requested"]
    loop.reset(0.0, {"a": B, "b": B}, requested={"a": 9, "b": 9})
    assert [name for name, _ in loop.starts] == ["requested", "even"]
    loop.reset(0.0, {"a": B, "b": B}, requested={"a": 16, "b": 16})  # past 1.5 x 16 in all
    assert [name for name, _ in loop.starts] == ["even"]
    loop.reset(0.0, {"a": B, "b": B}, requested={"a": 2, "b": 2})
    assert [name for name, _ in loop.starts] == ["even"]
    loop.reset(0.0, {"a": B, "b": B}, requested={"a": 12, "b": None})  # one did not ask
    assert [name for name, _ in loop.starts] == ["even"]


def shed_start(contention: bool) -> tuple[ClosedLoop, Truth, dict[str, int]]:
    """Three jobs on 16 workers whose plan sheds the even split (1 each), run 40 s: on a
    node whose loading peaks at 4 workers (``contention``) or one where every worker adds."""
    names = ["a", "b", "c"]
    shed = dict.fromkeys(names, 1)
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.0))
    loop.target = dict(shed)
    truth = Truth(loop, lambda n, d: PER_WORKER * d, names, planned=shed)
    if contention:
        truth.rate = contended(truth)
    assert truth.sent == shed and [s for s, _ in loop.starts] == ["planned", "even"]
    truth.run(40, remaining=dict.fromkeys(names, 1e9))
    return loop, truth, shed


def test_a_plan_that_sheds_the_even_split_is_the_first_start_and_the_better_is_kept():
    """The plan runs 1 worker each where the even split runs 6, 5, 5: the jobs start at the
    plan (no worker forked that the even split would add), then the even split is measured
    (every job has long to run) and the better of the two is the base: on a node whose
    loading peaks at 4 workers the plan, on one where every worker adds the even split, and
    then no shed toward the plan the node measured worse."""
    for contention, base in ((True, "planned"), (False, "even")):
        loop, truth, shed = shed_start(contention)
        chosen = [e[2] for e in loop.events if e[1] == "loop_base"]
        assert chosen and chosen[0]["start"] == base, contention
        assert set(chosen[0]["rates"]) == {"planned", "even"}
        assert loop.base_counts == (shed if contention else {"a": 6, "b": 5, "c": 5})
        if not contention:  # the plan measured worse: no shed toward it is tried again
            assert truth.sent == {"a": 6, "b": 5, "c": 5}
            assert not [e for e in loop.events if e[1] in ("loop_kept", "loop_reverted")]


def test_a_shed_plan_is_kept_unmeasured_against_even_where_a_job_ends_before_it_pays_back():
    """As above, on the node where every worker adds, but job b has 5 s left: measuring the
    even split (a settle and a window, twice over to pay back) would fork 13 workers for
    jobs about to change, so the plan stays the base (a trial of a few workers, judged within
    b's time, may follow)."""
    names = ["a", "b", "c"]
    shed = dict.fromkeys(names, 1)
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.0))
    loop.target = dict(shed)
    truth = Truth(loop, lambda n, d: PER_WORKER * d, names, planned=shed)
    truth.run(4, remaining={"a": 1e9, "b": 5 * PER_WORKER, "c": 1e9})
    assert loop.phase != "start" and loop.base_counts == shed
    assert all(counts != {"a": 6, "b": 5, "c": 5} for _, counts in truth.history)
    assert not [e for e in loop.events if e[1] in ("loop_even", "loop_base")]


def test_after_a_job_ends_a_kept_shed_stays_the_first_start_and_an_even_base_goes_even():
    """A shedding plan kept as the base (the node measured it better than the even split):
    when job c ends, a and b start where they stand, 1 each, not at the even split's 8
    (forking the workers the node measured as no help), and the even split is measured after
    it (their time left pays back; a move the loop kept since stays, too). Where the even
    split was the base, a job ending frees its workers and the others start at the even
    split, as before."""
    for contention, first in ((True, "planned"), (False, "even")):
        loop, truth, shed = shed_start(contention)
        assert loop.base_start == first
        current = {n: truth.sent[n] for n in ("a", "b")}
        counts = loop.reset(truth.t, {"a": B, "b": B}, first="even", current=current)
        if contention:
            assert counts == current and sum(current.values()) <= 4
            assert [s for s, _ in loop.starts] == ["planned", "even"]
        else:
            assert counts == {"a": 8, "b": 8} and [s for s, _ in loop.starts] == ["even"]
    # a job ends while the jobs still run at the plan's start, unmeasured: they stay there
    loop = ClosedLoop(16)
    loop.reset(0.0, {"a": B, "b": B, "c": B}, planned=shed)
    assert loop.reset(1.0, {"a": B, "b": B}, first="even",
                      current={"a": 1, "b": 1}) == {"a": 1, "b": 1}
    # an arrival is not a job leaving: the carried start, as before
    loop = ClosedLoop(16)
    loop.reset(0.0, {"a": B, "b": B})
    loop.base_start = "planned"
    loop.reset(1.0, {"a": B, "b": B, "c": B}, current={"a": 9, "b": 1})
    assert [s for s, _ in loop.starts] == ["carried", "even"]


def test_a_plan_that_gives_a_job_more_than_its_even_share_does_not_start_first():
    loop = ClosedLoop(16)
    names = {"a": B, "b": B, "c": B}
    for planned in ({"a": 7, "b": 1, "c": 1},  # fewer in all, but a over its share
                    {"a": 6, "b": 5, "c": 5},  # the even split itself
                    {"a": 1, "b": 1}):  # not these jobs
        assert loop.reset(0.0, names, planned=planned) == {"a": 6, "b": 5, "c": 5}
        assert [s for s, _ in loop.starts] == ["even"], planned
    assert loop.reset(0.0, names, planned={"a": 6, "b": 1, "c": 5}) == {"a": 6, "b": 1, "c": 5}


def test_a_capacity_probe_adds_workers_while_the_node_gains_and_stops_at_the_ceiling():
    """No move is left toward the plan (it is the even split); job a is below its ceiling
    (7 workers' worth): a probe gives it 2 workers more, past the node's 16, the node's rate
    rises, and they stay; b and c are at theirs and get none."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))
    loop.target = {"a": 6, "b": 5, "c": 5}
    loop.ceiling = {"a": 7 * PER_WORKER, "b": 5 * PER_WORKER, "c": 5 * PER_WORKER}
    truth = Truth(loop, lambda n, d: PER_WORKER * min(d, 7 if n == "a" else 5),
                  ["a", "b", "c"])
    truth.run(60)
    kept = [e[2] for e in loop.events if e[1] == "loop_kept"]
    assert kept and kept[0]["from"] is None and kept[0]["to"] == "a"
    assert truth.sent == {"a": 8, "b": 5, "c": 5}


def test_a_probe_the_node_does_not_pay_for_goes_back_and_the_node_never_exceeds_its_bound():
    """Every job is at what the node can load (flat past 16 workers in all): each probe is
    measured, moved back, and not tried again; the workers never pass grow_to × 16."""
    settings = LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.25)
    loop = ClosedLoop(16, settings)
    loop.target = {"a": 6, "b": 5, "c": 5}
    truth = Truth(loop, lambda n, d: PER_WORKER * 16 / 3, ["a", "b", "c"])
    truth.run(80)
    reverted = [e[2] for e in loop.events if e[1] == "loop_reverted"]
    assert {r["to"] for r in reverted} == {"a", "b", "c"}
    assert all(r["from"] is None for r in reverted)
    assert truth.sent == {"a": 6, "b": 5, "c": 5}
    assert max(sum(c.values()) for _, c in truth.history) <= 20


def jitter(rate, spread: float):
    """``rate`` read through a node whose measurements swing ±``spread`` (a fixed
    pseudo-random sequence, one draw a heartbeat)."""
    draws = iter(np.random.default_rng(7).uniform(-spread, spread, 100_000))
    return lambda n, d: rate(n, d) * (1 + next(draws))


def test_a_probe_the_model_gives_less_than_the_nodes_noise_is_not_tried():
    """As in the probe test above, a is below its ceiling, but the node's windows read ±15 %
    apart and the model gives a's two more workers nothing (its loading table flat past
    6): the probe could only be judged on noise, so it is not tried — no worker is forked,
    and the log says why. Where the model gives them their worth (a grows to 7), the same
    node tries it."""
    for flat, tried in ((True, False), (False, True)):
        loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0))
        loop.target = {"a": 6, "b": 5, "c": 5}
        loop.ceiling = {"a": 7 * PER_WORKER, "b": 5 * PER_WORKER, "c": 5 * PER_WORKER}
        loop.predict = lambda n, d, flat=flat, top=dict(loop.ceiling): PER_WORKER * min(
            d, 6 if flat and n == "a" else top[n] / PER_WORKER)
        truth = Truth(loop, jitter(lambda n, d: PER_WORKER * min(d, 7 if n == "a" else 5),
                                   0.15), ["a", "b", "c"])
        truth.run(60)
        assert loop._floor() > 0.02
        probes = [c for _, c in truth.history if sum(c.values()) > 16]
        assert bool(probes) == tried, flat
        untold = [e[2] for e in loop.events if e[1] == "loop_untold" and e[2]["to"] == "a"]
        if not tried:
            assert untold and untold[0]["gain"] < untold[0]["floor"]


def test_a_probe_waits_until_the_floor_is_read_on_three_windows():
    """As in the probe test above (a below its ceiling, the model gives its workers their
    worth): the probe is sent only once three windows have read the node's floor — the
    start's one window could put it anywhere. With ``floor_windows=1`` the same node sends
    it at once."""
    for windows in (3, 1):
        loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, floor_windows=windows))
        loop.target = {"a": 6, "b": 5, "c": 5}
        loop.ceiling = {"a": 7 * PER_WORKER, "b": 5 * PER_WORKER, "c": 5 * PER_WORKER}
        loop.predict = lambda n, d, top=dict(loop.ceiling): PER_WORKER * min(
            d, top[n] / PER_WORKER)
        truth = Truth(loop, lambda n, d: PER_WORKER * min(d, 7 if n == "a" else 5),
                      ["a", "b", "c"])
        read = None  # the windows read when the probe was sent
        while read is None and truth.t < 60:
            truth.run(truth.dt)
            if sum(truth.sent.values()) > 16:
                read = len(loop.spreads)
        assert read is not None, windows
        assert (read >= 3) == (windows == 3), (windows, read)


def test_the_trial_the_model_predicts_gains_most_goes_first():
    """The plan moves 2 of a's workers to b (a absorbs 4, b 5 in the truth) and c is below
    its ceiling (8 workers' worth). Where the model knows b's ceiling, the move is predicted
    to gain nothing and the capacity probe for c (2 workers' worth) goes first; where the
    model gives b 7 workers' worth, the move is predicted to gain as much as the probe and
    goes first (a tie keeps the plan's order). Both end with every trial judged."""
    for b_model, first in ((5, {"a": 6, "b": 5, "c": 7}), (7, {"a": 4, "b": 7, "c": 5})):
        loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, floor_windows=1))
        loop.target = {"a": 4, "b": 7, "c": 5}
        loop.ceiling = {"a": 4 * PER_WORKER, "b": b_model * PER_WORKER, "c": 8 * PER_WORKER}
        loop.predict = lambda n, d, top=dict(loop.ceiling): float(min(PER_WORKER * d, top[n]))
        truth = Truth(loop, lambda n, d: PER_WORKER * min(d, {"a": 4, "b": 5, "c": 8}[n]),
                      ["a", "b", "c"])
        truth.run(80)
        assert truth.history[1][1] == first, b_model
        judged = [e[2] for e in loop.events if e[1] in ("loop_kept", "loop_reverted")]
        assert judged[0]["from"] == (None if b_model == 5 else "a")
        assert truth.sent["a"] == 4 and truth.sent["c"] == 9  # the move and both probes kept


def test_one_window_read_far_off_does_not_widen_the_judge():
    """The first move toward the plan loses 2 of b's workers' worth (a absorbs no more than
    5) and goes back; the window after it reads 40 % low (a job's phase: an evaluation,
    say), the next as before. The next move (after the dwell) loses as much: the windows'
    rates now span 40 %, but the node's floor (each window's halves) is ~0, so the judge's
    tolerance stays at 3 % and the move goes back too, not kept on a 40 % allowance."""
    loop = ClosedLoop(15, LoopSettings(window_s=2.0, dwell_s=5.0, grow_to=1.0))
    loop.target = {"a": 9, "b": 3, "c": 3}
    truth = Truth(loop, None, ["a", "b", "c"])
    dip = {}  # the steady windows read when the first move went back: low until the next

    def rate(n, d):
        if sum(e[1] == "loop_reverted" for e in loop.events) == 1 and loop.phase == "steady":
            dip.setdefault("windows", len(loop.rates))
        low = dip.get("windows") == len(loop.rates)
        return (0.6 if low else 1.0) * PER_WORKER * (min(d, 5) if n == "a" else d)

    truth.rate = rate
    truth.run(60)
    judged = [e for e in loop.events if e[1] in ("loop_kept", "loop_reverted")]
    assert len(judged) >= 2 and judged[1][2]["to"] == "a"
    assert judged[1][2]["after"] < 0.9 * judged[1][2]["before"]  # the move lost
    assert not [e for e in loop.events if e[1] == "loop_kept"]
    assert judged[1][2]["tolerance"] < 0.1


def test_a_move_the_model_predicts_the_judge_would_revert_is_not_tried():
    """The plan gives a 10 workers, but the model (its ceilings) says a absorbs no more than
    6 and b and c lose 400 samples/s a worker: each move toward the plan is predicted to
    lose more than the judge's tolerance, so none is sent; the jobs keep the even split.
    With a model that gives a its workers' worth, the same plan's first move is tried."""
    for absorbs, moved in ((6, False), (16, True)):
        loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.0))
        loop.target = {"a": 10, "b": 3, "c": 3}
        loop.predict = lambda n, d, top=absorbs: PER_WORKER * min(d, top if n == "a" else d)
        truth = Truth(loop, lambda n, d: PER_WORKER * min(d, 6 if n == "a" else d),
                      ["a", "b", "c"])
        truth.run(30)
        sent = [c for _, c in truth.history[1:]]
        assert bool(sent) == moved, absorbs
        assert bool([e for e in loop.events if e[1] == "loop_untold"]) != moved


def test_where_the_plan_runs_fewer_workers_the_loop_sheds_them_while_the_node_holds():
    """A node whose loading peaks at 4 workers in all (each worker past them costs the node
    5 %, contention): the plan runs 1 each; the even split's 16 are shed 2 at a time, each
    trial kept as the node's rate rises, down to the plan."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.0))
    loop.target = {"a": 1, "b": 1, "c": 1}
    truth = Truth(loop, lambda n, d: 0.0, ["a", "b", "c"])
    truth.rate = contended(truth)
    truth.run(180)  # then a capacity probe is measured worse and goes back
    assert truth.sent == {"a": 1, "b": 1, "c": 1}
    kept = [e[2] for e in loop.events if e[1] == "loop_kept"]
    assert len(kept) >= 6 and all(k["to"] is None and k["workers"] <= 2 for k in kept)
    assert all(k["after"] > k["before"] for k in kept[:6])  # past the peak: each gains
    assert all(k["after"] >= 0.97 * k["before"] for k in kept)  # at it: level, within noise


def contended(truth: Truth):
    """A node whose loading peaks at 4 workers in all, each worker past them costing 5 %."""
    def rate(n, d):
        total = sum(truth.applied.values())
        return PER_WORKER * 4 / 3 * d / total * (1 - 0.05 * max(0, total - 4))
    return rate


def test_a_kept_shed_or_probe_is_followed_at_once_by_the_next_trial():
    """The step that keeps a shed (or a capacity probe) sends the next trial: its window
    measured where the node stands, as a kept move's does; no steady window between."""
    for target, rate, kind in (
            ({"a": 1, "b": 1, "c": 1}, None, "shed"),  # contention: fewer workers gain
            ({"a": 6, "b": 5, "c": 5}, lambda n, d: PER_WORKER * d, "probe")):  # each adds
        loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.5))
        loop.target = target
        truth = Truth(loop, rate or (lambda n, d: 0.0), ["a", "b", "c"])
        if rate is None:
            truth.rate = contended(truth)
        steps = []  # (kept events so far, counts sent) at every step
        step = loop.step

        def recorded(now, current, remaining=None, step=step, steps=steps, loop=loop):
            out = step(now, current, remaining)
            steps.append((sum(e[1] == "loop_kept" for e in loop.events), out))
            return out

        loop.step = recorded
        truth.run(60)
        kept_at = [i for i in range(1, len(steps)) if steps[i][0] > steps[i - 1][0]]
        assert len(kept_at) >= 2, kind
        assert all(steps[i][1] for i in kept_at[:2]), kind  # the next trial, sent at once


def test_a_shed_the_node_measures_worse_goes_back_and_is_not_tried_again():
    """Every worker adds (the model is wrong to plan fewer): the shed is measured, moved
    back, and the node stays at the even split."""
    loop = ClosedLoop(16, LoopSettings(window_s=2.0, dwell_s=0.0, grow_to=1.0))
    loop.target = {"a": 2, "b": 2, "c": 2}
    truth = Truth(loop, lambda n, d: PER_WORKER * d, ["a", "b", "c"])
    truth.run(120)
    assert truth.sent == {"a": 6, "b": 5, "c": 5}
    reverted = [e[2] for e in loop.events if e[1] == "loop_reverted"]
    assert {r["from"] for r in reverted} == {"a", "b", "c"}
    assert all(r["to"] is None for r in reverted)
    assert not [e for e in loop.events if e[1] == "loop_kept"]


# -- the scheduler, closed, on a truth the model gets wrong ---------------------------------

FEATURES = {"batch_size": B, "gpus": 1, "flops_g": 0.04, "params_m": 0.27}  # smResnet20-like


def test_the_scheduler_under_ftf_keeps_the_node_at_its_even_split_when_the_model_is_wrong(
        paper_model):
    """ftf plans one job most of the node (the model says a small model trains fast); the
    truth caps each job at 5 workers' worth. Closed, the daemon starts even, tries the plan
    move by move, measures each as worse and moves it back: the node ends at the even split
    and never spends more than a trial below it."""
    now = [1000.0]
    sched = Scheduler(capacity=16, gpus=3, policy="ftf", model=paper_model,
                      tokens=TokenDigest(b"k" * 32), arrival_window_s=1.0,
                      completion_window_s=1.0, heartbeat_s=0.5, lost_timeout_s=5.0,
                      max_jobs_per_gpu=1, clock=lambda: now[0], closed_loop=True)
    names = ["j-000001", "j-000002", "j-000003"]
    for i, name in enumerate(names):
        sched.add(LiveJob(name, sched.tokens.digest(f"t-{name}"), B, 1, FEATURES["flops_g"],
                          FEATURES["params_m"], 400 * (i + 1), submitted=now[0]))
    now[0] += 1.0
    out = sched.tick()
    assert sorted(j.id for j in out.launch) == names
    applied, done, seq = {}, dict.fromkeys(names, 0.0), {}
    for name in names:
        got = sched.message(name.encode(), Register(
            job=name, token=f"t-{name}", pid=1, features=JobFeatures(model="smResnet20",
                                                                    iterations=400,
                                                                    **FEATURES)))
        alloc = [m for k, m in got.send + got.reply if isinstance(m, Allocation)][0]
        applied[name], seq[name] = alloc.workers, alloc.seq
    assert sorted(applied.values()) == [5, 5, 6]  # the even split, whatever ftf planned

    pending: list[tuple[float, str, int, int]] = []
    low = 0

    def rate(d: int) -> float:
        return PER_WORKER * min(d, 5)

    even = sum(rate(d) for d in applied.values())
    for _ in range(200):  # 100 s
        now[0] += 0.5
        for item in [p for p in pending if p[0] <= now[0]]:
            _, name, d, s = item
            applied[name], seq[name] = d, s
            pending.remove(item)
        node = sum(rate(d) for d in applied.values())
        low = low + 1 if node < 0.97 * even else 0
        assert low * 0.5 <= 2 * (1.0 + 2 * sched.loop.settings.window_s)
        outs = []
        for name in names:
            done[name] += rate(applied[name]) * 0.5 / B
            outs.append(sched.message(name.encode(), Heartbeat(
                job=name, token=f"t-{name}", iteration=int(done[name]), step_s=0.005,
                data_wait_s=max(B / rate(applied[name]) - 0.005, 0.0),
                samples_per_s=rate(applied[name]), workers=applied[name],
                applied_seq=seq[name])))
        outs.append(sched.tick())
        for o in outs:
            for name, msg in o.send:
                if isinstance(msg, Resize):
                    pending.append((now[0] + 1.0, name, msg.workers, msg.seq))
    assert sorted(applied.values()) == [5, 5, 6]
    assert sched.loop.even_rate is not None


def test_a_job_resumed_alone_gets_the_even_split_back(paper_model):
    """Paused, the node runs no job; resumed, it is a new set of one: the whole node."""
    now = [1000.0]
    sched = Scheduler(capacity=8, gpus=1, policy="ftf", model=paper_model,
                      tokens=TokenDigest(b"k" * 32), arrival_window_s=1.0,
                      completion_window_s=1.0, heartbeat_s=0.5, lost_timeout_s=5.0,
                      clock=lambda: now[0], closed_loop=True)
    name = "j-000001"
    sched.add(LiveJob(name, sched.tokens.digest("t"), B, 1, FEATURES["flops_g"],
                      FEATURES["params_m"], 1000, submitted=now[0]))
    now[0] += 1.0
    sched.tick()
    sched.message(b"c", Register(job=name, token="t", pid=1, features=JobFeatures(
        model="smResnet20", iterations=1000, **FEATURES)))
    assert sched.jobs[name].workers == 8
    sched.pause(name)
    sched.message(b"c", Paused(job=name, token="t", seq=sched.jobs[name].seq))
    now[0] += 0.1
    sched.tick()
    assert sched.jobs[name].workers == 0
    sched.resume(name)
    assert sched.jobs[name].workers == 1  # it runs again at once, with one worker ...
    now[0] += 0.1
    out = sched.tick()
    assert sched.jobs[name].workers == 8  # ... and the next decision gives it the node
    assert [m.workers for k, m in out.send if isinstance(m, Resize)] == [8]


def test_a_window_is_long_enough_for_the_slowest_job_to_train_its_batches():
    """Heartbeats count whole batches: a job training 2 batches a second needs 10 s for 20."""
    loop = ClosedLoop(16, LoopSettings(window_s=4.0, batches=20, longest_s=30.0))
    loop.reset(0.0, {"fast": B, "slow": B})
    assert loop.window() == 4.0  # nothing measured yet
    for k in range(1, 21):
        t = 0.5 * k
        loop.beat(t, "fast", 50 * k, True)
        loop.beat(t, "slow", k, True)  # 2 batches a second
    assert loop.window() == pytest.approx(10.0)
    loop2 = ClosedLoop(16, LoopSettings(window_s=4.0, batches=20, longest_s=6.0))
    loop2.reset(0.0, {"slow": B})
    for k in range(1, 21):
        loop2.beat(0.5 * k, "slow", k // 4, True)  # half a batch a second: capped
    assert loop2.window() == 6.0


def test_the_even_split_keeps_a_jobs_cap_and_gives_the_rest_to_the_others():
    loop = ClosedLoop(16)
    assert loop.even(["a", "b", "c"]) == {"a": 6, "b": 5, "c": 5}
    assert loop.even(["a", "b", "c"], {"a": 2, "b": None}) == {"a": 2, "b": 7, "c": 7}
    assert loop.even(["a", "b"], {"a": 3, "b": 4}) == {"a": 3, "b": 4}  # workers left idle
    assert loop.reset(0.0, {"a": B, "b": B}, {"a": 1}) == {"a": 1, "b": 15}
