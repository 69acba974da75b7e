"""The competent per-job tuner (``adloader.scheduling.tuners.climb``), driven by a job whose rate
is a function of its workers."""

from __future__ import annotations

from adloader.scheduling.tuners.climb import ClimbingTuner

B = 32


def drive(tuner: ClimbingTuner, rate, batches: int, waits: bool = True) -> list[int]:
    """Feed ``batches`` batches of a job that trains ``rate(d)`` samples/s with d workers
    (its loader binds below the peak: it waits; past it, it does not; ``waits`` False: its
    loader always keeps up, it never waits)."""
    counts = []
    for _ in range(batches):
        d = tuner.workers
        iteration = B / rate(d)
        step = min(iteration, 0.01) if waits else iteration
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


def test_a_clearly_worse_step_is_judged_early_a_close_one_at_a_whole_window():
    """A step that halves the rate (over 2 × ``abort_loss`` worse) goes back after settle +
    window/4 batches; one 20 % worse (over ``abort_loss``) after settle + window/2; one within
    ``abort_loss`` of the best is read over the whole window before it is judged."""
    def batches_at(counts, d):
        return sum(1 for c in counts if c == d)

    steep = ClimbingTuner(start=2, budget=2, window=20, settle=5)  # only a step down to try
    counts = drive(steep, lambda d: 100.0 * d, 80)  # 1 worker: half the rate
    assert counts[:24] == [2] * 24  # its cold start and a window at the start count
    assert batches_at(counts, 1) == 5 + 5  # its cold start, then a quarter of a window

    worse = ClimbingTuner(start=2, budget=2, window=20, settle=5)
    counts = drive(worse, lambda d: 100.0 if d == 2 else 80.0, 80)  # 20 % worse
    assert batches_at(counts, 1) == 5 + 10

    close = ClimbingTuner(start=2, budget=2, window=20, settle=5)
    counts = drive(close, lambda d: 100.0 if d == 2 else 95.0, 80)  # 5 % worse: not clearly
    assert batches_at(counts, 1) == 5 + 20
    assert steep.best == worse.best == close.best == 2


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


def looks(counts: list[int], best: int) -> list[int]:
    """The batches at which the tuner left its best count."""
    return [i for i in range(1, len(counts)) if counts[i - 1] == best != counts[i]]


def test_a_step_that_read_clearly_worse_is_not_paid_for_again_while_the_other_reads_level():
    """A job that never waits is stepped down first; one worker halves its rate and one more
    reads level. At every later look the tuner tries the level way first, reads the plateau
    and holds: one worker is never tried again."""
    tuner = ClimbingTuner(start=2, budget=6, window=10, settle=0, repeat=5)
    counts = drive(tuner, lambda d: 100.0 if d == 1 else 200.0, 2000, waits=False)
    first_look = counts[:40]
    assert 1 in first_look and 3 in first_look
    assert 1 not in counts[40:] and counts[40:].count(3) > 0  # it still looks, upward
    assert tuner.best == 2


def test_a_look_that_keeps_the_best_count_doubles_the_hold_before_the_next():
    tuner = ClimbingTuner(start=2, budget=6, window=10, settle=0, repeat=5, backoff=8)
    counts = drive(tuner, lambda d: 100.0 if d == 1 else 200.0, 6000, waits=False)
    starts = looks(counts, 2)
    gaps = [b - a for a, b in zip(starts[1:], starts[2:], strict=False)]  # from the second look on
    assert len(gaps) >= 4
    assert gaps[1] > 1.8 * gaps[0] and gaps[2] > 1.8 * gaps[1]  # 5, 10, 20, … windows held
    assert max(gaps) < (5 * 8 + 3) * 10  # never past repeat × backoff (and the look's own)


def test_a_node_that_changed_under_a_long_hold_is_looked_at_at_once():
    """Held long (its hold grown to repeat × backoff windows), the job's rate at its count
    drops by a third (another job started): the tuner looks again within a few windows, not
    after the hold, and walks down to the new peak."""
    tuner = ClimbingTuner(start=2, budget=16, window=10, settle=0, repeat=5, backoff=8)
    drive(tuner, peaked(5), 8000)
    assert tuner.best == 5 and tuner._hold == 5 * 8
    counts = drive(tuner, peaked(3), 10 * 6)  # two windows read off, then a step
    assert set(counts) != {5}
    drive(tuner, peaked(3), 600)
    assert tuner.best == 3


def test_a_node_that_changes_as_a_hold_begins_is_still_looked_at():
    """The node frees cores just as a look ends: the job's rate at its count climbs over
    the hold's first windows (17 %, then 27 % over the rate the look measured). The hold's
    reading starts from the look's, so the change is seen and looked at within a few
    windows, not after the hold."""
    level = {"gain": 1.0}
    tuner = ClimbingTuner(start=2, budget=6, window=10, settle=0, repeat=20)

    def rate(d):
        return level["gain"] * (100.0 if d == 1 else 200.0)

    for _ in range(200):  # the first look: down, then up; it has just ended
        drive(tuner, rate, 1, waits=False)
        if len(tuner._tried) == 2 and tuner._direction == 0:
            break
    assert tuner.workers == 2 and not tuner._held
    level["gain"] = 1.17
    drive(tuner, rate, 10, waits=False)
    level["gain"] = 1.27
    counts = drive(tuner, rate, 40, waits=False)
    assert set(counts) != {2}  # looked again within 4 windows of a 20-window hold
