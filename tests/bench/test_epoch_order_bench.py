"""Quick-mode smoke of ``bench epoch-order``: SOLAR's epoch order against the sequential one."""

from __future__ import annotations

import pytest

from adloader.bench.data.epoch_order_bench import run_epoch_order_bench
from adloader.errors import InputError


def test_epoch_order_bench_quick():
    out = run_epoch_order_bench(quick=True)
    rows, plans = out["rows"], out["orders"]
    by = {(r["fraction"], r["order"], r["policy"]): r for r in rows}
    fractions = out["config"]["fractions"]
    assert len(rows) == len(fractions) * 3 * 4 and len(plans) == len(fractions) * 3
    for r in rows:
        assert r["hits"] + r["misses"] == r["accesses"]
    for f in fractions:
        seq = by[f, "sequential", "lru"]
        # planned on the exact LRU reuse (sequential is a candidate): never more reads
        assert by[f, "solar-lru", "lru"]["misses"] <= seq["misses"]
        assert by[f, "solar-lru", "lru"]["reads_saved"] >= 1.0
        # the paper's eq. 1 is a proxy (it counts samples LRU evicts before use): near, not ≤
        assert by[f, "solar", "lru"]["misses"] <= seq["misses"] * 1.005
        for order in ("sequential", "solar", "solar-lru"):
            best = by[f, order, "belady"]
            for policy in ("lru", "lobster", "nopfs"):
                assert best["hits"] >= by[f, order, policy]["hits"]
    for p in plans:
        assert sorted(p["epochs"]) == list(range(out["config"]["epochs"]))
        assert p["sequential_reuse"] <= p["reuse"] <= p["bound"]
        if p["order"] == "sequential":
            assert p["epochs"] == list(range(out["config"]["epochs"]))
    with pytest.raises(InputError):
        run_epoch_order_bench(quick=True, orders=("random",))
    with pytest.raises(InputError):
        run_epoch_order_bench(quick=True, fractions=(0.0,))
