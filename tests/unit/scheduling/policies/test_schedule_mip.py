"""``schedule_mip.least_total_completion``: the floor over a whole trace, arrivals included —
checked by hand, against the exact LP where jobs arrive together, and under every simulated
run of a trace whose jobs arrive apart."""

from __future__ import annotations

import pytest

from adloader.errors import InputError
from adloader.scheduling.bounds.schedule_lp import least_mean_jct
from adloader.scheduling.bounds.schedule_mip import least_total_completion

FAST = 1e-6  # GPU seconds a sample: the GPUs never bind


def test_a_job_arriving_while_another_runs_is_floored_by_hand():
    # the node loads 100 samples/s; A (1,000 samples) at 0, B (500) at 5. At 5 both have
    # 500 left: whichever goes first ends at 10, the other at 15 — mean JCT 10 either way
    # (sharing is worse). Each arrival group alone would say 10 and 5: mean 7.5.
    out = least_total_completion([1000, 500], [0, 5], 100.0, [FAST] * 2, [1, 1], 4,
                                 slot_s=1.0)
    assert out["optimal"]
    assert 9.9 <= out["mean_jct"] <= 10 + 1e-6
    groups = (least_mean_jct([1000], 100.0, [FAST], gpus=[1], node_gpus=4)["mean_jct"]
              + least_mean_jct([500], 100.0, [FAST], gpus=[1], node_gpus=4)["mean_jct"]) / 2
    assert groups == pytest.approx(7.5)


def test_jobs_arriving_together_floor_at_the_exact_lp_less_at_most_a_slot():
    # 4 jobs of 1 sample on a node loading 2 a second: one after another, mean 1.25
    exact = least_mean_jct([1, 1, 1, 1], 2.0, [FAST] * 4, gpus=[1] * 4, node_gpus=4)
    out = least_total_completion([1, 1, 1, 1], [0] * 4, 2.0, [FAST] * 4, [1] * 4, 4,
                                 slot_s=0.25)
    assert exact["mean_jct"] == pytest.approx(1.25)
    assert exact["mean_jct"] - 0.25 <= out["mean_jct"] <= exact["mean_jct"] + 1e-6
    # GPUs that bind: a sample takes 1 s of its job's GPU, the node has 2 GPUs of 4 jobs'
    capped = least_total_completion([1, 1, 1, 1], [0] * 4, 2.0, [1.0] * 4, [1] * 4, 2,
                                    slot_s=0.25)
    assert capped["mean_jct"] == pytest.approx(1.5, abs=0.25)


def test_a_horizon_too_short_still_gives_a_floor():
    # nothing finishes within 5 s of slots: each job counts the horizon, under its real 10 / 15
    out = least_total_completion([1000, 500], [0, 5], 100.0, [FAST] * 2, [1, 1], 4,
                                 slot_s=1.0, horizon_s=5.0)
    assert out["mean_jct"] <= 10 + 1e-6


def test_bad_input_is_named():
    with pytest.raises(InputError, match="every job"):
        least_total_completion([1, 2], [0], 1.0, [FAST], [1], 1)
    with pytest.raises(InputError, match="> 0"):
        least_total_completion([1], [0], 0.0, [FAST], [1], 1)


