"""Workload generator: random job mixes with Poisson arrivals, like A-Dloader's (Sec. IV-A).

Jobs arrive as a Poisson process of rate r (exponential inter-arrival times, mean 1/r; the
first job arrives at 0 s). Each job draws a model from a weighted mix, a batch (128 for
ResNets, 64 for VGGs, as in Table III), 1 or 2 GPUs, 2, 4 or 6 requested workers and a
multiple of 100 iterations. The same seed gives the same trace.
"""

from __future__ import annotations

import math

import numpy as np

from adloader.errors import InputError
from adloader.sim.trace import Trace, TraceJob

# Table III's models plus Fig. 3's (Resnet18, smResnet20).
PAPER_MIX = (
    "mdResnet20", "smResnet22", "Resnet32", "VGG13", "mdResnet12",
    "smResnet32", "Resnet28", "smVGG7", "Resnet18", "smResnet20",
)  # fmt: skip
NAMED_MIXES = ("paper", "small", "large")
GPU_CHOICES = (1, 2)
WORKER_CHOICES = (2, 4, 6)


def batch_for(model: str) -> int:
    """The paper's global batch for a model: 64 for VGGs, 128 for ResNets (Table III)."""
    return 64 if "vgg" in model.lower() else 128


def parse_mix(mix: str) -> tuple[tuple[str, ...], np.ndarray]:
    """Models and their probabilities for a named mix or ``Model:weight,Model:weight``."""
    from adloader.models import PAPER_MODELS, parse

    if mix == "paper":
        return PAPER_MIX, np.full(len(PAPER_MIX), 1 / len(PAPER_MIX))
    if mix in ("small", "large"):
        narrow = tuple(m for m in PAPER_MODELS if m.startswith(("sm", "md")))
        wide = tuple(m for m in PAPER_MODELS if not m.startswith(("sm", "md")))
        models = narrow if mix == "small" else wide
        return models, np.full(len(models), 1 / len(models))
    if not mix.strip():
        raise InputError(f"mix must be one of {', '.join(NAMED_MIXES)} or Model:weight,...")
    weights: dict[str, float] = {}
    for item in mix.split(","):
        name, sep, raw = item.strip().partition(":")
        if not name:
            raise InputError(f"mix {mix!r}: empty entry (write Model:weight,Model:weight)")
        try:
            model = parse(name.strip()).name
        except InputError as exc:
            if not sep and "," not in mix:
                names = ", ".join(NAMED_MIXES)
                raise InputError(f"mix {mix!r}: not a named mix ({names}) and {exc}") from None
            raise InputError(f"mix {mix!r}: {exc}") from None
        try:
            weight = float(raw) if sep else 1.0
        except ValueError:
            raise InputError(f"mix {mix!r}: weight of {name} is not a number: {raw!r}") from None
        if not (math.isfinite(weight) and weight > 0):
            raise InputError(f"mix {mix!r}: weight of {name} must be positive, got {raw}")
        weights[model] = weights.get(model, 0.0) + weight
    models = tuple(weights)
    total = sum(weights.values())
    return models, np.array([weights[m] / total for m in models])


def _iteration_choices(iterations: tuple[int, int]) -> np.ndarray:
    try:
        lo, hi = (int(x) for x in iterations)
    except (TypeError, ValueError):
        raise InputError(f"iterations must be a (low, high) pair, got {iterations!r}") from None
    lo = max(lo, 1)
    choices = np.arange(math.ceil(lo / 100) * 100, hi + 1, 100)
    if not len(choices):
        raise InputError(f"iterations ({lo}, {hi}) holds no multiple of 100")
    return choices


def generate(
    jobs: int,
    seed: int,
    mix: str = "paper",
    arrival_rate_per_s: float = 1 / 60,
    node_gpus: int = 4,
    iterations: tuple[int, int] = (500, 1500),
) -> Trace:
    """A trace of ``jobs`` jobs with Poisson arrivals at ``arrival_rate_per_s`` (r, 1/s)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"jobs must be at least 1, got {jobs}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed}")
    if not (math.isfinite(arrival_rate_per_s) and arrival_rate_per_s > 0):
        raise InputError(f"arrival rate must be positive, got {arrival_rate_per_s}")
    if isinstance(node_gpus, bool) or not isinstance(node_gpus, int) or node_gpus < 1:
        raise InputError(f"node gpus must be at least 1, got {node_gpus}")
    models, probs = parse_mix(mix)
    its = _iteration_choices(iterations)
    gpu_choices = np.array([g for g in GPU_CHOICES if g <= node_gpus])

    rng = np.random.default_rng(seed)
    picked = rng.choice(len(models), size=jobs, p=probs)
    gpus = rng.choice(gpu_choices, size=jobs)
    workers = rng.choice(WORKER_CHOICES, size=jobs)
    iters = rng.choice(its, size=jobs)
    gaps = rng.exponential(1 / arrival_rate_per_s, size=jobs - 1)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps)])

    out = [
        TraceJob(
            name=f"app{i + 1}",
            model=models[picked[i]],
            batch_size=batch_for(models[picked[i]]),
            gpus=int(gpus[i]),
            iterations=int(iters[i]),
            workers=int(workers[i]),
            arrival_s=round(float(arrivals[i]), 3),
        )
        for i in range(jobs)
    ]
    return Trace(
        name=f"generated-{mix}-seed{seed}",
        description=(
            f"{jobs} jobs, mix {mix}, Poisson arrivals at {arrival_rate_per_s:.4g}/s, "
            f"iterations {int(its[0])}-{int(its[-1])}, seed {seed}"
        ),
        gpus=node_gpus,
        jobs=tuple(out),
    )
