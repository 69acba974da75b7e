"""What a node does without adloader: the static mix on torch's own DataLoader, no daemon.

The baselines of `adloader bench live`. Every job is the reference job
(``workloads/train.py --loader torch``), all started at once, each with:

- ``requested``: the trace's own ``workers`` for each job (6 each in paper-static);
- ``even``: the node's loading workers split evenly, ``capacity // N`` each;
- ``cores``: ``num_workers`` = the node's logical cores for every job, as tutorials advise;
- ``one``: ``num_workers=1`` for every job, the least a user sets for a loader in
  background processes;
- ``autotune``: each job tunes its own count (``adloader.scheduling.tuners.autotune``, no view
  of the node; a weak tuner: it starts at 1 and restarts torch's pool at every change);
- ``climb``: the competent per-job tuner (``adloader.scheduling.tuners.climb``) on adloader's
  ``ElasticDataLoader``, no daemon: it starts at the even split, climbs on its measured rate
  within the node's cores and resizes in-process, for the whole run;
- ``fifo`` and ``shortest``: a queue, as an exclusive allocation runs jobs — each job alone
  with the node's workers, one after another, in arrival order or shortest first (by its
  stated samples), on torch's loader;
- ``elastic:SETTING``: a fixed setting above on adloader's ``ElasticDataLoader`` with no
  daemon (``elastic`` alone: the even split) — the loader's part of any gain.

Jobs are placed on the emulated GPUs as the daemon places them (the planner's first fit, in
arrival order), so a difference between a baseline and a policy is not placement;
``even@trace`` runs the even split on the trace's own ``gpu_ids``, to show what placement
alone moves; ``elastic`` runs the even split on adloader's own ``ElasticDataLoader`` with no
daemon, to tell the loader's cost from the daemon's. Every row, with or without a daemon, is
measured the same way (``RunWatch``): JCT from the moment the run was started to the job's
last batch, makespan to the last job's, each job's rate as its own training loop measured
it, the peak over the run of Σ PSS of every process of the run (jobs, their loader workers,
the daemon, its refit worker and supervisors), and the CPU-seconds of the daemon (its refit
worker, which fits the TPM online, counted apart as ``refit``), the supervisors and the masters
(inside the jobs: their channel thread, libzmq's threads, the batch hook) per training-second.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import psutil

from adloader import env as names
from adloader.scheduling.planner import place_in_order
from adloader.sim.no_daemon import fixed_workers
from adloader.sim.trace import Trace
from adloader.workloads.replay import job_command

SETTINGS = ("requested", "even", "cores", "autotune")
EXTRA = ("even@trace", "elastic", "one")  # even split on the trace's GPUs, on our loader; 1 each
QUEUES = ("fifo", "shortest")  # one job at a time, each with the node's workers
TUNERS = ("autotune", "climb")  # each job tunes its own count
ELASTIC = tuple(f"elastic:{s}" for s in ("requested", "even", "cores", "one"))
ALL = SETTINGS + EXTRA + QUEUES + ("climb",) + ELASTIC


def loader_of(setting: str) -> str:
    """The loader a no-daemon setting's jobs run: adloader's (``elastic``, ``climb``) or
    torch's own."""
    return "elastic" if setting.startswith("elastic") or setting == "climb" else "torch"


def fixed_of(setting: str) -> str:
    """The fixed setting under a name: ``elastic`` → even, ``elastic:one`` → one,
    ``even@trace`` → even."""
    base = setting.split("@")[0]
    if base == "elastic":
        return "even"
    return base.split(":", 1)[1] if base.startswith("elastic:") else base


def baseline_workers(trace: Trace, setting: str, capacity: int, cores: int) -> dict:
    """Each job's ``num_workers`` under a no-daemon setting (None: the job tunes it from
    the weak tuner's start; a tuner that climbs starts at the even split)."""
    base = fixed_of(setting)
    if base == "autotune":
        return {j.name: None for j in trace.jobs}
    if base in QUEUES:  # alone: the node's workers
        return {j.name: capacity for j in trace.jobs}
    # the fixed counts as the simulator sets them
    return fixed_workers(trace, "even" if base == "climb" else base, capacity, cores)


def queue_order(trace: Trace, setting: str) -> list:
    """The jobs in the order a queue runs them: by arrival (``fifo``), or by stated samples,
    fewest first (``shortest``); ties in the trace's order."""
    jobs = list(trace.jobs)
    if setting == "shortest":
        return sorted(jobs, key=lambda j: (j.iterations * j.batch_size, j.arrival_s,
                                           jobs.index(j)))
    return sorted(jobs, key=lambda j: (j.arrival_s, jobs.index(j)))


