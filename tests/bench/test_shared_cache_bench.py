"""Quick-mode smoke of ``bench shared-cache`` (issue 14): three jobs, one node cache; shared and
arbitrated beats every private cache and never beats the multi-job MIN."""

from __future__ import annotations

import pytest

from adloader.bench.data.shared_cache_bench import run_shared_cache_bench, shared_cache_table
from adloader.errors import InputError


def test_shared_cache_bench_quick():
    out = run_shared_cache_bench(quick=True)
    rows, churn = out["rows"], out["come_and_go"]
    by = {(r["fraction"], r["policy"]): r for r in rows}
    fractions = out["config"]["fractions"]
    assert len(rows) == 7 * len(fractions) and len(churn) == len(fractions)
    for f in fractions:
        best = by[f, "shared-min"]
        private = max(by[f, f"private-{p}"]["hits"] for p in ("lru", "lobster", "nopfs"))
        arbitrated = by[f, "shared-arbitrated"]
        assert private <= arbitrated["hits"] <= best["hits"]
        assert arbitrated["x_min"] >= 0.95 and arbitrated["x_best_private"] >= 1.5  # the goal
        for r in (r for r in rows if r["fraction"] == f):
            assert r["hits"] <= best["hits"] and r["accesses"] == best["accesses"]
            assert sum(r["hits_by_job"].values()) == r["hits"]
        assert all(sum(s.values()) <= arbitrated["capacity"] for _, s in arbitrated["split"])
    for c in churn:
        assert c["replanned_hits"] >= c["kept_hits"] and c["replanned_hits"] <= c["min_hits"]
        assert c["split_after"].get("Y", 0) == 0  # C is gone: Y needs no room
    assert any(c["split_before"]["Y"] > 0 for c in churn)  # …and had some before
    title, columns, table = shared_cache_table(out)
    assert len(table) == len(rows) and len(columns) == len(table[0])
    with pytest.raises(InputError):
        run_shared_cache_bench(quick=True, fractions=(0.0,))
