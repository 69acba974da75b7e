"""`adloader bench live`: the paper's static mix as real jobs on this machine, per policy.

One run: measure this machine's loading curve L(D) with a real DataLoader over the same
JPEGs the jobs read, and its contention surface (``workloads.contention``: the mix's fixed
settings and a few equal and unequal splits, k pipelines side by side, each in a process of its
own; the ``measured`` truth the simulated baselines are also run on); build the node's prior
profile from it (loading: measured; steps: the
paper's GPUs, scaled, since the jobs emulate them); then, round after round, each policy under
a real daemon (the mix replayed through REST) and each no-daemon baseline (``bench.nodaemon``:
the same jobs on torch's own DataLoader), in an order that alternates. Every row is measured
the same way (``nodaemon.RunWatch`` and the jobs' own reports); ratios are paired with the
reference's run of the same round: the even split with no daemon (``balance`` when no
baseline runs).

With CUDA the jobs train for real (``workloads/train.py``): the prior's step times are then
measured on the GPU (eq. 6's α fitted from the mix's models), the mix is fitted onto the
GPUs there are (each job on at most all of them, as many jobs a GPU as it takes to start
them together), and the workers default to the logical cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from adloader import env as names
from adloader import rest
from adloader.bench.live import nodaemon, policy_label
from adloader.bench.live.live_rounds import FIXED, summarise_rounds
from adloader.bench.sim.declared import FAST_GPU_STEPS
from adloader.device.device_profile import load_profile, save_profile
from adloader.errors import InputError
from adloader.models import features
from adloader.remote.process import DaemonProcess
from adloader.scheduling.model.samples import TrainingSample
from adloader.sim.gpu_node import GPU_NODE
from adloader.sim.gpu_node import NAME as GPU_NODE_NAME
from adloader.sim.trace import Trace, fit_to_gpus, load_trace
from adloader.workloads.contention import default_grid, measure_contention
from adloader.workloads.dataset import SyntheticJPEGDataset, ensure_images
from adloader.workloads.measure import (
    fit_alpha,
    logical_cores,
    measure_loading,
    measure_training,
    node_loading_table,
)
from adloader.workloads.replay import replay


@dataclasses.dataclass
class LiveConfig:
    policies: tuple[str, ...] = ("balance", "ftf")
    baselines: tuple[str, ...] = nodaemon.SETTINGS + nodaemon.EXTRA  # no daemon, torch's loader
    trace: str = "paper-static"
    mix: str = "paper-static"  # or fast-gpus (steps × 0.25), gpu-node (a GPU node's trainer),
    # or gpu-bound-mix (its own trace: a GPU-bound job beside loading-bound ones)
    capacity: int = 0  # 0: 3 × cores emulating GPUs, the cores with CUDA
    iterations_scale: float = 0.2
    rounds: int = 5  # each setting this often, alternating; medians and spreads are reported
    step_scale: float = 1.2  # Resnet18's μ ≈ L(C)/1.8 here, as on the paper's testbed
    crop: int = 0  # 0: 224 (the paper's) with CUDA, 112 with emulated steps
    images: int = 128
    window_s: float = 2.0
    heartbeat_s: float = 0.5
    timeout_s: float = 900.0
    loading_rounds: int = 3  # L(D) measured this often (medians)
    surface_rounds: int = 2  # the contention surface measured this often (0: not at all)
    surface_window_s: float = 1.5  # seconds each of its points is timed


# the members this bench runs live: the factor on the emulated steps (fast-gpus, of the
# declared space ``adloader.bench.sim.declared``: GPUs 4× faster, so the loaders bind); gpu-node:
# the GPU node emulated whole (``adloader.sim.gpu_node``: virtual cores, the trainer's copy
# and launch CPU, its steps fitted to the measured node)
LIVE_MIXES = {"paper-static": 1.0, "fast-gpus": FAST_GPU_STEPS, GPU_NODE_NAME: 1.0,
              "gpu-bound-mix": 1.0}
# the members with a trace of their own (the others run ``LiveConfig.trace``)
LIVE_TRACES = {"gpu-bound-mix": "gpu-bound-mix"}


def for_mix(cfg: LiveConfig, cuda: bool) -> LiveConfig:
    """``cfg`` with its mix's emulated step scale; a mix that emulates other GPUs needs the
    steps emulated (a real GPU is as fast as it is)."""
    factor = LIVE_MIXES[cfg.mix]
    if (factor != 1.0 or cfg.mix == GPU_NODE_NAME) and cuda:
        raise InputError(f"bench live: --member {cfg.mix} emulates other GPUs, and this machine "
                         f"trains on its real GPUs: run it on a machine without CUDA")
    return dataclasses.replace(cfg, step_scale=cfg.step_scale * factor)


def live_capacity(cfg: LiveConfig, cuda: bool) -> int:
    if cfg.mix == GPU_NODE_NAME:
        return cfg.capacity or GPU_NODE.cores
    return cfg.capacity or (logical_cores() if cuda else 3 * logical_cores())


def batch_seconds(profile, batch_size: int) -> float:
    """W: one loading worker's time for a batch, from the profile's L(1)."""
    return batch_size / max(profile.node_loading[1], 1e-9)


def gpu_node_steps(trace: Trace, w: float) -> list[TrainingSample]:
    """The emulated node's GPU steps as a GPU node's profile measures them (on batches
    already on the device, half, once and twice each job's batch): what the daemon's
    prior predicts F_μ from — the trainer's copy and launch are not in them."""
    out = []
    for job in trace.jobs:
        feat, per_gpu = features(job.model), max(1, job.batch_size // job.gpus)
        for b in (max(1, per_gpu // 2), per_gpu, 2 * per_gpu):
            out.append(TrainingSample(b, 1, feat.flops_g, feat.params_m,
                                      GPU_NODE.step(job.model) * w * b / per_gpu))
    return out


def live_crop(cfg: LiveConfig, cuda: bool) -> int:
    return cfg.crop or (224 if cuda else 112)


def surface_grid(cfg: LiveConfig, trace: Trace, capacity: int) -> list[tuple[int, ...]]:
    """The points of the contention surface the bench measures: each fixed no-daemon setting
    it runs (the jobs' workers side by side), then equal and unequal splits of the capacity
    over 2..n pipelines (n the mix's jobs); each once."""
    points, seen = [], set()
    for setting in ("requested", "even", "cores"):
        if setting in cfg.baselines:
            workers = nodaemon.baseline_workers(trace, setting, capacity, logical_cores())
            points.append(tuple(workers[j.name] for j in trace.jobs))
    points += default_grid(capacity, len(trace.jobs), min_jobs=2)
    out = []
    for p in points:
        if tuple(sorted(p)) not in seen:
            seen.add(tuple(sorted(p)))
            out.append(p)
    return out


def measured_profile(cfg: LiveConfig, data: Path, out: Path, trace: Trace, cuda: bool,
                     progress=None, per_gpu: int | None = None) -> Path:
    """The node's prior: L(D) measured here for D = 1..C; steps measured on the GPU, or
    the paper's × step_scale when the jobs emulate them; ``per_gpu`` jobs a GPU, as the
    daemon is told (the mix fitted onto fewer GPUs puts three on one)."""
    capacity = live_capacity(cfg, cuda)
    ensure_images(data, cfg.images)
    dataset = SyntheticJPEGDataset(data, size=100_000, images=cfg.images,
                                   crop=live_crop(cfg, cuda))
    counts = list(range(1, capacity + 1))
    if cfg.mix == GPU_NODE_NAME or cfg.loading_rounds < 3:  # every other count past 4
        counts = sorted({*range(1, 5), *range(4, capacity + 1, 2), capacity})
    samples = measure_loading(dataset, counts, batch_size=32, batches=12,
                              rounds=cfg.loading_rounds, progress=progress, every_round=True,
                              device="cuda" if cuda and torch.cuda.is_available() else None)
    surface = measure_contention(dataset, surface_grid(cfg, trace, capacity), batch_size=32,
                                 window_s=cfg.surface_window_s, rounds=cfg.surface_rounds,
                                 progress=progress) if cfg.surface_rounds > 0 else []
    paper = load_profile("paper")
    if cuda:
        models = sorted({job.model for job in trace.jobs})
        per_gpu_batch = sorted({max(1, job.batch_size // job.gpus) for job in trace.jobs})
        batches = sorted({b for p in per_gpu_batch for b in (max(1, p // 2), p, 2 * p)})
        steps = measure_training(models, batches, device="cuda", progress=progress)
        alpha = fit_alpha(steps)
        device = f"this machine: loading and {torch.cuda.get_device_name(0)} steps, measured"
    elif cfg.mix == GPU_NODE_NAME:
        w = trace.jobs[0].batch_size / max(node_loading_table(samples)[1], 1e-9)
        alpha = fit_alpha(gpu_node_steps(trace, w))
        device = (f"{GPU_NODE_NAME}: {GPU_NODE.cores} virtual cores on {logical_cores()}, "
                  f"the trainer's copy and launch emulated, W = {w:.3f} s")
    else:
        alpha = tuple(a * cfg.step_scale for a in paper.alpha)
        device = f"this machine's loading, the paper's GPUs × {cfg.step_scale:g} (emulated)"
    profile = dataclasses.replace(
        paper, name="live", cores=logical_cores(), loading_workers=capacity, alpha=alpha,
        gpus=trace.gpus, node_loading=node_loading_table(samples), device=device,
        max_jobs_per_gpu=per_gpu or paper.max_jobs_per_gpu, loading_surface=tuple(surface),
        description="bench live: L(D) and the contention surface measured here; steps "
                    "measured on the GPU, or the paper profile's scaled when emulated")
    path = out / "live-profile.json"
    save_profile(profile, path)
    return path


def run_live_bench(cfg: LiveConfig | None = None, workdir: str | None = None,
                   progress=None) -> dict:
    cfg = cfg or LiveConfig()
    root = Path(workdir or tempfile.mkdtemp(prefix="adloader-live-"))
    data = root / "jpeg"
    cuda = torch.cuda.is_available()
    cfg = for_mix(cfg, cuda)
    capacity = live_capacity(cfg, cuda)
    trace, per_gpu = load_trace(LIVE_TRACES.get(cfg.mix, cfg.trace)), 2
    if cuda:
        trace, per_gpu = fit_to_gpus(trace, torch.cuda.device_count())
    node = cfg.mix == GPU_NODE_NAME
    env_before = {k: os.environ.get(k) for k in (names.STEP_PROFILE, names.CORE_FACTOR,
                                                 names.EMULATED_TRAINER)}
    if node:  # every process of the run (the profile's loaders too) on virtual cores
        trace, per_gpu = fit_to_gpus(trace, GPU_NODE.gpus)
        os.environ[names.CORE_FACTOR] = f"{GPU_NODE.core_factor(logical_cores()):.4f}"
    profile = measured_profile(cfg, data, root, trace, cuda, progress, per_gpu)
    if node:
        w = batch_seconds(load_profile(str(profile)), trace.jobs[0].batch_size)
        os.environ[names.EMULATED_TRAINER] = json.dumps(GPU_NODE.trainer_env(
            sorted({j.model for j in trace.jobs}), w))
    runs = []
    settings = [(True, p) for p in cfg.policies] + [(False, b) for b in cfg.baselines]
    size = dict(iterations_scale=cfg.iterations_scale, step_scale=cfg.step_scale,
                crop=live_crop(cfg, cuda), data=str(data), images=cfg.images)
    try:
        os.environ[names.STEP_PROFILE] = "paper"  # what the jobs emulate
        os.environ[names.GPU_LOCK_DIR] = str(root)
        if cfg.policies:  # one untimed run first: the first daemon, supervisor and master
            # of a bench run start from a cold page cache (2.5 s later here), a cost no later
            # run pays, which would fall on whichever setting comes first
            _daemon_run(cfg, cfg.policies[0], -1, root, profile, trace, capacity, per_gpu,
                        {**size, "iterations_scale": WARM_UP_SCALE})
            if progress:
                progress("warm-up: one short untimed run under the daemon")
        for round_ in range(cfg.rounds):  # alternate the order: drift favours no setting
            order = settings if round_ % 2 == 0 else list(reversed(settings))
            for under_daemon, name in order:
                if under_daemon:
                    result = _daemon_run(cfg, name, round_, root, profile, trace, capacity,
                                         per_gpu, size)
                else:
                    result = nodaemon.run_baseline(
                        trace, name, capacity=capacity, cores=logical_cores(),
                        per_gpu=per_gpu, root=root, env=dict(os.environ),
                        timeout_s=cfg.timeout_s, **size)
                result["round"] = round_
                runs.append(result)
                if progress:
                    progress(f"round {round_ + 1}, {result['policy']}: makespan "
                             f"{result['makespan_s']:.1f} s, Σ "
                             f"{result['aggregate_throughput']:.0f} samples/s")
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    labels = list(cfg.policies) + [f"no daemon: {b}" for b in cfg.baselines]
    summary = summarise_rounds(runs, labels)
    limits = predicted_limits(cfg, profile, trace, capacity)
    floor = measured_floor(cfg, profile, trace, runs, summary)
    simulated = simulated_baselines(cfg, profile, trace, capacity, per_gpu, runs)
    mode = (f"real training on {torch.cuda.device_count()} × {torch.cuda.get_device_name(0)}"
            if cuda else f"GPU steps emulated, the paper's × {cfg.step_scale:g}")
    if cfg.mix != "paper-static":
        mode = f"{cfg.mix}: {mode}"
    return {"config": dataclasses.asdict(cfg), "capacity": capacity, "workdir": str(root),
            "mode": mode, "gpus": trace.gpus, "trace": trace.name,
            "profile": str(profile), "summary": summary, "limits": limits, "floor": floor,
            "simulated_baselines": simulated, "runs": runs}


def _daemon_run(cfg: LiveConfig, policy: str, round_: int, root: Path, profile: Path,
                trace: Trace, capacity: int, per_gpu: int, size: dict) -> dict:
    """The mix once under a real daemon running ``policy``, measured as the baselines are:
    from the moment the replay starts to each job's last batch, rates from the jobs' reports.
    ``POLICY+shares``: each job in a cgroup of its own, weighted by its workers (root);
    ``POLICY+turn``: the same, a job held at one worker while others hold more weighted least
    (``adloader.host.cpu_share``, the rule ``turn``); ``POLICY+order``: the same, weighted in
    a ranking (the rule ``order``: the one a fluid model of strict priority ends best);
    ``POLICY+open``: the daemon's loop open (``--open-loop``: each plan applied, unmeasured)."""
    label, (policy, rule, open_loop) = policy, policy_label.split(policy)
    shares = rule is not None
    state, reports = root / f"state-{label}-{round_}", root / f"reports-{label}-{round_}"
    reports.mkdir(parents=True)
    extra = ["--cpu-shares", f"adloader-live-{os.getpid()}", "--cpu-share-rule", rule] \
        if shares else []
    extra += ["--open-loop"] if open_loop else []
    args = [*extra, "--policy", policy, "--capacity", str(capacity), "--gpus", str(trace.gpus),
            "--jobs-per-gpu", str(per_gpu), "--arrival-window", str(cfg.window_s),
            "--completion-window", str(cfg.window_s), "--heartbeat", str(cfg.heartbeat_s),
            "--profile", str(profile)]
    with nodaemon.RunWatch(str(root)) as watch, DaemonProcess(state, args) as daemon:
        watch.mark()  # the daemon is up: its start-up is not the run's overhead
        t0 = time.time()
        result = replay(trace, daemon.call, timeout_s=cfg.timeout_s, report_dir=str(reports),
                        **size)
        result["model"] = daemon.call("GET", rest.MODEL).json()
        result["policy"] = label
        watch.sample()
    if shares:  # the daemon dropped each ended job's group: the parent goes too
        from adloader.errors import StorageError
        from adloader.host.cpu_share import CpuShares

        with contextlib.suppress(StorageError):  # no groups could be made here
            CpuShares(parent=extra[1]).close()
    own = {j.name: json.loads((reports / f"{j.name}.json").read_text()) for j in trace.jobs}
    fitter = result["model"].get("fitter") or {}  # the worker's start: once a busy period
    measured = nodaemon.summarise([dict(name=n, **r) for n, r in own.items()], t0, watch,
                                  once_cpu_s=fitter.get("startup_cpu_s", 0.0))
    result["daemon_view"] = {k: result[k] for k in ("makespan_s", "mean_jct_s",
                                                    "aggregate_throughput")}
    by_name = {j["name"]: j for j in measured.pop("jobs")}
    for job in result["jobs"]:
        job.update({k: by_name[job["name"]][k] for k in (
            "start_s", "end_s", "jct_s", "rate", "throughput", "elapsed_s", "wait_s",
            "progress")})
    return result | measured


def predicted_limits(cfg: LiveConfig, profile_path: Path, trace: Trace, capacity: int) -> dict:
    """What no schedule of this mix can beat on this node, with its measured profile as the
    truth (a prediction, not a measurement): ``balance`` simulated on the profile, then
    ``experiments.schedule_limits`` against that run."""
    from adloader.bench.sim import experiments
    from adloader.device import synth
    from adloader.sim.simulator import SimConfig, simulate

    profile = load_profile(str(profile_path))
    model = synth.fitted_model(profile, 0)
    scaled = trace.model_copy(update={"jobs": tuple(
        j.model_copy(update={"iterations": max(1, round(j.iterations * cfg.iterations_scale))})
        for j in trace.jobs)})
    config = SimConfig(policy="balance", capacity=capacity, arrival_window_s=cfg.window_s,
                       completion_window_s=cfg.window_s)
    balance = simulate(scaled, profile, model, config).to_json()
    return experiments.schedule_limits(scaled, profile, model, balance, base=config)


def measured_floor(cfg: LiveConfig, profile_path: Path, trace: Trace, runs: list[dict],
                   summary: list[dict]) -> dict:
    """What no schedule of this mix can beat here, as measured (``schedule_oracle.jct_floor``):
    the node's loading at its peak — the most of L(D), of the contention surface's points and
    of any run's own rate in this bench run (``node_rate``: every job's samples over the time
    from its first batch to its last; not the Σ of the jobs' rates, which a run whose jobs
    take turns inflates past anything the node loaded) — and each job's emulated or measured
    GPU steps, from the jobs' first batch (start-up left out: the floor is lower still).
    Against the best fixed setting's and the requested setting's medians."""
    from adloader.device import synth
    from adloader.sim.schedule_oracle import jct_floor, peak_loading
    from adloader.sim.simulator import SimConfig

    profile = load_profile(str(profile_path))
    peak = max([peak_loading(profile), *(r["node_rate"] for r in runs)])
    scaled = trace.model_copy(update={"jobs": tuple(
        j.model_copy(update={"iterations": max(1, round(j.iterations * cfg.iterations_scale))})
        for j in trace.jobs)})
    floor = jct_floor(scaled, profile, synth.fitted_model(profile, 0), SimConfig(), peak)
    medians = {r["policy"]: r for r in summary}
    fixed = [medians[label] for label in FIXED if label in medians]
    if fixed:
        floor["makespan_x_best_fixed"] = floor["makespan"] / min(r["makespan_s"] for r in fixed)
        floor["mean_jct_x_best_fixed"] = floor["mean_jct"] / min(r["mean_jct_s"] for r in fixed)
    if "no daemon: requested" in medians:
        floor["makespan_x_requested"] = floor["makespan"] / medians[
            "no daemon: requested"]["makespan_s"]
    return floor


def simulated_baselines(cfg: LiveConfig, profile_path: Path, trace: Trace, capacity: int,
                        per_gpu: int, runs: list[dict]) -> list[dict]:
    """Each fixed no-daemon setting that ran, simulated on this node's measured profile
    under each CPU-sharing truth (``adloader.sim.cpu_sharing``) and each loading truth — L(D)
    of one pipeline alone shared d/D (truth ``model``), and the contention surface measured
    side by side (truth ``measured``, when the profile has one) — every job's rate held
    against its median live rate: is the simulator's baseline as strong as the real one?"""
    from adloader.device import synth
    from adloader.sim.cpu_sharing import MODES
    from adloader.sim.simulator import SimConfig, simulate
    from adloader.sim.truth import load_truth

    profile = load_profile(str(profile_path))
    truths = ("model", "measured") if profile.loading_surface else ("model",)
    models = {t: synth.fitted_model(profile, 0, load_truth(t, profile)) for t in truths}
    rows = []
    for setting in ("requested", "even", "cores"):
        live = [r for r in runs if r["policy"] == f"no daemon: {setting}"]
        if not live:
            continue
        workers = nodaemon.baseline_workers(trace, setting, capacity, logical_cores())
        gpus = nodaemon.placement(trace, setting, per_gpu)
        scaled = trace.model_copy(update={"jobs": tuple(j.model_copy(update={
            "iterations": max(1, round(j.iterations * cfg.iterations_scale)),
            "workers": workers[j.name], "gpu_ids": list(gpus[j.name])}) for j in trace.jobs)})
        measured = {j.name: statistics.median(next(x["throughput"] for x in r["jobs"]
                                                   if x["name"] == j.name) for r in live)
                    for j in trace.jobs}
        for truth in truths:
            for sharing in MODES:
                config = SimConfig(policy="requested", realloc=False,
                                   capacity=sum(workers.values()), arrival_window_s=0.0,
                                   completion_window_s=0.0, correct=False, cpu_sharing=sharing,
                                   truth=truth)
                out = simulate(scaled, profile, models[truth], config).to_json()
                rate = {j["name"]: j["throughput"] for j in out["jobs"]}
                rows.append({"setting": setting, "cpu_sharing": sharing, "truth": truth,
                             "loading": LOADING[truth], "simulated": rate, "live": measured,
                             "error": {n: rate[n] / measured[n] - 1 for n in measured}})
    return rows


LOADING = {"model": "d/D·L(D)", "measured": "surface"}  # each truth's loading, in a table
WARM_UP_SCALE = 0.01  # the untimed warm-up run: a few iterations a job