def placement(trace: Trace, setting: str, per_gpu: int) -> dict[str, tuple[int, ...]]:
    """The GPUs of each job: the daemon's first fit, or the trace's own (``@trace``)."""
    if setting.endswith("@trace"):
        return {j.name: tuple(j.gpu_ids or range(j.gpus)) for j in trace.jobs}
    jobs = sorted(trace.jobs, key=lambda j: j.arrival_s)
    return place_in_order([(j.name, j.gpus) for j in jobs], trace.gpus, per_gpu)


class RunWatch:
    """Samples every process whose command line names ``marker`` (the run's own folder), and
    every child of the daemon that does not (a one-shot fit, a FLOPs count): the peak of Σ
    PSS, and each process's CPU seconds by role (daemon, refit, supervisor, job). A process
    is read every ``every_s``: what one that lived shorter used since its last reading is
    missed."""

    def __init__(self, marker: str, every_s: float = 0.5):
        self.marker, self.every_s = marker, every_s
        self.peak_pss = 0
        self.cpu: dict[int, tuple[str, float]] = {}
        self.base: dict[int, float] = {}  # CPU seconds at ``mark``: start-up left out
        self._lock = threading.Lock()  # the watcher thread and the caller both sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RunWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def role(cmdline: list[str]) -> str:
        text = " ".join(cmdline)
        if "adloader.daemon.supervise" in text or any(  # ``-m``: earlier commits' daemons
                part.endswith("supervise.py") for part in cmdline):
            return "supervisor"
        # the daemon's refit worker (``--for STATE``); ``adloader.daemon.refit``: earlier commits'
        if "adloader.daemon.model.refit" in text or "adloader.daemon.refit" in text:
            return "refit"
        if "adloader.workloads.train" in text:
            return "job"
        return "daemon"

    def sample(self) -> None:
        with self._lock:
            self._sample()

    def _sample(self) -> None:
        total = 0
        # (process, its command line, its parent), read at once: ``info`` is psutil's own
        procs = [(p, p.info["cmdline"] or [], p.info["ppid"])
                 for p in psutil.process_iter(["ppid", "cmdline"])]
        marked = {p.pid for p, cmd, _ in procs if any(self.marker in part for part in cmd)}
        daemons = {p.pid for p, cmd, _ in procs if p.pid in marked
                   and self.role(cmd) == "daemon"}
        for proc, cmd, parent in procs:
            if proc.pid not in marked and parent not in daemons:
                continue
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    mem = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            total += getattr(mem, "pss", mem.rss)
            self.cpu[proc.pid] = (self.role(cmd), times.user + times.system)
        self.peak_pss = max(self.peak_pss, total)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.every_s)

    def mark(self) -> None:
        """From now on: what each process seen so far had used is left out (a daemon's own
        start-up is not the cost of scheduling the run)."""
        with self._lock:
            self._sample()
            self.base = {pid: seconds for pid, (_, seconds) in self.cpu.items()}

    def cpu_by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (role, seconds) in self.cpu.items():
            out[role] = out.get(role, 0.0) + seconds - self.base.get(pid, 0.0)
        return out


def steady_rate(jobs: list[dict]) -> float | None:
    """The node's rate while every job trains: Σ of each job's samples between the last
    job's first batch and the first job's last batch, over that time, from the jobs' own
    progress (``progress``: (wall clock, batches), interpolated); None when that window is
    under a second or a report has no progress."""
    marks = [j.get("progress") or [] for j in jobs]
    if not jobs or any(len(m) < 2 for m in marks):
        return None
    since = max(m[0][0] for m in marks)
    until = min(m[-1][0] for m in marks)
    if until - since < 1.0:
        return None

    def at(m, t):
        for (ta, a), (tb, b) in zip(m, m[1:], strict=False):
            if ta <= t <= tb:
                return a + (b - a) * (t - ta) / max(tb - ta, 1e-9)
        return float(m[-1][1]) if t >= m[-1][0] else float(m[0][1])

    samples = sum((at(m, until) - at(m, since)) * j["batch_size"]
                  for m, j in zip(marks, jobs, strict=True))
    return round(samples / (until - since), 3)


