"""`adloader bench loaders`: every loader runs, tiny, and the result has a row for each."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from adloader.bench.data import loaders as bench_loaders
from adloader.errors import InputError

TINY = {"workers": (1, 2), "batches": 3, "warmup": 1, "crop": 16, "image_size": 24,
        "images": 4}
NAMES = ["torch", "stateful", "spdl-threads", "spdl-processes", "elastic", "elastic-threads"]


def test_quick_bench_has_a_row_per_loader_and_worker_count(tmp_path):
    result = bench_loaders.run_loaders_bench(quick=True, root=str(tmp_path), **TINY)
    assert result["config"]["rounds"] == 1 and result["config"]["workers"] == [1, 2]
    assert list(result["loaders"]) == NAMES
    rows = {(r["workers"], r["loader"]): r for r in result["rows"]}
    assert set(rows) == {(w, n) for w in (1, 2) for n in NAMES}
    ran = set()
    for (_, name), row in rows.items():
        if row["status"] != "ok":  # a peer not installed here: said so, not failed
            assert row["status"].startswith("not installed (pip install ")
            continue
        ran.add(name)
        assert row["samples_per_s"] > 0 and row["cpu_s_per_sample"] >= 0
        assert row["ratio"] > 0 and row["paired_ratio"] > 0 and row["rounds"] == 1
        assert row["first_batch_ms"] > 0
    assert {"torch", "elastic", "elastic-threads"} <= ran
    assert rows[1, "torch"]["ratio"] == rows[2, "torch"]["paired_ratio"] == 1.0
    assert len(result["runs"]) == 2 * len(ran)  # one round: each loader once per count
    assert all(r["samples"] == 3 * 8 for r in result["runs"])


def test_a_peer_not_installed_is_a_row_that_says_so(monkeypatch, tmp_path):
    gone = [dataclasses.replace(p, module="adloader_no_such_module") if p.name == "stateful"
            else p for p in bench_loaders.PEERS]
    monkeypatch.setattr(bench_loaders, "PEERS", tuple(gone))
    result = bench_loaders.run_loaders_bench(quick=True, root=str(tmp_path),
                                             loaders=("torch", "stateful"),
                                             **{**TINY, "workers": (1,)})
    rows = {r["loader"]: r for r in result["rows"]}
    assert rows["stateful"] == {"workers": 1, "loader": "stateful",
                                "status": "not installed (pip install torchdata)"}
    assert rows["torch"]["status"] == "ok" and {r["loader"] for r in result["runs"]} == {"torch"}
    title, columns, table = bench_loaders.loaders_table(result)
    assert title.endswith("medians of 1 round") and len(columns) == 9
    assert table[1] == [1, "StatefulDataLoader", "not installed (pip install torchdata)"]


def test_the_cpu_of_reaped_children_is_counted_once():
    before = (1.0, {10: (2.0, True), 11: (3.0, False)}, 5.0)
    # child 10 (alive before with 2 s) was reaped at 2.5 s, grandchild 11 went on to 3.5 s,
    # child 12 was born and reaped with 1 s: 0.5 own + 0.5 + 0.5 + 1 = 2.5
    after = (1.5, {11: (3.5, False)}, 5.0 + 2.5 + 1.0)
    assert bench_loaders.cpu_seconds(before, after) == pytest.approx(2.5)


def test_bad_settings_are_refused():
    with pytest.raises(InputError, match="worker counts must be >= 1"):
        bench_loaders.run_loaders_bench(quick=True, workers=(0,))
    with pytest.raises(InputError, match="always runs"):
        bench_loaders.run_loaders_bench(quick=True, loaders=("elastic",))


def test_the_command_writes_its_table_and_json(tmp_path):
    out = tmp_path / "loaders.json"
    proc = subprocess.run(
        [sys.executable, "-m", "adloader", "bench", "loaders", "--quick", "--workers", "1",
         "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ElasticDataLoader" in proc.stdout and "× torch" in proc.stdout
    result = json.loads(out.read_text())
    assert {r["loader"] for r in result["rows"]} == set(NAMES)
    assert all(r["workers"] == 1 for r in result["rows"])
    bad = subprocess.run([sys.executable, "-m", "adloader", "bench", "loaders", "--workers",
                          "1,x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "expected N or N,M" in bad.stderr
