"""`adloader bench soak`: a real daemon through N jobs — memory, read latency and a store
bounded by retention.

A separate process plays the jobs over ZeroMQ, as jobs started by hand do: each registers,
heartbeats once and finishes (a window of them in flight at a time), while a few long-lived
jobs heartbeat throughout. This process meanwhile reads every read endpoint round-robin and
times each request. The daemon's resident memory (psutil) is read once 100 jobs have ended
and its first online model is in (scikit-learn loaded: a step of its own, reported apart),
and again once the N have ended and been pruned; the store's size likewise. Targets: RSS
at N within 20 MB of RSS at 100, every read endpoint's p99 ≤ 50 ms, the ended jobs
kept ≤ the retention count, a pruning that happened, and the pages of ``GET /v1/jobs``
reaching every job kept — the live ones among them — exactly once.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from adloader import rest
from adloader.remote.process import DaemonProcess

FULL_JOBS, QUICK_JOBS = 50_000, 600
QUICK_RETAIN = 200  # ended jobs kept in quick mode (the daemon's default in full mode)
LIVE = 8  # long-lived jobs, heartbeating throughout: the pages must show each once
FIRST = 100  # the RSS baseline: after this many jobs have ended
IN_FLIGHT = 50  # jobs registered and not yet answered, at most
RSS_BUDGET_MB = 20.0
P99_BUDGET_MS = 50.0
SETTLE_S = 600.0  # the longest wait for the daemon to catch up (finish, retire, prune)
MODEL_WAIT_S = 180.0  # the longest wait for the first refit
READS = (
    rest.JOBS,  # the default page: what an old client asks
    f"{rest.JOBS}?state=running,paused",
    f"{rest.JOBS}?state=finished&limit=100",
    f"{rest.JOBS}/{{ended}}",  # a job of the history (404 once pruned: still an answer)
    f"{rest.JOBS}/live-0000",
    f"{rest.EVENTS}?limit=500",
    f"{rest.EVENTS}?cursor={{tail}}",  # a client polling the event stream
    f"{rest.EVENTS}?kind=finished&limit=100",
    rest.ALLOCATIONS, rest.NODE, rest.MODEL, rest.METRICS, rest.HEALTH,
)


def _jobs_player(endpoint: str, total: int, done, pause_at: int, go, stop) -> None:
    """Child process: LIVE long-lived jobs, then ``total`` jobs that each register,
    heartbeat once and finish; ``done`` counts the finished, and the player waits for
    ``go`` once ``pause_at`` have."""
    import zmq

    from adloader.protocol import Finish, Heartbeat, JobFeatures, Register, encode, replaced

    feats = JobFeatures(model="smResnet20", batch_size=32, flops_g=0.3, params_m=0.9,
                        iterations=10**6)
    short = replaced(feats, iterations=10)  # what the played jobs run
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    answered = 0

    def drain(timeout_ms: int) -> None:
        nonlocal answered
        if sock.poll(timeout_ms):
            while sock.poll(0):
                if b'"allocation"' in sock.recv():
                    answered += 1

    def beat(job: str, iteration: int) -> bytes:
        return encode(Heartbeat(job=job, token=f"t-{job}", iteration=iteration, step_s=0.02,
                                data_wait_s=0.0005, samples_per_s=1600.0, workers=1))

    live = [f"live-{i:04d}" for i in range(LIVE)]
    for job in live:
        sock.send(encode(Register(job=job, token=f"t-{job}", features=feats, workers=1,
                                  name="soak-live")))
    while answered < LIVE and not stop.is_set():
        drain(100)
    next_beat, iteration = 0.0, 0
    sent = 0
    while sent < total and not stop.is_set():
        now = time.monotonic()
        if now >= next_beat:  # the long-lived jobs stay heard
            iteration += 10
            for job in live:
                sock.send(beat(job, iteration))
            next_beat = now + 0.5
        if sent == pause_at and not go.is_set():
            go.wait(0.1)
            continue
        if sent - (answered - LIVE) >= IN_FLIGHT:
            drain(50)
            continue
        job = f"soak-{sent:06d}"
        sock.send(encode(Register(job=job, token=f"t-{job}", features=short, workers=1,
                                  name="soak")))
        sock.send(beat(job, 10))
        sock.send(encode(Finish(job=job, token=f"t-{job}", iterations=10)))
        sent += 1
        done.value = sent
        drain(0)
    while not stop.is_set():  # the live jobs go on until the measurements are done
        for job in live:
            iteration += 10
            sock.send(beat(job, iteration))
        drain(500)
    sock.close()
    ctx.term()


class _Reader(threading.Thread):
    """Reads READS round-robin until stopped: milliseconds per endpoint."""

    def __init__(self, http: httpx.Client, done) -> None:
        super().__init__(daemon=True)
        self.http, self.done = http, done
        self.ms: dict[str, list[float]] = {path: [] for path in READS}
        self.failures: list[str] = []
        self.tail = ""
        self.halt = threading.Event()

    def run(self, rounds: int | None = None) -> None:
        """Until halted (or ``rounds`` times over READS, in the caller's thread)."""
        i = 0
        while not self.halt.is_set() and (rounds is None or i < rounds * len(READS)):
            path = READS[i % len(READS)]
            i += 1
            ended = f"soak-{max(0, self.done.value - 2 * IN_FLIGHT):06d}"
            url = path.replace("{ended}", ended).replace("{tail}", self.tail)
            if "{tail}" in path and not self.tail:
                continue
            t0 = time.perf_counter()
            r = self.http.get(url)
            self.ms[path].append((time.perf_counter() - t0) * 1000)
            if r.status_code >= 400 and not (r.status_code == 404 and "{ended}" in path):
                self.failures.append(f"GET {url}: {r.status_code} {r.text[:200]}")
            if path == f"{rest.EVENTS}?limit=500" and not self.tail:
                self.tail = r.headers.get(rest.NEXT_CURSOR, "")
            elif "{tail}" in path and r.status_code == 200:
                self.tail = r.headers.get(rest.NEXT_CURSOR, self.tail)
            self.halt.wait(0.005)


def _summary(ms: list[float]) -> dict:
    ms = sorted(ms)
    if not ms:
        return {"requests": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {"requests": len(ms), "p50_ms": statistics.median(ms),
            "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "max_ms": ms[-1]}


def _kept(http: httpx.Client) -> dict[str, int]:
    """The jobs the daemon keeps, by state, counted page by page (not from /metrics, which
    serves a render up to half a second old)."""
    out: dict[str, int] = {}
    for job in _pages(http, rest.PAGE_MAX, lambda j: j["state"]):
        out[job] = out.get(job, 0) + 1
    return out


def _store_bytes(state: Path) -> int:
    files = [state / f"adloader.db{s}" for s in ("", "-wal", "-shm")]
    files += list((state / "logs").glob("*")) + list((state / "jobs").glob("*"))
    return sum(f.stat().st_size for f in files if f.exists())


def _wait(what: str, ok, deadline_s: float = SETTLE_S) -> float:
    t0 = time.monotonic()
    while not ok():
        if time.monotonic() - t0 > deadline_s:
            raise TimeoutError(f"bench soak: {what} did not happen within {deadline_s:g} s")
        time.sleep(0.5)
    return time.monotonic() - t0


def _pages(http: httpx.Client, limit: int = 97, field=lambda j: j["id"]) -> list:
    """``field`` of every job kept (its id), page after page."""
    seen, params = [], {"limit": limit}
    while True:
        r = http.get(rest.JOBS, params=params)
        r.raise_for_status()
        seen += [field(j) for j in r.json()]
        cursor = r.headers.get(rest.NEXT_CURSOR)
        if not cursor:
            return seen
        params = {"limit": limit, "cursor": cursor}


def _refit_turned(model: dict) -> bool:
    return model["source"] != "prior" or model.get("refits_skipped", 0) > 0


def run_soak_bench(jobs: int | None = None, quick: bool = False,
                   workdir: str | None = None) -> dict:
    """N jobs through a fresh daemon (quick: QUICK_JOBS, keeping QUICK_RETAIN; else
    FULL_JOBS under the daemon's default retention); the figures and the targets."""
    total = jobs or (QUICK_JOBS if quick else FULL_JOBS)
    if total < FIRST:
        from adloader.errors import InputError

        raise InputError(f"--jobs {total}: at least {FIRST} (the RSS baseline is taken there)")
    root = Path(workdir or tempfile.mkdtemp(prefix="adloader-soak-"))
    state = root / "state"
    args = ["--capacity", "64", "--gpus", "4", "--arrival-window", "1",
            "--completion-window", "1"]
    if quick:
        args += ["--retain-jobs", str(QUICK_RETAIN)]
    retain = QUICK_RETAIN if quick else _default_retain()
    ctx = mp.get_context("fork")
    done, go, stop = ctx.Value("i", 0), ctx.Event(), ctx.Event()
    started = time.monotonic()
    with DaemonProcess(state, args) as daemon:
        proc = psutil.Process(daemon.proc.pid)
        child = ctx.Process(target=_jobs_player, args=(daemon.endpoint, total, done,
                                                        FIRST, go, stop))
        child.start()
        idle = _Reader(daemon.http, done)  # the same reads before any job: this machine's
        idle.run(rounds=20)                 # own speed, for scale
        reader = _Reader(daemon.http, done)
        try:
            _wait("the first jobs", lambda: done.value >= FIRST or not child.is_alive())
            _wait(f"{FIRST} jobs to end", lambda: _kept(daemon.http).get("finished", 0)
                  >= FIRST)
            rss_prior = proc.memory_info().rss / 2**20
            # the baseline is a daemon past its first refit turn, as any daemon is after its
            # first jobs: a model fitted, or the prior kept because it predicted the samples
            _wait("the first refit turn", lambda: _refit_turned(daemon.http.get(
                rest.MODEL).json()), MODEL_WAIT_S)
            rss_first = proc.memory_info().rss / 2**20
            store_first = _store_bytes(state)
            reader.start()
            go.set()
            curve = _play(proc, done, total, child)
            played_s = time.monotonic() - started
            last = rest.job_path(f"soak-{total - 1:06d}")
            settle_s = _wait("the daemon to end and prune them", lambda: daemon.http.get(
                last).json().get("state") == "finished" and sum(
                n for s, n in _kept(daemon.http).items() if s != "running") <= retain)
            reader.halt.set()
            reader.join(30)
            rss_last = proc.memory_info().rss / 2**20
            proc_maps = _maps(proc)
            kept = _kept(daemon.http)
            ids = _pages(daemon.http)
            live_rows = daemon.http.get(rest.JOBS, params={"state": "running"}).json()
            pruned = daemon.http.get(rest.EVENTS, params={"kind": "pruned",
                                                          "limit": 5000}).json()
            store_last = _store_bytes(state)
        finally:
            stop.set()
            go.set()
            reader.halt.set()
            child.join(30)
            if child.is_alive():
                child.kill()
    curve.append({"jobs": total, "rss_mb": rss_last, "sklearn": _has_sklearn(proc_maps)})
    warm = min([c["rss_mb"] for c in curve if c["sklearn"]], default=rss_first)
    latency = {path: _summary(ms) for path, ms in reader.ms.items()}
    for path, ms in idle.ms.items():
        latency[path]["idle_p99_ms"] = _summary(ms)["p99_ms"]
    ended_kept = sum(n for s, n in kept.items() if s not in ("running", "paused"))
    live_ids = [f"live-{i:04d}" for i in range(LIVE)]
    pruned_jobs = sum(e["data"].get("jobs", 0) for e in pruned)
    checks = {
        "rss_within_budget": rss_last - rss_first <= RSS_BUDGET_MB,
        # the same budget from the first reading with the TPM's scikit-learn loaded (a
        # one-time step of ~90 MB whenever the online model first needs it), if it ever is
        "rss_flat_once_warm": rss_last - warm <= RSS_BUDGET_MB,
        "p99_within_budget": all(v["p99_ms"] <= P99_BUDGET_MS for v in latency.values()),
        "store_bounded": ended_kept <= retain,
        "pruning_happened": pruned_jobs >= total - retain,
        "pages_exactly_once": (len(ids) == len(set(ids)) == sum(kept.values())
                               and all(ids.count(j) == 1 for j in live_ids)
                               and {j["id"] for j in live_rows} == set(live_ids)),
        "no_read_failed": not reader.failures,
    }
    return {"jobs": total, "retain_jobs": retain, "live_jobs": LIVE,
            "played_s": played_s, "settle_s": settle_s, "jobs_per_s": total / played_s,
            "rss_mb_prior_model": rss_prior, "rss_mb_at_first": rss_first,
            "rss_mb_at_last": rss_last,
            "rss_growth_mb": rss_last - rss_first, "first": FIRST, "rss_curve": curve,
            "rss_growth_once_warm_mb": rss_last - warm,
            "store_bytes_at_first": store_first, "store_bytes_at_last": store_last,
            "kept": kept, "pruned_jobs": pruned_jobs, "paged_ids": len(ids),
            "latency": latency, "read_failures": reader.failures[:10], "checks": checks,
            "meets_targets": all(checks.values())}


def _maps(proc: psutil.Process) -> list[str]:
    try:
        return [m.path for m in proc.memory_maps()]
    except psutil.Error:
        return []


def _has_sklearn(paths: list[str]) -> bool:
    return any("sklearn" in path for path in paths)


def _play(proc: psutil.Process, done, total: int, child) -> list[dict]:
    """Wait while the jobs are played; the daemon's RSS at a few points on the way (and
    whether scikit-learn is loaded in it yet)."""
    marks = sorted({total * k // 10 for k in (1, 2, 4, 6, 8)} - {0})
    curve = []
    t0 = time.monotonic()
    while done.value < total and child.is_alive():
        if marks and done.value >= marks[0]:
            curve.append({"jobs": done.value, "rss_mb": proc.memory_info().rss / 2**20,
                          "sklearn": _has_sklearn(_maps(proc))})
            marks.pop(0)
        if time.monotonic() - t0 > 24 * 3600:
            raise TimeoutError("bench soak: the jobs were not played within a day")
        time.sleep(0.2)
    return curve


def _default_retain() -> int:
    from adloader.config import DaemonConfig

    return DaemonConfig().retain_jobs
