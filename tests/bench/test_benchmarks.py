"""Quick-mode smoke of the benchmarks: each runs for real, small, and meets its targets.

(The only tests that import ``adloader.bench``: they test the benchmarks themselves.)"""

from __future__ import annotations

import numpy as np  # noqa: F401
import pytest

from adloader.bench.data.cache import run_cache_bench
from adloader.bench.data.locality_bench import run_gloo_locality_bench, run_locality_bench
from adloader.datapath.eviction import lru_expected
from adloader.errors import InputError


def test_bench_quick_meets_the_targets():
    rows = run_locality_bench(quick=True)
    by = {(r["p"], r["mode"]): r for r in rows}
    for p in (4, 16, 64):
        loc, reg, solar = by[p, "locality"], by[p, "regular"], by[p, "solar"]
        assert loc["remote_share_mean"] <= 0.05 and loc["meets_target"]
        assert 0 < loc["transfers_max"] <= p - 1
        assert reg["remote_share_mean"] == pytest.approx((p - 1) / p, abs=0.01)
        assert solar["remote_share_mean"] == 0 and solar["largest_local_batch"] > 128
        bounded = by[p, "bounded"]  # issue 14: ≤ 1 % fetched, no local batch over 1.1 × b
        assert bounded["meets_target"] and bounded["remote_share_mean"] <= 0.01
        assert bounded["largest_local_batch"] == 140 and bounded["largest_ratio"] <= 1.1
        assert bounded["transfers_max"] <= p - 1


def test_bench_partial_caches_agree_with_the_planner():
    # the bench re-plans a few steps with the real planners and raises on any disagreement
    rows = run_locality_bench(ps=(4, 16, 32), dataset_size=20_000, cache_fraction=0.04,
                              read_cost=1.5, message_cost=8.0)
    loc = {r["p"]: r for r in rows if r["mode"] == "locality"}
    assert loc[4]["coverage"] == pytest.approx(0.16, abs=0.01)
    assert loc[16]["coverage"] == pytest.approx(0.64, abs=0.01)
    assert loc[32]["coverage"] == 1.0  # capped at what a rank read: 1/32 each
    assert 0 < loc[32]["storage_share"] < loc[32]["remote_share_mean"]  # small moves: reads
    with pytest.raises(InputError, match="at least 2 epochs"):
        run_locality_bench(epochs=1)
    with pytest.raises(InputError, match="make no global batch"):
        run_locality_bench(ps=(64,), dataset_size=100)


def test_quick_bench_rows():
    rows = run_cache_bench(quick=True, fractions=(0.2,))
    by = {r["policy"]: r for r in rows}
    assert set(by) == {"belady", "lru", "lobster", "nopfs"}  # the four
    assert by["belady"]["ratio_to_belady"] == 1.0
    assert by["lru"]["hit_ratio_after_first"] < by["lobster"]["hit_ratio_after_first"]
    assert by["lobster"]["ratio_to_belady_after_first"] >= 0.97
    assert by["lru"]["expected"] == pytest.approx(lru_expected(0.2))
    assert all(r["seconds"] >= 0 and r["capacity"] == 4000 for r in rows)
    with pytest.raises(InputError):
        run_cache_bench(quick=True, fractions=(1.5,))


def test_storage_bench_quick():
    from adloader.bench.data.storage_bench import run_storage_bench

    r = run_storage_bench(quick=True)
    n = r["config"]["images"]
    assert r["uncached"]["storage_reads"] == [n] * 3
    assert r["cached"]["hit_ratio"][0] == 0.0 and min(r["cached"]["hit_ratio"][1:]) >= 0.6
    assert max(r["cached"]["storage_reads"][1:]) <= 0.4 * n
    assert r["memory"]["within_budget"] and r["memory"]["resident_bytes"] > 0
    assert r["later_epoch_speedup"] > 1.2  # typically ~4 (2 cores shared: a loose floor)


def test_resize_bench_quick_loses_nothing():
    from adloader.bench.live.resize import run_resize_bench

    result = run_resize_bench(quick=True)
    assert {r["handover"] for r in result["resize"]} == {"inplace", "drain", "restart", "serial"}
    for run in result["resize"]:
        assert run["in_order"] and run["lost"] == run["repeated"] == 0
        assert run["resizes"] >= 4 and run["batches"] == (run["resizes"] + 1) * 3
    assert {(o["dataset"], o["workers"]) for o in result["overhead"]} == {
        ("jpeg", 0), ("jpeg", 2), ("tiny", 0), ("tiny", 2)}
    assert all(o["ratio"] > 0 for o in result["overhead"])


def test_remote_share_on_real_ranks_local_batch_128():
    rows = run_gloo_locality_bench(world_size=4, local_batch=128, epochs=2, steps_per_epoch=4,
                                   modes=("regular", "locality"), timeout=60)
    regular, locality = rows
    print("\ngloo p=4 b=128:", [(r["mode"], round(r["remote_share"], 4), r["transfers_max"])
                                for r in rows])
    assert locality["remote_share"] <= 0.05
    assert locality["remote_share"] == pytest.approx(locality["planned_remote_share"])
    assert 0 < locality["transfers_max"] <= 3
    assert regular["remote_share"] == pytest.approx(0.75, abs=0.05)


def test_bounded_imbalance_on_real_ranks():
    rows = run_gloo_locality_bench(world_size=4, local_batch=128, epochs=2, steps_per_epoch=4,
                                   modes=("bounded",), timeout=60)
    (bounded,) = rows
    assert bounded["remote_share"] <= 0.01
    assert bounded["remote_share"] == pytest.approx(bounded["planned_remote_share"])
    assert 128 <= bounded["largest_local_batch"] <= 140 and bounded["largest_ratio"] <= 1.1
    assert bounded["transfers_max"] <= 3
