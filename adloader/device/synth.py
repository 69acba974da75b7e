"""Samples drawn from a device profile with measurement noise — what a node would measure.

Used to fit the TPM the simulator schedules with, so that its predictions differ from the
profile's ground truth the way a fitted model differs from a real machine, and the prior TPM
a daemon starts with (``daemon.model.refit``).
"""

from __future__ import annotations

import numpy as np

from adloader.device.device_profile import DeviceProfile
from adloader.models import PAPER_MODELS, features
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

BATCHES = (16, 32, 64, 128)
GPUS = (1, 2, 4)


def training_samples(
    profile: DeviceProfile, seed: int = 0, models=PAPER_MODELS, batches=BATCHES, gpus=GPUS,
    truth=None,
) -> list[TrainingSample]:
    """One timed step per (model, per-GPU batch, GPUs), step × (1 + noise); the steps of
    ``truth`` (``adloader.sim.truth``) when given, else the profile's eq. 6."""
    rng = np.random.default_rng(seed)
    out = []
    for name in models:
        feat = features(name)
        for b in batches:
            for n in gpus:
                if n > profile.gpus:
                    continue
                step = truth.step_time(name, b, n) if truth is not None else \
                    profile.step_time(b, feat.flops_g, feat.params_m, n)
                step *= max(0.5, 1.0 + rng.normal(0.0, profile.step_noise))
                out.append(TrainingSample(b, n, feat.flops_g, feat.params_m, step, name))
    return out


def loading_samples(
    profile: DeviceProfile, seed: int = 0, max_node_workers: int | None = None, truth=None
) -> list[LoadingSample]:
    """λ(d; D) for a job with d of D node workers, for every d ≤ D ≤ 2 × cores (a grid).

    With a truth that replays a contention surface (``truth.surface``), the other D − d
    workers belong to other jobs, as on a node the daemon watches: split as evenly as whole
    workers go over up to K − 1 of them (K the most pipelines the surface measured), and the
    job's rate is the surface's; else λ = d/D · L(D)."""
    rng = np.random.default_rng(seed + 1)
    top = max_node_workers or max(2 * profile.cores, len(profile.node_loading) - 1)
    surface = getattr(truth, "surface", None)
    out = []
    for node in range(1, top + 1):
        for d in sorted({1, max(1, node // 4), max(1, node // 2), node}):
            if surface is None:
                rate = profile.loading_rate(d, node)
            else:
                rate = surface.rates(_beside(d, node, surface.max_pipelines))["job"]
            rate *= max(0.5, 1.0 + rng.normal(0.0, profile.loading_noise))
            out.append(LoadingSample(d, node, rate))
    return out


def _beside(d: int, node: int, pipelines: int) -> dict[str, int]:
    """A job's ``d`` workers and the node's other ``node`` − d split over up to
    ``pipelines`` − 1 other jobs, as evenly as whole workers go."""
    rest = node - d
    others = min(max(pipelines - 1, 1), rest)
    jobs = {"job": d}
    for i in range(others):
        jobs[f"other{i}"] = rest // others + (1 if i < rest % others else 0)
    return jobs


def samples(profile: DeviceProfile, seed: int = 0, truth=None) -> tuple[list, list]:
    return (training_samples(profile, seed, truth=truth),
            loading_samples(profile, seed, truth=truth))


def fitted_model(profile: DeviceProfile, seed: int = 0, truth=None):
    """The TPM a node with this profile would fit from its own noisy samples (of ``truth``'s
    steps and, where it replays a contention surface, its loading, when given:
    ``adloader.sim.truth``)."""
    from adloader.scheduling.model.throughput import ThroughputModel

    training, loading = samples(profile, seed, truth)
    return ThroughputModel.fit(training, loading, seed)
