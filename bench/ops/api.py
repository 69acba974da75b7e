"""`adloader bench api`: the control plane at scale — REST latency of a real daemon, its
memory and CPU, while N masters heartbeat at 1 Hz.

The masters are lightweight: one separate process holds N DEALER sockets that register
(as jobs started by hand) and then send a Heartbeat a second each, staggered. For every
read endpoint, latency is measured from this process, first with the daemon idle (the
baseline, same run) and then under the masters' load; the daemon's resident memory and CPU
(psutil) are read meanwhile. One row per master count, each on a fresh daemon. Before the
masters start, the same reads are timed while a job naming a very deep model (Resnet600,
whose FLOPs take seconds to count) is submitted.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from adloader import rest
from adloader.remote.process import DaemonProcess

READS = (rest.JOBS, f"{rest.JOBS}/{{job}}", rest.ALLOCATIONS, f"{rest.EVENTS}?limit=500",
         rest.MODEL, rest.METRICS, rest.HEALTH)


def _masters(endpoint: str, count: int, rate_hz: float, seconds: float, ready, stop) -> None:
    """Child process: N masters, each registering then heartbeating at rate_hz."""
    import zmq

    from adloader.protocol import Heartbeat, JobFeatures, Register, encode

    ctx = zmq.Context()
    socks = []
    feats = JobFeatures(model="smResnet20", batch_size=32, flops_g=0.3, params_m=0.9,
                        iterations=10**6)
    for i in range(count):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send(encode(Register(job=f"sim-{i:04d}", token=f"token-{i:04d}", features=feats,
                               workers=1)))
        socks.append(s)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    ready.set()
    start = time.monotonic()
    period = 1.0 / rate_hz
    due = [start + period * i / count for i in range(count)]
    iteration = [0] * count
    while not stop.is_set() and time.monotonic() - start < seconds:
        now = time.monotonic()
        for i, s in enumerate(socks):
            if now >= due[i]:
                iteration[i] += 10
                s.send(encode(Heartbeat(job=f"sim-{i:04d}", token=f"token-{i:04d}",
                                        iteration=iteration[i], step_s=0.02, data_wait_s=0.01,
                                        samples_per_s=900.0, workers=1)), zmq.NOBLOCK)
                due[i] += period
        for s, _ in poller.poll(10):
            while s.poll(0):
                s.recv()
    for s in socks:
        s.close()
    ctx.term()


def _latencies(http: httpx.Client, seconds: float, job: str) -> dict[str, list[float]]:
    """Round-robin over the read endpoints for ``seconds``: milliseconds per endpoint."""
    out: dict[str, list[float]] = {path: [] for path in READS}
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        path = READS[i % len(READS)]
        t0 = time.perf_counter()
        r = http.get(path.replace("{job}", job))
        if r.status_code >= 400 and r.status_code != 404:  # idle: no such job yet, a 404
            r.raise_for_status()
        out[path].append((time.perf_counter() - t0) * 1000)
        i += 1
        time.sleep(0.002)
    return out


def _summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"requests": len(ms), "p50_ms": statistics.median(ms),
            "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "max_ms": ms[-1]}


def _during_a_deep_submit(http: httpx.Client, job: str) -> dict:
    """Read latencies while a job naming Resnet600 is submitted: its FLOPs are counted (in a
    child process) for seconds; nothing else may wait for that."""
    import concurrent.futures

    body = {"name": "deep", "command": ["true"], "model": "Resnet600", "batch_size": 8,
            "iterations": 1}
    out: dict[str, list[float]] = {path: [] for path in READS}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        done = pool.submit(http.post, rest.JOBS, json=body, timeout=300)
        while not done.done():
            for path, ms in _latencies(http, 0.5, job).items():
                out[path] += ms
        counted = time.monotonic() - t0
        status = done.result().status_code
    return {"count_s": counted, "status": status,
            "latency": {p: _summary(v) for p, v in out.items() if v}}


def _one(masters: int, seconds: float, rate_hz: float, root: Path) -> dict:
    state = root / f"state-{masters}"
    args = ["--capacity", str(max(256, masters)), "--gpus", "4", "--heartbeat", "1",
            "--arrival-window", "2", "--completion-window", "2"]
    with DaemonProcess(state, args) as daemon:
        proc = psutil.Process(daemon.proc.pid)
        idle = {p: _summary(v) for p, v in _latencies(daemon.http, seconds / 2,
                                                      "sim-0000").items()}
        deep = _during_a_deep_submit(daemon.http, "sim-0000")
        ctx = mp.get_context("fork")
        ready, stop = ctx.Event(), ctx.Event()
        endpoint = f"ipc://{state / 'control.sock'}"
        child = ctx.Process(target=_masters, args=(endpoint, masters, rate_hz, seconds + 120,
                                                   ready, stop))
        child.start()
        try:
            ready.wait(120)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # until every master is registered
                if len(daemon.http.get(rest.ALLOCATIONS).json()["jobs"]) >= masters:
                    break
                time.sleep(0.5)
            time.sleep(4)  # past the arrival window's plan
            proc.cpu_percent(None)
            cpu0 = time.monotonic()
            loaded = {p: _summary(v) for p, v in _latencies(daemon.http, seconds,
                                                            "sim-0000").items()}
            cpu = proc.cpu_percent(None)
            rss = proc.memory_info().rss / 2**20
            window = time.monotonic() - cpu0
            registered = len(daemon.http.get(rest.ALLOCATIONS).json()["jobs"])
            metrics = daemon.http.get("/metrics").text
        finally:
            stop.set()
            child.join(30)
            if child.is_alive():
                child.kill()
    counters = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
                if line.startswith("adloader_") and line.split()[0].endswith("_total")}
    worst = max(v["p99_ms"] for v in loaded.values())
    return {"masters": masters, "registered": registered, "rate_hz": rate_hz,
            "idle": idle, "loaded": loaded, "worst_p99_ms": worst, "deep_submit": deep,
            "daemon_rss_mb": rss, "daemon_cpu_percent": cpu, "cpu_window_s": window,
            "counters": counters}


def run_api_bench(masters: tuple[int, ...] = (200, 1000), seconds: float = 30.0,
                  rate_hz: float = 1.0, workdir: str | None = None) -> dict:
    root = Path(workdir or tempfile.mkdtemp(prefix="adloader-api-"))
    return {"rows": [_one(n, seconds, rate_hz, root) for n in masters]}
