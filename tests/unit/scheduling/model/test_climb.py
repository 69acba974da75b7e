"""The competent per-job tuner (``adloader.scheduling.tuners.climb``), driven by a job whose rate
is a function of its workers."""

from __future__ import annotations

from adloader.scheduling.tuners.climb import ClimbingTuner

B = 32


def drive(tuner: ClimbingTuner, rate, batches: int) -> list[int]:
    """Feed ``batches`` batches of a job that trains ``rate(d)`` samples/s with d workers
    (its loader binds below the peak: it waits; past it, it does not)."""
    counts = []
    for _ in range(batches):
        d = tuner.workers
        iteration = B / rate(d)
        step = min(iteration, 0.01)
        tuner.observe(B, iteration - step, step)
        counts.append(tuner.workers)
    return counts


def peaked(peak: int):
    return lambda d: 100.0 * min(d, peak) - 20.0 * max(d - peak, 0)


def test_it_climbs_to_the_best_count_and_holds_it():
    tuner = ClimbingTuner(start=2, budget=16)
    counts = drive(tuner, peaked(5), 600)
    assert tuner.best == 5
    assert counts[-1] in (4, 5, 6)  # held at 5, or looking again one either side
    assert max(counts) <= 6  # one past the peak at most, and back
    held = counts[300:]
    assert held.count(5) >= 0.7 * len(held)


def test_it_starts_within_its_budget_and_never_leaves_it():
    tuner = ClimbingTuner(start=40, budget=8)
    assert tuner.workers == 8
    counts = drive(tuner, lambda d: 100.0 * d, 400)
    assert max(counts) <= 8 and min(counts) >= 1
    assert ClimbingTuner(start=0, budget=8).workers == 1


def test_it_goes_down_when_fewer_workers_do_better():
    tuner = ClimbingTuner(start=8, budget=16)
    drive(tuner, peaked(3), 1200)
    assert tuner.best == 3


def test_it_looks_again_and_follows_a_node_that_changed():
    """Held at 5, the node changes (another job started: past 3, workers only contend); the
    tuner's next look finds it and walks down."""
    tuner = ClimbingTuner(start=2, budget=16, repeat=5)
    drive(tuner, peaked(5), 500)
    assert tuner.best == 5
    drive(tuner, peaked(3), 1500)
    assert tuner.best == 3


def test_the_batches_of_a_cold_start_are_not_read():
    tuner = ClimbingTuner(start=2, budget=16, window=10, settle=5)
    drive(tuner, peaked(8), 14)  # 5 of the start's cold batches, then 9 of the window
    assert tuner.history == [] and tuner.workers == 2
    drive(tuner, peaked(8), 1)
    assert len(tuner.history) == 1 and tuner.workers == 3  # waited: one more
    drive(tuner, peaked(8), 14)
    assert len(tuner.history) == 1  # the new count's cold batches, then its window
    drive(tuner, peaked(8), 1)
    assert len(tuner.history) == 2 and tuner.workers == 3  # gained: a second window to be sure
    drive(tuner, peaked(8), 10)
    assert len(tuner.history) == 3 and tuner.workers == 4  # no cold start between the two


def test_a_gain_in_one_window_alone_is_not_kept():
    """A step whose first window reads 10 % better by chance and its second no better goes
    back to the best count; one that gains in both windows stays."""
    windows_at_3 = []

    def lucky(d):  # 3 workers load as 2 do, but the first window at 3 reads 10 % more
        if d != 3:
            return 200.0
        return 220.0 if len(windows_at_3) == 0 else 200.0

    tuner = ClimbingTuner(start=2, budget=3, window=10, settle=0)
    for _ in range(60):
        before = len(tuner.history)
        drive(tuner, lucky, 1)
        if len(tuner.history) > before and tuner.history[-1][0] == 3:
            windows_at_3.append(tuner.history[-1])
    assert [w for w, _, _ in tuner.history[:4]] == [2, 3, 3, 2]
    assert tuner.best == 2

    steady = ClimbingTuner(start=2, budget=3, window=10, settle=0)
    drive(steady, lambda d: 200.0 if d == 2 else 220.0, 40)
    assert steady.best == 3


def test_a_clearly_worse_step_is_judged_at_half_a_window_a_close_one_at_a_whole():
    """A step that halves the rate goes back after settle + window/2 batches; one within
    ``abort_loss`` of the best is read over the whole window before it is judged."""
    def batches_at(counts, d):
        return sum(1 for c in counts if c == d)

    steep = ClimbingTuner(start=2, budget=2, window=20, settle=5)  # only a step down to try
    counts = drive(steep, lambda d: 100.0 * d, 80)  # 1 worker: half the rate
    assert counts[:24] == [2] * 24  # its cold start and a window at the start count
    assert batches_at(counts, 1) == 5 + 10  # its cold start, then half a window

    close = ClimbingTuner(start=2, budget=2, window=20, settle=5)
    counts = drive(close, lambda d: 100.0 if d == 2 else 95.0, 80)  # 5 % worse: not clearly
    assert batches_at(counts, 1) == 5 + 20
    assert steep.best == close.best == 2


def test_on_a_plateau_one_step_is_tried_not_both_ways():
    """A step that reads as the best count did (within ``min_gain``) is a plateau: the tuner
    goes back and holds, without trying the other way (a step down from 2 to 1 would halve
    the rate for its window); a step that reads clearly worse is past a peak, and the other
    way is tried."""
    def plateau(d):
        return 100.0 if d == 1 else 190.0

    tuner = ClimbingTuner(start=2, budget=6, window=10, settle=0)
    counts = drive(tuner, plateau, 10 * 9)  # under the 10 windows before it looks again
    assert 1 not in counts and set(counts) == {2, 3}
    assert tuner.best == 2

    tuner = ClimbingTuner(start=2, budget=6, window=10, settle=0)
    counts = drive(tuner, lambda d: {1: 200.0, 2: 190.0}.get(d, 150.0), 10 * 9)  # past a peak
    assert 1 in counts and tuner.best == 1
