"""``bench node-cache``: three real jobs on one node, with and without the shared node cache.

Jobs A and B read dataset X (two hyper-parameter runs: loader seeds 0 and 1), C reads Y
(half the size). Every sample is a file read through ``RemoteStorageSource``: one simulated
PFS link (``BANDWIDTH_MB_S``, ``LATENCY_MS``) shared by the three jobs' processes, so
storage is the bottleneck and its bytes are counted once for the node. Each job runs one
loader worker, an emulated step per batch, ``EPOCHS`` epochs; the three start together.
Rows, each in the same run, order alternated over rounds (medians):

- ``no cache``: every read goes to storage;
- ``private lobster``: each job its own ``SharedSampleCache`` of C/3, Lobster's policy;
- ``shared node cache``: a real daemon with ``--node-cache-mb`` C, each job
  ``attach(..., share_cache=<dataset>)``: one segment per dataset, split by the daemon.

C is ``FRACTION`` of |X| + |Y| bytes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE_BYTES = 8000  # two 4 KiB blocks each
SIZES = {"X": 1200, "Y": 600}
QUICK_SIZES = {"X": 300, "Y": 150}
EPOCHS, BATCH, STEP_S = 3, 16, 0.002
BANDWIDTH_MB_S, LATENCY_MS = 10.0, 1.0
FRACTION = 0.3
JOBS = (("A", "X", 0), ("B", "X", 1), ("C", "Y", 2))
MODES = ("no cache", "private lobster", "shared node cache")


def _decode(raw: bytes, index: int):
    import torch

    return torch.frombuffer(bytearray(raw[:16]), dtype=torch.uint8)


def job_main(argv: list[str]) -> None:
    """One job: ``folder seed mode dataset cache_bytes epochs link out``."""
    folder, seed, mode, dataset, cache_bytes, epochs, link, out = argv
    seed, cache_bytes, epochs = int(seed), int(cache_bytes), int(epochs)
    from adloader.client.data.cache_store import SharedSampleCache
    from adloader.client.data.cached_dataset import CachedDataset
    from adloader.client.data.storage import LocalDirectorySource, RemoteStorageSource
    from adloader.client.loader.loader import ElasticDataLoader
    from adloader.datapath.online_cache import AccessPlan

    source = RemoteStorageSource(LocalDirectorySource(folder), BANDWIDTH_MB_S, LATENCY_MS,
                                 state_dir=link)
    ds = CachedDataset(_decode, source)
    loader = ElasticDataLoader(ds, batch_size=BATCH, shuffle=True, seed=seed, num_workers=1)
    job = None
    if mode == "private lobster":
        plan = AccessPlan.from_loader(loader, epochs)
        ds.attach(SharedSampleCache(cache_bytes, len(ds), "lobster", plan))
    elif mode == "shared node cache":
        from adloader.client import attach

        job = attach(loader, model="smResnet20", share_cache=dataset, epochs=epochs,
                     connect_timeout_s=30)
        if ds.cache is None:
            raise SystemExit("no node cache was granted")
    times = []
    for e in range(epochs):
        loader.set_epoch(e)
        t0 = time.perf_counter()
        for _ in loader:
            time.sleep(STEP_S)
        times.append(time.perf_counter() - t0)
    stats = ds.stats()
    reads = sum(r["storage"] for r in stats) if stats else epochs * len(ds)
    Path(out).write_text(json.dumps({"epoch_s": times, "storage_reads": reads,
                                     "accesses": epochs * len(ds)}))
    if job is not None:
        job.finish()
    loader.close()


def _data(root: Path, sizes: dict) -> dict[str, Path]:
    out = {}
    for name, n in sizes.items():
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(n):
            (folder / f"{i:06d}.bin").write_bytes(os.urandom(SAMPLE_BYTES))
        out[name] = folder
    return out


def _run(mode: str, data: dict, work: Path, cache_bytes: int, epochs: int) -> dict:
    from adloader import env as names
    from adloader import rest
    from adloader.client.data.storage import LocalDirectorySource, RemoteStorageSource
    from adloader.remote.process import DaemonProcess

    link = work / "link"
    env = dict(os.environ)
    env.pop(names.ENDPOINT, None)
    daemon = None
    if mode == "shared node cache":
        daemon = DaemonProcess(work / "state", ["--capacity", "4", "--gpus", "2",
                                                "--arrival-window", "0.3", "--heartbeat",
                                                "0.5", "--node-cache-mb",
                                                str(max(1, cache_bytes >> 20))]).start()
        env[names.ENDPOINT] = daemon.endpoint
    each = cache_bytes // len(JOBS)
    procs, outs = [], {}
    t0 = time.perf_counter()
    try:
        for name, dataset, seed in JOBS:
            outs[name] = work / f"{name}.json"
            procs.append((name, subprocess.Popen(
                [sys.executable, "-m", "adloader.bench.data.node_cache_bench", str(data[dataset]),
                 str(seed), mode, f"bench-{dataset}", str(each), str(epochs), str(link),
                 str(outs[name])], env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True)))
        for name, p in procs:
            _, err = p.communicate(timeout=900)
            if p.returncode != 0:
                raise RuntimeError(f"bench node-cache: job {name} ({mode}) failed: "
                                   f"{err.strip()[-600:]}")
        makespan = time.perf_counter() - t0
        splits = ([e["data"] for e in daemon.http.get(rest.EVENTS, params={
            "limit": 5000}).json() if e["kind"] == "cache_split"] if daemon else [])
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
        if daemon is not None:
            daemon.stop()
    probe = RemoteStorageSource(LocalDirectorySource(data["Y"]), 1.0, state_dir=link)
    node_bytes = probe.link()["bytes"]
    probe.close()
    jobs = {n: json.loads(outs[n].read_text()) for n, _, _ in JOBS}
    return {"mode": mode, "makespan_s": makespan, "storage_bytes": node_bytes, "jobs": jobs,
            "splits": splits}


def run_node_cache_bench(quick: bool = False, rounds: int = 2, progress=None) -> dict:
    sizes = dict(QUICK_SIZES if quick else SIZES)
    epochs = 2 if quick else EPOCHS
    total = sum(sizes.values()) * SAMPLE_BYTES
    cache_bytes = max(int(FRACTION * total), 1 << 20)
    runs = []
    with tempfile.TemporaryDirectory(prefix="adloader-bench-node-cache-") as tmp:
        root = Path(tmp)
        data = _data(root / "data", sizes)
        for r in range(rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for k, mode in enumerate(order):
                if progress:
                    progress(f"round {r + 1}: {mode}", r * len(MODES) + k, rounds * len(MODES))
                work = root / f"r{r}-{k}"
                work.mkdir()
                runs.append(_run(mode, data, work, cache_bytes, epochs) | {"round": r})
    rows = []
    for mode in MODES:
        mine = [x for x in runs if x["mode"] == mode]
        rows.append({
            "mode": mode,
            "storage_mb": statistics.median(x["storage_bytes"] for x in mine) / 1e6,
            "makespan_s": statistics.median(x["makespan_s"] for x in mine),
            "reads": {n: statistics.median(x["jobs"][n]["storage_reads"] for x in mine)
                      for n, _, _ in JOBS},
            "epoch_s": {n: statistics.median(statistics.mean(x["jobs"][n]["epoch_s"])
                                             for x in mine) for n, _, _ in JOBS}})
    for row in rows:
        for base, label in ((rows[0], "none"), (rows[1], "private")):
            row[f"storage_x_{label}"] = row["storage_mb"] / max(base["storage_mb"], 1e-9)
            row[f"makespan_x_{label}"] = row["makespan_s"] / max(base["makespan_s"], 1e-9)
    return {"config": {"sizes": sizes, "sample_bytes": SAMPLE_BYTES, "epochs": epochs,
                       "cache_bytes": cache_bytes, "bandwidth_mb_s": BANDWIDTH_MB_S,
                       "latency_ms": LATENCY_MS, "rounds": rounds, "jobs": JOBS},
            "rows": rows, "runs": runs,
            "splits": next((x["splits"] for x in runs if x["splits"]), [])}


if __name__ == "__main__":
    job_main(sys.argv[1:])
