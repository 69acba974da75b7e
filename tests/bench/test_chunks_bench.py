"""Quick-mode smoke of ``bench chunks``: SOLAR's aggregated chunk loading on a cold HDF5 file."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("h5py")

from adloader.bench.data.chunks import LOADERS, ORDERS, PATTERNS, run_chunks_bench  # noqa: E402
from adloader.errors import InputError  # noqa: E402


def test_chunks_bench_quick_reads_the_same_batches_either_way(tmp_path):
    path = str(tmp_path / "rows.h5")
    out = run_chunks_bench(quick=True, path=path)
    # per-sample and aggregated reads, torch's loader and ours: equal batches, in order
    assert out["identical"] == {kind: True for kind in ORDERS}
    assert [p["pattern"] for p in out["patterns"]] == list(PATTERNS)
    assert all(p["mb_s"] > 0 for p in out["patterns"])
    rows = {(r["order"], r["loader"]): r for r in out["loaders"]}
    assert set(rows) == {(o, n) for o in ORDERS for n in LOADERS}
    assert all(r["samples_per_s"] > 0 for r in rows.values())
    assert all(rows[o, "torch per-sample"]["ratio"] == 1.0 for o in ORDERS)
    # blocks of consecutive rows merge; a batch is never read in more calls than samples
    plan, cfg = out["plan"], out["config"]
    assert plan["block-shuffle"]["runs_per_batch"] <= cfg["batch_size"] / cfg["block"]
    assert plan["shuffle"]["runs_per_batch"] <= cfg["batch_size"]
    assert set(out["cache"]) >= {"method", "cold_mb_s", "warm_mb_s", "took_effect"}
    written = os.stat(path).st_mtime_ns
    again = run_chunks_bench(quick=True, path=path)  # the file is kept and reused
    assert os.stat(path).st_mtime_ns == written and again["identical"] == out["identical"]
    with pytest.raises(InputError):
        run_chunks_bench(quick=True, size_mb=1)