def summarise(jobs: list[dict], t0: float, watch: RunWatch, once_cpu_s: float = 0.0) -> dict:
    """The run in the shape every row shares (``replay``'s keys, from the jobs' reports).
    ``once_cpu_s``: what of the overhead is paid once a busy period, not per training-second
    (the daemon's fitting worker's start, as the worker measured it): the overhead is also
    given without it."""
    for j in jobs:
        j["start_s"], j["end_s"] = round(j["start"] - t0, 3), round(j["end"] - t0, 3)
        j["jct_s"] = j["end_s"]  # every job of the static mix arrives at t0
        j["throughput"] = round(j["rate"], 3)  # its own training loop's rate
    training_s = sum(j["elapsed_s"] for j in jobs)
    cpu = watch.cpu_by_role()
    cpu["master"] = sum(j.get("master_cpu_s", 0.0) for j in jobs)  # inside the jobs
    # of it, the worker pools the daemon's resizes started (counted: shown apart)
    cpu["master_resize"] = sum(j.get("master_resize_cpu_s", 0.0) for j in jobs)
    # the process's full collections that fell in the masters' threads: shown, not counted
    cpu["master_gc"] = sum(j.get("master_gc_s", 0.0) for j in jobs)
    overhead = sum(cpu.get(role, 0.0) for role in OVERHEAD)
    first, last = min(j["start_s"] for j in jobs), max(j["end_s"] for j in jobs)
    samples = sum(j["iterations"] * j["batch_size"] for j in jobs)
    return {"jobs": jobs, "makespan_s": round(last, 3),
            "first_batch_s": first,  # start-up: the node trains from here on
            "node_rate": round(samples / max(last - first, 1e-9), 3),  # from then to the end
            "steady_rate": steady_rate(jobs),
            "mean_jct_s": round(statistics.mean(j["jct_s"] for j in jobs), 3),
            "worst_jct_s": round(max(j["jct_s"] for j in jobs), 3),
            "aggregate_throughput": round(sum(j["rate"] for j in jobs), 3),
            "memory_mb": round(watch.peak_pss / 2**20, 1),
            "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
            "overhead_cpu_per_training_s": round(overhead / max(training_s, 1e-9), 5),
            "overhead_after_start_cpu_per_training_s": round(
                max(overhead - once_cpu_s, 0.0) / max(training_s, 1e-9), 5),
            # of the overhead, the masters' pools started for the daemon's resizes
            "overhead_resizes_cpu_per_training_s": round(
                cpu["master_resize"] / max(training_s, 1e-9), 5)}


OVERHEAD = ("daemon", "refit", "supervisor", "master")  # the roles that are adloader's cost


def run_baseline(trace: Trace, setting: str, *, capacity: int, cores: int, per_gpu: int,
                 iterations_scale: float, step_scale: float, crop: int, data: str,
                 images: int, root: Path, env: dict, timeout_s: float = 900.0) -> dict:
    """The mix once under one no-daemon ``setting``; every job started together (a queue:
    one after another)."""
    workers = baseline_workers(trace, setting, capacity, cores)
    gpus = placement(trace, setting, per_gpu)
    out = root / f"reports-{setting.replace(':', '-')}-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    loader = loader_of(setting)

    def start(job) -> subprocess.Popen:
        iterations = max(1, round(job.iterations * iterations_scale))
        cmd = job_command(job, iterations, step_scale, crop, data, images)
        cmd += ["--loader", loader, "--report", str(out / f"{job.name}.json")]
        cmd += ["--autotune"] if workers[job.name] is None else \
            ["--workers", str(workers[job.name])]
        if setting == "climb":
            cmd += ["--climb", str(cores)]
        job_env = {**env, names.GPU_IDS: ",".join(map(str, gpus[job.name]))}
        return subprocess.Popen(cmd, env=job_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)

    def wait(job, proc, procs) -> None:
        try:
            _, err = proc.communicate(timeout=max(1.0, t0 + timeout_s - time.time()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RuntimeError(f"{setting}: {job.name} did not end in "
                               f"{timeout_s:.0f} s") from None
        if proc.returncode:
            raise RuntimeError(f"{setting}: {job.name} exited {proc.returncode}: "
                               f"{err.strip()[-400:]}")

    with RunWatch(str(root)) as watch:
        t0 = time.time()
        if setting in QUEUES:
            for job in queue_order(trace, setting):
                proc = start(job)
                wait(job, proc, [proc])
        else:
            procs = [start(job) for job in trace.jobs]
            for job, proc in zip(trace.jobs, procs, strict=True):
                wait(job, proc, procs)
        watch.sample()
    jobs = [dict(name=j.name, gpu_ids=list(gpus[j.name]), workers_initial=workers[j.name],
                 **_read(out / f"{j.name}.json")) for j in trace.jobs]
    return {"policy": f"no daemon: {setting}", "setting": setting,
            **summarise(jobs, t0, watch)}


def _read(path: Path) -> dict:
    return json.loads(path.read_text())
