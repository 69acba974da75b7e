"""The declared space of mixes (bench/sim/declared.py): each member runs against no daemon
with its floor, and the verdict follows the figures."""

from __future__ import annotations

import json

import pytest

from adloader.bench.sim import declared


def test_the_space_is_declared_with_the_node_sizes_and_shapes_users_have(paper_profile):
    names = [m.name for m in declared.MEMBERS]
    assert names == ["paper-static", "paper-dynamic", "fast-gpus", "big-node",
                     "big-node-arrivals", "gpu-bound-mix", "lengths-apart"]
    mixed, _, _ = declared.member_case("gpu-bound-mix", paper_profile, declared.SimConfig())
    assert [j.iterations for j in mixed.jobs] == [300, 500, 1000, 1500]  # lengths 1:2:3
    apart, _, _ = declared.member_case("lengths-apart", paper_profile, declared.SimConfig())
    lengths = [j.iterations for j in apart.jobs]
    assert max(lengths) / min(lengths) >= 20 and len({j.arrival_s for j in apart.jobs}) == 6
    big = declared.big_profile(paper_profile)
    assert (big.cores, big.gpus) == (64, 8)
    trace = declared.big_trace()
    assert len(trace.jobs) == 8 and {j.workers for j in trace.jobs} == {16}
    assert {j.arrival_s for j in trace.jobs} == {0.0}
    assert [j.arrival_s for j in declared.big_trace(60.0).jobs][:3] == [0.0, 60.0, 120.0]
    _, _, fast = declared.member_case("fast-gpus", paper_profile, declared.SimConfig())
    assert dict(fast.slow) == {n: declared.FAST_GPU_STEPS
                               for n in ("Resnet18", "mdResnet12", "smResnet20")}
    with pytest.raises(KeyError):
        declared.member_case("nope", paper_profile, declared.SimConfig())


@pytest.mark.parametrize("row, floor, verdict", [
    (dict(makespan_x_best_fixed=1.0, mean_jct_x_best_fixed=0.8), 0.7, "gain"),
    (dict(makespan_x_best_fixed=1.05, mean_jct_x_best_fixed=1.03), 0.7, "cost"),
    (dict(makespan_x_best_fixed=1.05, mean_jct_x_best_fixed=0.99), 0.7, "tie"),
    (dict(makespan_x_best_fixed=1.0, mean_jct_x_best_fixed=1.0), 0.9,
     "tie (no schedule gains 1.2×)"),
])
def test_the_verdict_follows_the_figures(row, floor, verdict):
    assert declared.verdict(row, floor) == verdict


@pytest.mark.slow  # `bench declared` over two mixes
def test_the_bench_prints_a_row_per_member_and_the_floor_holds(run, tmp_path):
    path = tmp_path / "declared.json"
    code, out, _ = run("bench", "declared", "--mixes", "paper-static,fast-gpus", "--truth",
                       "published", "--json", str(path))
    assert code == 0, out
    rows = json.loads(path.read_text())["rows"]
    assert [r["mix"] for r in rows] == ["paper-static", "fast-gpus"]
    for r in rows:  # the floor is under the best fixed setting and the policy alike
        assert r["floor_jct_x_best_fixed"] <= 1.0 + 1e-9
        assert r["mean_jct_x_best_fixed"] >= r["floor_jct_x_best_fixed"] - 1e-9
        # every no-daemon row counts: the best of them is no worse than the best fixed
        assert r["mean_jct_x_best_nodaemon"] >= r["mean_jct_x_best_fixed"] - 1e-9
        assert r["makespan_x_best_nodaemon"] >= r["makespan_x_best_fixed"] - 1e-9
        assert r["floor_x_best_nodaemon"] <= min(r["mean_jct_x_best_nodaemon"],
                                                 r["makespan_x_best_nodaemon"]) + 1e-9
    assert "the declared space" in out and "verdict" in out
    code, _, err = run("bench", "declared", "--mixes", "paper-static,bogus")
    assert code == 2 and "no declared mix bogus" in err


@pytest.mark.parametrize("fair, verdict", [
    (None, "tie"), (0.82, "tie"), (0.85, "tie (no schedule within 1/0.95 of even gains 1.2×)")])
def test_the_fair_floor_closes_a_tie_the_floor_leaves_open(fair, verdict):
    row = dict(makespan_x_best_fixed=1.0, mean_jct_x_best_fixed=0.84)
    assert declared.verdict(row, 0.8, fair) == verdict
    assert declared.verdict(row, 0.9, fair) == "tie (no schedule gains 1.2×)"


def test_the_verdict_judges_against_the_best_no_daemon_row_where_asked():
    row = dict(makespan_x_best_fixed=1.0, mean_jct_x_best_fixed=0.8,
               makespan_x_best_nodaemon=1.0, mean_jct_x_best_nodaemon=0.97)
    assert declared.verdict(row, 0.7) == "gain"
    assert declared.verdict(row, 0.7, against="best_nodaemon") == "tie"
