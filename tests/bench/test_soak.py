"""`adloader bench soak --quick`: a real daemon through 600 jobs keeps at most its retention
count, prunes the rest and pages every job it keeps exactly once. (RSS and latency are
reported, not asserted: this machine's load moves them; the full run's figures are in
docs/benchmarks.md.)"""

from __future__ import annotations

import pytest

from adloader.bench.ops.soak import QUICK_JOBS, QUICK_RETAIN, run_soak_bench
from adloader.errors import InputError


def test_quick_soak_keeps_the_store_bounded_and_pages_exactly_once(tmp_path):
    row = run_soak_bench(quick=True, workdir=str(tmp_path))
    checks = row["checks"]
    assert checks["store_bounded"] and checks["pruning_happened"], row["kept"]
    assert checks["pages_exactly_once"] and checks["no_read_failed"], row["read_failures"]
    assert row["jobs"] == QUICK_JOBS and row["retain_jobs"] == QUICK_RETAIN
    assert row["pruned_jobs"] >= QUICK_JOBS - QUICK_RETAIN
    assert all(v["requests"] > 0 for v in row["latency"].values())


def test_too_few_jobs_for_the_baseline_is_refused():
    with pytest.raises(InputError, match="--jobs 50"):
        run_soak_bench(jobs=50)
