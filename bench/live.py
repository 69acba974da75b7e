"""`adloader bench live`: the paper's static mix as real jobs on this machine, per policy.

One run: measure this machine's loading curve L(D) with a real DataLoader over the same
JPEGs the jobs read; build the node's prior profile from it (loading: measured; steps: the
paper's GPUs, scaled, since the jobs emulate them); then, for each policy, start a real
daemon, replay the mix through REST, and collect what happened. Ratios are against
``balance`` measured in the same run.

With CUDA the jobs train for real (``workloads/train.py``): the prior's step times are then
measured on the GPU (eq. 6's α fitted from the mix's models), the mix is fitted onto the
GPUs there are (each job on at most all of them, as many jobs a GPU as it takes to start
them together), and the workers default to the logical cores.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
from pathlib import Path

import torch

from adloader.daemon.process import DaemonProcess
from adloader.sim.device_profile import load_profile, save_profile
from adloader.sim.trace import Trace, fit_to_gpus, load_trace
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
    policies: tuple[str, ...] = ("balance", "waa", "optimal", "fair", "jct", "ftf")
    trace: str = "paper-static"
    capacity: int = 0  # 0: 3 × cores emulating GPUs, the cores with CUDA
    iterations_scale: float = 0.2
    rounds: int = 4  # each policy this often, alternating; medians and spreads are reported
    step_scale: float = 1.2  # Resnet18's μ ≈ L(C)/1.8 here, as on the paper's testbed
    crop: int = 0  # 0: 224 (the paper's) with CUDA, 112 with emulated steps
    images: int = 128
    window_s: float = 2.0
    heartbeat_s: float = 0.5
    timeout_s: float = 900.0


def live_capacity(cfg: LiveConfig, cuda: bool) -> int:
    return cfg.capacity or (logical_cores() if cuda else 3 * logical_cores())


def live_crop(cfg: LiveConfig, cuda: bool) -> int:
    return cfg.crop or (224 if cuda else 112)


def measured_profile(cfg: LiveConfig, data: Path, out: Path, trace: Trace, cuda: bool,
                     progress=None) -> Path:
    """The node's prior: L(D) measured here for D = 1..C; steps measured on the GPU, or
    the paper's × step_scale when the jobs emulate them."""
    capacity = live_capacity(cfg, cuda)
    ensure_images(data, cfg.images)
    dataset = SyntheticJPEGDataset(data, size=100_000, images=cfg.images,
                                   crop=live_crop(cfg, cuda))
    samples = measure_loading(dataset, list(range(1, capacity + 1)), batch_size=32, batches=12,
                              rounds=3, progress=progress)
    paper = load_profile("paper")
    if cuda:
        models = sorted({job.model for job in trace.jobs})
        per_gpu = sorted({max(1, job.batch_size // job.gpus) for job in trace.jobs})
        batches = sorted({b for p in per_gpu for b in (max(1, p // 2), p, 2 * p)})
        steps = measure_training(models, batches, device="cuda", progress=progress)
        alpha = fit_alpha(steps)
        device = f"this machine: loading and {torch.cuda.get_device_name(0)} steps, measured"
    else:
        alpha = tuple(a * cfg.step_scale for a in paper.alpha)
        device = f"this machine's loading, the paper's GPUs × {cfg.step_scale:g} (emulated)"
    profile = dataclasses.replace(
        paper, name="live", cores=logical_cores(), loading_workers=capacity, alpha=alpha,
        gpus=trace.gpus, node_loading=node_loading_table(samples), device=device,
        description="bench live: L(D) measured here; steps measured on the GPU, or the "
                    "paper profile's scaled when emulated")
    path = out / "live-profile.json"
    save_profile(profile, path)
    return path


def run_live_bench(cfg: LiveConfig | None = None, workdir: str | None = None,
                   progress=None) -> dict:
    cfg = cfg or LiveConfig()
    root = Path(workdir or tempfile.mkdtemp(prefix="adloader-live-"))
    data = root / "jpeg"
    cuda = torch.cuda.is_available()
    capacity = live_capacity(cfg, cuda)
    trace, per_gpu = load_trace(cfg.trace), 2
    if cuda:
        trace, per_gpu = fit_to_gpus(trace, torch.cuda.device_count())
    profile = measured_profile(cfg, data, root, trace, cuda, progress)
    runs = []
    env_before = os.environ.get("ADLOADER_STEP_PROFILE")
    try:
        os.environ["ADLOADER_STEP_PROFILE"] = "paper"  # what the jobs emulate
        os.environ["ADLOADER_GPU_LOCK_DIR"] = str(root)
        for round_ in range(cfg.rounds):  # alternate the order: drift favours no policy
            order = cfg.policies if round_ % 2 == 0 else tuple(reversed(cfg.policies))
            for policy in order:
                state = root / f"state-{policy}-{round_}"
                args = ["--policy", policy, "--capacity", str(capacity), "--gpus",
                        str(trace.gpus), "--jobs-per-gpu", str(per_gpu),
                        "--arrival-window", str(cfg.window_s), "--completion-window",
                        str(cfg.window_s), "--heartbeat", str(cfg.heartbeat_s), "--profile",
                        str(profile)]
                with DaemonProcess(state, args) as daemon:
                    result = replay(trace, daemon.call, iterations_scale=cfg.iterations_scale,
                                    step_scale=cfg.step_scale, crop=live_crop(cfg, cuda),
                                    data=str(data),
                                    images=cfg.images, timeout_s=cfg.timeout_s)
                    result["model"] = daemon.call("GET", "/v1/model").json()
                result["round"] = round_
                runs.append(result)
                if progress:
                    progress(f"round {round_ + 1}, {policy}: Σ "
                             f"{result['aggregate_throughput']:.0f} samples/s")
    finally:
        if env_before is None:
            os.environ.pop("ADLOADER_STEP_PROFILE", None)
        else:
            os.environ["ADLOADER_STEP_PROFILE"] = env_before
    summary = summarise_rounds(runs, cfg.policies)
    limits = predicted_limits(cfg, profile, trace, capacity)
    mode = (f"real training on {torch.cuda.device_count()} × {torch.cuda.get_device_name(0)}"
            if cuda else f"GPU steps emulated, the paper's × {cfg.step_scale:g}")
    return {"config": dataclasses.asdict(cfg), "capacity": capacity, "workdir": str(root),
            "mode": mode, "gpus": trace.gpus,
            "profile": str(profile), "summary": summary, "limits": limits, "runs": runs}


def predicted_limits(cfg: LiveConfig, profile_path: Path, trace: Trace, capacity: int) -> dict:
    """What no schedule of this mix can beat on this node, with its measured profile as the
    truth (a prediction, not a measurement): ``balance`` simulated on the profile, then
    ``experiments.schedule_limits`` against that run."""
    from adloader.sim import experiments, synth
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


TARGETS = {"paired_ratio": (">=", 1.30), "makespan_paired": ("<=", 0.90),
           "jct_paired": ("<=", 0.85), "worst_job": (">=", 0.95)}  # issue "Fair and fast"


def summarise_rounds(runs: list[dict], policies) -> list[dict]:
    """Per policy: medians over rounds, and each ratio paired with balance's run of the same
    round (drift between rounds cancels): Σ T, makespan, mean JCT, every job's rate, the
    worst job's; with the spread (min–max over rounds) and which targets the medians meet."""
    ref = "balance" if "balance" in policies else policies[0]
    base = {r["round"]: r for r in runs if r["policy"] == ref}
    summary = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        row = {key: statistics.median(r[key] for r in mine) for key in (
            "aggregate_throughput", "makespan_s", "mean_jct_s", "reallocations")}
        row |= {"policy": policy, "each": [r["aggregate_throughput"] for r in mine]}
        paired: dict[str, list[float]] = {"sum": [], "makespan": [], "jct": [], "worst": []}
        per_job: dict[str, list[float]] = {}
        for r in mine:
            b = base[r["round"]]
            paired["sum"].append(r["aggregate_throughput"] / b["aggregate_throughput"])
            paired["makespan"].append(r["makespan_s"] / b["makespan_s"])
            paired["jct"].append(r["mean_jct_s"] / b["mean_jct_s"])
            rate = {j["name"]: j["throughput"] for j in b["jobs"]}
            ratios = {j["name"]: j["throughput"] / rate[j["name"]] for j in r["jobs"]
                      if rate.get(j["name"])}
            for name, x in ratios.items():
                per_job.setdefault(name, []).append(x)
            paired["worst"].append(min(ratios.values()) if ratios else float("nan"))
        row |= {"round_ratios": paired["sum"], "paired_ratio": statistics.median(paired["sum"]),
                "spread": [min(paired["sum"]), max(paired["sum"])],
                "makespan_paired": statistics.median(paired["makespan"]),
                "jct_paired": statistics.median(paired["jct"]),
                "worst_job": statistics.median(paired["worst"]),
                "jobs": {n: statistics.median(x) for n, x in sorted(per_job.items())}}
        row["ratio"] = row["aggregate_throughput"] / statistics.median(
            b["aggregate_throughput"] for b in base.values())
        row["met"] = [k for k, (op, v) in TARGETS.items()
                      if (row[k] >= v if op == ">=" else row[k] <= v)]
        summary.append(row)
    return summary