@pytest.mark.slow  # a whole-trace program, every setting simulated
def test_the_whole_trace_floor_is_under_every_simulated_run_and_above_the_groups(
        paper_profile, paper_model):
    """A bound that could fail: on three of the dynamic trace's jobs (the third arriving while
    the first two run), every fixed setting, the autotuner and both policies end no sooner on
    average than the floor, on either truth; and it is tighter than the groups' floor."""
    from adloader.sim import no_daemon
    from adloader.sim.simulator import SimConfig
    from adloader.sim.trace import load_trace

    traced = load_trace("paper-dynamic", paper_profile.gpus)
    first, second, third = (j.model_copy(update={"iterations": j.iterations // 4})
                            for j in traced.jobs[:3])
    trace = traced.model_copy(update={"jobs": (
        first, second, third.model_copy(update={"arrival_s": 30.0}))})
    for truth in ("model", "published"):
        config = SimConfig(truth=truth, capacity=paper_profile.cores)
        floor = no_daemon.floor(trace, paper_profile, paper_model, config, slot_s=1.0)
        assert floor["method"] == "whole trace, 1 s slots"
        assert floor["mean_jct"] > floor["groups_mean_jct"] + 1.0, truth
        rows = no_daemon.compare(trace, paper_profile, paper_model, config)
        # the two tuners, 2 policies, each job's best count in hindsight, 2 queues
        assert len(rows) == len(no_daemon.SETTINGS) + 2 + 2 + 1 + len(no_daemon.QUEUES)
        for r in rows:
            assert r["mean_jct_s"] >= floor["mean_jct"] - 1e-6, (truth, r["setting"])


@pytest.mark.slow  # whole-trace programs over seven jobs (~20 s)
def test_a_group_too_big_for_one_linear_program_is_floored_whole(paper_profile, paper_model):
    """Seven jobs arriving together are more than one LP takes (``GROUP``): the groups' floor
    cuts them in parts, each with the node to itself; with a slot the whole-trace program
    floors them together — higher, and still under every simulated run."""
    from adloader.sim import no_daemon
    from adloader.sim.schedule_oracle import GROUP
    from adloader.sim.simulator import SimConfig
    from adloader.sim.trace import load_trace

    traced = load_trace("paper-dynamic", paper_profile.gpus)
    jobs = tuple(j.model_copy(update={"iterations": max(j.iterations // 30, 1),
                                      "arrival_s": 0.0}) for j in traced.jobs[:GROUP + 1])
    trace = traced.model_copy(update={"jobs": jobs})
    config = SimConfig(truth="published", capacity=paper_profile.cores)
    floor = no_daemon.floor(trace, paper_profile, paper_model, config, slot_s=1.0)
    assert floor["method"] == "whole trace, 1 s slots"
    assert floor["mean_jct"] > 1.1 * floor["groups_mean_jct"]
    for r in no_daemon.compare(trace, paper_profile, paper_model, config):
        assert r["mean_jct_s"] >= floor["mean_jct"] - 1e-6, r["setting"]


def test_deadlines_floor_the_schedules_that_meet_them_by_hand():
    # the node loads 100 samples/s; A (1,000 samples) and B (100) at 0. Free: B first, at 1,
    # then A at 11: mean 6. A due by 10.5: B cannot go first (A would end at 11), and
    # whatever B loads before A ends delays A: A at 10, B at 11 — mean 10.5.
    free = least_total_completion([1000, 100], [0, 0], 100.0, [FAST] * 2, [1, 1], 4,
                                  slot_s=0.5)
    due = least_total_completion([1000, 100], [0, 0], 100.0, [FAST] * 2, [1, 1], 4,
                                 slot_s=0.5, deadlines=[10.5, float("inf")])
    assert free["feasible"] and due["feasible"] and due["optimal"]
    assert 5.75 <= free["mean_jct"] <= 6 + 1e-6
    assert 10.25 <= due["mean_jct"] <= 10.5 + 1e-6
    # a deadline no schedule meets: A alone needs 10 s
    unmet = least_total_completion([1000, 100], [0, 0], 100.0, [FAST] * 2, [1, 1], 4,
                                   slot_s=0.5, deadlines=[9.0, float("inf")])
    assert not unmet["feasible"] and unmet["mean_jct"] == float("inf")
    # both due by 10.4 (by 10.5, the slot it ends in): together 11 s of loading: no
    # schedule, found by the solver
    both = least_total_completion([1000, 100], [0, 0], 100.0, [FAST] * 2, [1, 1], 4,
                                  slot_s=0.5, deadlines=[10.4, 10.4])
    assert not both["feasible"]
    with pytest.raises(InputError, match="deadline"):
        least_total_completion([1000], [5], 100.0, [FAST], [1], 4, deadlines=[5.0])


@pytest.mark.slow  # two floors and the even split over a trace
def test_the_fair_floor_is_between_the_floor_and_the_even_split(paper_profile, paper_model):
    """Three of the dynamic trace's jobs: the floor of schedules that keep every job within
    1/0.95 of its even-split JCT is no lower than the floor of all schedules, and no higher
    than the even split's own mean JCT (which keeps them)."""
    from adloader.sim import no_daemon
    from adloader.sim.simulator import SimConfig
    from adloader.sim.trace import load_trace

    traced = load_trace("paper-dynamic", paper_profile.gpus)
    trace = traced.model_copy(update={"jobs": tuple(
        j.model_copy(update={"iterations": j.iterations // 4, "arrival_s": 0.0})
        for j in traced.jobs[:3])})
    config = SimConfig(truth="published", capacity=paper_profile.cores)
    rows = no_daemon.compare(trace, paper_profile, paper_model, config, ("ftf",))
    even = next(r for r in rows if r["setting"] == "no daemon: even")
    free = no_daemon.floor(trace, paper_profile, paper_model, config)
    fair = no_daemon.fair_floor(trace, paper_profile, paper_model, config, rows, 1.0)
    assert fair["feasible"]
    assert free["mean_jct"] - 1.0 <= fair["mean_jct"] <= even["mean_jct_s"] + 1e-6
    tight = no_daemon.fair_floor(trace, paper_profile, paper_model, config, rows, 1.0,
                                 slack=0.5)  # every job in half its even-split time
    assert not tight["feasible"]


def test_an_intake_ceiling_holds_each_job_to_it_by_hand():
    # the node loads 100 samples/s, but A takes in at most 50: A alone (1,000 samples) ends
    # at 20, not 10; B (500 at 5) loads beside it with the other 50 and ends at 15.
    free = least_total_completion([1000, 500], [0, 5], 100.0, [FAST] * 2, [1, 1], 4,
                                  slot_s=1.0)
    capped = least_total_completion([1000, 500], [0, 5], 100.0, [FAST] * 2, [1, 1], 4,
                                    slot_s=1.0, intake=[50.0, 0.0])
    assert capped["optimal"]
    assert capped["mean_jct"] == pytest.approx((20 + 10) / 2, abs=0.6)
    assert capped["mean_jct"] > free["mean_jct"] + 4
    with pytest.raises(InputError, match="intake ceiling"):
        least_total_completion([1, 2], [0, 0], 1.0, [FAST] * 2, [1, 1], 1, intake=[-1.0, 0.0])
