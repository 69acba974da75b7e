"""``bench node-cache --quick``: real jobs, a real daemon; the shared cache reads less."""

from __future__ import annotations

from adloader.bench.data.node_cache_bench import run_node_cache_bench


def test_the_shared_node_cache_reads_less_from_storage_than_private_caches():
    result = run_node_cache_bench(quick=True, rounds=1)
    rows = {r["mode"]: r for r in result["rows"]}
    none, private, shared = (rows[m] for m in ("no cache", "private lobster",
                                               "shared node cache"))
    assert none["storage_x_none"] == 1.0
    assert none["reads"] == {"A": 600, "B": 600, "C": 300}  # 2 epochs, every read
    assert shared["storage_mb"] < private["storage_mb"] < none["storage_mb"]
    assert result["splits"] and all(sum(s["bytes"].values()) <= 1 << 20
                                    for s in result["splits"])
