"""Measure this machine's throughput samples and turn them into a DeviceProfile.

Loading samples time a real torch DataLoader over real JPEG files with d workers
(λ in samples/s, Fig. 5); training samples time forward + backward + SGD steps of the
zoo's models (eq. 6's step time 1/μ). ``profile_from_samples`` fits eq. 6's α and
tabulates L(D), the ground truth ``adloader sim --profile`` runs on.
"""

from __future__ import annotations

import platform
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls
from torch.utils.data import DataLoader, Dataset

from adloader.device.device_profile import DeviceProfile
from adloader.device.loading_surface import SurfacePoint
from adloader.errors import InputError
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

CPU_MODELS = ("smResnet20", "mdResnet12", "smVGG7", "smResnet32")
CPU_BATCHES = (4, 8, 16)
CUDA_MODELS = (
    "smResnet20", "mdResnet12", "smVGG7", "smResnet32", "Resnet18", "Resnet34", "VGG13", "VGG16",
)
CUDA_BATCHES = (32, 64, 128, 256)
INPUT_SIZE = 224

Progress = Callable[[str], None]


def logical_cores() -> int:
    """The cores this process may run on (``adloader.host.cores``: the same count as the
    daemon's, a cpuset or taskset honoured)."""
    from adloader.host.cores import node_cores

    return node_cores()


