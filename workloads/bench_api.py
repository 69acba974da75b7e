"""`adloader bench api`: REST latency of a real daemon while N masters heartbeat at 1 Hz.

The masters are lightweight: one separate process holds N DEALER sockets that register
(as jobs started by hand) and then send a Heartbeat a second each, staggered. REST
latency is measured from this process on a mix of reads, first with the daemon idle
(the baseline, same run) and then under the masters' load.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from adloader.workloads.bench_live import DaemonProcess

PATHS = ("/v1/jobs", "/v1/allocations", "/v1/events?limit=50", "/metrics", "/healthz")


def _masters(endpoint: str, count: int, rate_hz: float, seconds: float, ready, stop) -> None:
    """Child process: N masters, each registering then heartbeating at rate_hz."""
    import zmq

    from adloader.protocol import Heartbeat, JobFeatures, Register, encode

    ctx = zmq.Context()
    socks = []
    for i in range(count):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.IDENTITY, f"sim-{i:04d}".encode())
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        feats = JobFeatures(model="smResnet20", batch_size=32, flops_g=0.3, params_m=0.9,
                            iterations=10**6)
        s.send(encode(Register(job=f"sim-{i:04d}", token=f"t{i}", features=feats, workers=1)))
        socks.append(s)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    ready.set()
    start = time.monotonic()
    period = 1.0 / rate_hz
    sent = [start + period * i / count for i in range(count)]
    iteration = [0] * count
    while not stop.is_set() and time.monotonic() - start < seconds:
        now = time.monotonic()
        for i, s in enumerate(socks):
            if now >= sent[i]:
                iteration[i] += 10
                s.send(encode(Heartbeat(job=f"sim-{i:04d}", token=f"t{i}",
                                        iteration=iteration[i], step_s=0.02, data_wait_s=0.01,
                                        samples_per_s=900.0, workers=1)), zmq.NOBLOCK)
                sent[i] += period
        for s, _ in poller.poll(10):
            while s.poll(0):
                s.recv()
    for s in socks:
        s.close()
    ctx.term()


def _latencies(http: httpx.Client, seconds: float) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        path = PATHS[i % len(PATHS)]
        t0 = time.perf_counter()
        http.get(path).raise_for_status()
        out.append((time.perf_counter() - t0) * 1000)
        i += 1
        time.sleep(0.005)
    return out


def _summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    return {"requests": len(ms), "p50_ms": statistics.median(ms),
            "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "max_ms": ms[-1]}


def run_api_bench(masters: int = 200, seconds: float = 30.0, rate_hz: float = 1.0,
                  workdir: str | None = None) -> dict:
    root = Path(workdir or tempfile.mkdtemp(prefix="adloader-api-"))
    args = ["--capacity", str(max(256, masters)), "--gpus", "4", "--heartbeat", "1",
            "--arrival-window", "2", "--completion-window", "2"]
    with DaemonProcess(root / "state", args) as daemon:
        idle = _summary(_latencies(daemon.http, seconds / 2))
        ctx = mp.get_context("fork")
        ready, stop = ctx.Event(), ctx.Event()
        endpoint = f"ipc://{root / 'state' / 'control.sock'}"
        child = ctx.Process(target=_masters, args=(endpoint, masters, rate_hz, seconds + 30,
                                                   ready, stop))
        child.start()
        try:
            ready.wait(60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # until every master is registered
                jobs = daemon.http.get("/v1/allocations").json()["jobs"]
                if len(jobs) >= masters:
                    break
                time.sleep(0.5)
            time.sleep(3)  # past the arrival window's plan
            loaded = _summary(_latencies(daemon.http, seconds))
            registered = len(daemon.http.get("/v1/allocations").json()["jobs"])
            metrics = daemon.http.get("/metrics").text
        finally:
            stop.set()
            child.join(30)
            if child.is_alive():
                child.kill()
    dropped = [line for line in metrics.splitlines() if line.startswith("adloader_dropped")]
    return {"masters": masters, "registered": registered, "rate_hz": rate_hz, "idle": idle,
            "loaded": loaded, "p99_ratio": loaded["p99_ms"] / idle["p99_ms"],
            "dropped": dropped}
