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
    policies: tuple[str, ...] = ("balance", "waa", "optimal")
    trace: str = "paper-static"
    capacity: int = 0  # 0: 3 × cores emulating GPUs, the cores with CUDA
    iterations_scale: float = 0.2
    rounds: int = 3  # each policy this often, alternating; medians are reported
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
    summary = []
    for policy in cfg.policies:
        mine = [r for r in runs if r["policy"] == policy]
        summary.append({key: statistics.median(r[key] for r in mine) for key in (
            "aggregate_throughput", "makespan_s", "mean_jct_s", "reallocations")}
            | {"policy": policy, "each": [r["aggregate_throughput"] for r in mine]})
    ref = next((r for r in summary if r["policy"] == "balance"), summary[0])
    base = {r["round"]: r["aggregate_throughput"] for r in runs if r["policy"] == ref["policy"]}
    for r in summary:
        r["ratio"] = r["aggregate_throughput"] / ref["aggregate_throughput"]
        r["makespan_ratio"] = r["makespan_s"] / ref["makespan_s"]
        paired = [x["aggregate_throughput"] / base[x["round"]] for x in runs
                  if x["policy"] == r["policy"]]  # against balance in the same round
        r["round_ratios"] = paired
        r["paired_ratio"] = statistics.median(paired)
    mode = (f"real training on {torch.cuda.device_count()} × {torch.cuda.get_device_name(0)}"
            if cuda else f"GPU steps emulated, the paper's × {cfg.step_scale:g}")
    return {"config": dataclasses.asdict(cfg), "capacity": capacity, "workdir": str(root),
            "mode": mode, "gpus": trace.gpus,
            "profile": str(profile), "summary": summary, "runs": runs}