def default_workers(cores: int | None = None) -> list[int]:
    """d = 1 .. 2·cores: past the cores to see the contention and saturation stages."""
    return list(range(1, 2 * (cores or logical_cores()) + 1))


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def default_training(device: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Models and per-GPU batch sizes timed by default: small ones when the CPU stands in."""
    if device.startswith("cuda"):
        return CUDA_MODELS, CUDA_BATCHES
    return CPU_MODELS, CPU_BATCHES


def measure_loading(
    dataset: Dataset,
    workers_list: Sequence[int] | None = None,
    batch_size: int = 32,
    batches: int = 20,
    multiprocessing_context: str = "fork",
    warmup: int | None = None,
    rounds: int = 1,
    every_round: bool = False,
    progress: Progress | None = None,
    device: str | None = None,
) -> list[LoadingSample]:
    """λ(d) in samples/s for each d: the job owns all the node's workers (d = D).

    The first ``warmup`` batches (default d: each worker's first, which includes starting
    the pool) are not timed. Workers return batches in turn, so the timed ``batches`` are
    rounded up to a multiple of d: every worker contributes the same number of batches.
    With ``rounds`` > 1 the sweep over d is repeated and each d keeps its median, so a
    burst of load from elsewhere on the node spoils one round, not one d. With ``device``
    the consumer copies each batch there (and waits for the copy), as a trainer does.
    """
    workers_list = list(workers_list) if workers_list is not None else default_workers()
    if not workers_list or min(workers_list) < 1:
        raise InputError(f"workers: each worker count must be at least 1, got {workers_list}")
    if min(batch_size, batches, rounds) < 1:
        raise InputError(
            f"batch size, batches and rounds must be at least 1, got {batch_size}, {batches}, "
            f"{rounds}"
        )
    plan = []
    for d in workers_list:
        skip = d if warmup is None else warmup
        timed = -(-batches // d) * d
        needed = (skip + timed) * batch_size
        if len(dataset) < needed:
            raise InputError(f"dataset has {len(dataset)} samples, d={d} needs {needed}")
        plan.append((d, skip, timed))
    rates: dict[int, list[float]] = {d: [] for d in workers_list}
    for r in range(rounds):
        for d, skip, timed in plan:
            rate = _loading_rate(dataset, d, batch_size, skip, timed, multiprocessing_context,
                                 device)
            rates[d].append(rate)
            if progress:
                progress(f"loading d={d} (round {r + 1}/{rounds}): {rate:.1f} samples/s")
    if every_round:  # every measurement, for fitting F_λ
        return [LoadingSample(d, d, rate) for d in workers_list for rate in rates[d]]
    return [LoadingSample(d, d, statistics.median(rates[d])) for d in workers_list]


def median_loading(samples: list[LoadingSample]) -> list[LoadingSample]:
    """One sample per (d, D): the median of the repeated measurements."""
    groups: dict[tuple[int, int], list[float]] = {}
    for s in samples:
        groups.setdefault((s.job_workers, s.node_workers), []).append(s.loading_rate)
    return [LoadingSample(d, n, statistics.median(v)) for (d, n), v in sorted(groups.items())]


def _loading_rate(
    dataset: Dataset, workers: int, batch_size: int, skip: int, timed: int, context: str,
    device: str | None = None,
) -> float:
    with warnings.catch_warnings():  # more workers than cores is the point of the sweep
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        loader = DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            num_workers=workers,
            persistent_workers=False,
            prefetch_factor=2,
            multiprocessing_context=context,
            drop_last=True,
        )
        it = iter(loader)
    try:
        for _ in range(skip):
            next(it)
        start = time.perf_counter()
        count = 0
        for _ in range(timed):
            batch = next(it)
            if device is not None:
                _to_device(batch, device)
            count += len(batch[1])
        elapsed = time.perf_counter() - start
    finally:
        del it  # the iterator's finaliser stops its worker pool now
    return count / elapsed


def _to_device(batch, device: str) -> None:
    """Copy a batch's tensors to ``device`` from pageable memory and wait for the copy."""
    for t in batch:
        if isinstance(t, torch.Tensor):
            t.to(device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _train_step_seconds(
    model: torch.nn.Module, batch_size: int, device: str, steps: int, warmup: int
) -> float:
    """Median wall time of forward + backward + SGD step on a random 224x224 batch."""
    cuda = device.startswith("cuda")
    x = torch.randn(batch_size, 3, INPUT_SIZE, INPUT_SIZE, device=device)
    y = torch.randint(0, 1000, (batch_size,), device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for i in range(warmup + steps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    optimizer.zero_grad(set_to_none=True)
    return statistics.median(times)


def measure_training(
    models: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | None = None,
    steps: int = 5,
    device: str | None = None,
    warmup: int = 2,
    progress: Progress | None = None,
) -> list[TrainingSample]:
    """Median seconds of forward + backward + SGD step (1/μ, eq. 6) per model and batch b.

    Input is random at 224x224, one device (gpus = 1). A batch size that does not fit in
    GPU memory is skipped.
    """
    from adloader import models as zoo

    device = device or default_device()
    default_models, default_batches = default_training(device)
    models = list(models or default_models)
    batch_sizes = list(batch_sizes or default_batches)
    if steps < 1 or warmup < 0 or min(batch_sizes) < 1:
        raise InputError("steps and batch sizes must be at least 1, warm-up at least 0")
    cuda = device.startswith("cuda")
    samples = []
    for name in models:
        feats = zoo.features(name)
        model = zoo.build(name, num_classes=1000).to(device).train()
        for b in batch_sizes:
            try:
                step_s = _train_step_seconds(model, b, device, steps, warmup)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
                if progress:
                    progress(f"training {name} b={b}: out of GPU memory, skipped")
                continue
            samples.append(
                TrainingSample(b, 1, float(feats.flops_g), float(feats.params_m), step_s, name)
            )
            if progress:
                progress(f"training {name} b={b}: {step_s * 1000:.1f} ms/step")
        del model
        if cuda:
            torch.cuda.empty_cache()
    return samples


def node_loading_table(loading: Sequence[LoadingSample]) -> tuple[float, ...]:
    """L(D) for D = 0..max D measured: L = λ·D/d, each D's median over its rounds; gaps
    interpolated.

    A count is credited with more than the best smaller count only where its gain exceeds
    the noise of the two (half the range of each one's rounds, summed); within it, it is
    held at that count's level. A plan predicts from this table, and a worker whose gain the
    measurement cannot show buys nothing sure and costs memory and CPU switches (a gain
    within the rounds' spread would have a plan run more workers where fewer train faster:
    docs/benchmarks.md, "A job's start without pydantic"). A count clearly below the best
    keeps its own median: contention past the cores is real. One round a count: the medians
    as measured."""
    by_d: dict[int, list[float]] = {}
    for s in loading:
        by_d.setdefault(s.node_workers, []).append(s.loading_rate * s.node_workers / s.job_workers)
    known = sorted(by_d)
    levels, best, best_noise = [], 0.0, 0.0
    for d in known:
        rates = by_d[d]
        median, noise = statistics.median(rates), (max(rates) - min(rates)) / 2
        if median > best + best_noise + noise:
            best, best_noise = median, noise
            levels.append(median)
        else:
            levels.append(best if median >= best - best_noise - noise else median)
    return tuple(float(v) for v in np.interp(np.arange(known[-1] + 1), [0, *known],
                                             [0.0, *levels]))


def fit_alpha(training: Sequence[TrainingSample]) -> tuple[float, float, float, float, float]:
    """α ≥ 0 of eq. 6 by non-negative least squares on relative error.

    Features (b·f, M·n, b·M, M, 1); rows are divided by the step time so a 5 ms step
    counts as much as a 500 ms one, and columns are scaled to unit norm before solving.
    """
    x = np.array(
        [[s.batch_size * s.flops_g, s.params_m * s.gpus, s.batch_size * s.params_m, s.params_m, 1.0]
         for s in training],
        dtype=float,
    )
    y = np.array([s.step_s for s in training], dtype=float)
    x_rel = x / y[:, None]
    norms = np.linalg.norm(x_rel, axis=0)
    norms[norms == 0] = 1.0
    coef, _ = nnls(x_rel / norms, np.ones_like(y))
    return tuple(float(c) for c in coef / norms)


def device_text() -> str:
    """The CPU's model name and logical cores, and the GPUs if any."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    text = f"{cpu} ({logical_cores()} logical cores)"
    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        text += "; " + ", ".join(names)
    else:
        text += "; no GPU"
    return text


def profile_from_samples(
    name: str,
    training: Sequence[TrainingSample],
    loading: Sequence[LoadingSample],
    cores: int | None = None,
    gpus: int | None = None,
    device: str | None = None,
    extra: dict | None = None,
    training_device: str | None = None,
    surface: Sequence[SurfacePoint] = (),
) -> DeviceProfile:
    """A DeviceProfile measured on this machine: α fitted (eq. 6), L(D) as measured (Fig. 5),
    and the contention surface when one was measured (``workloads.contention``)."""
    if not training:
        raise InputError(f"profile {name!r}: no training samples to fit the step time from")
    if not loading:
        raise InputError(f"profile {name!r}: no loading samples to tabulate L(D) from")
    cores = cores or logical_cores()
    if gpus is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 1
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    on = training_device or default_device()
    on = "the GPU" if on.startswith("cuda") else "the CPU standing in for a GPU"
    side = (f"; {len(surface)} points of up to {max(len(p.workers) for p in surface)} "
            f"pipelines side by side") if surface else ""
    return DeviceProfile(
        name=name,
        cores=cores,
        loading_workers=cores,
        gpus=max(1, gpus),
        alpha=fit_alpha(training),
        node_loading=node_loading_table(loading),
        device=device if device is not None else device_text(),
        description=(
            f"measured by `adloader profile` on {when}: L(D) from a torch DataLoader over JPEG "
            f"files, step times on {on} ({len(training)} training, {len(loading)} loading samples"
            f"{side})"
        ),
        extra=dict(extra or {}),
        loading_surface=tuple(surface),
    )
