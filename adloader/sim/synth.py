"""Samples drawn from a device profile with measurement noise — what a node would measure.

Used to fit the TPM the simulator schedules with, so that its predictions differ from the
profile's ground truth the way a fitted model differs from a real machine.
"""

from __future__ import annotations

import numpy as np

from adloader.models import PAPER_MODELS, features
from adloader.scheduling.samples import LoadingSample, TrainingSample
from adloader.sim.device_profile import DeviceProfile

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
    profile: DeviceProfile, seed: int = 0, max_node_workers: int | None = None
) -> list[LoadingSample]:
    """λ(d; D) for a job with d of D node workers, for every d ≤ D ≤ 2 × cores (a grid)."""
    rng = np.random.default_rng(seed + 1)
    top = max_node_workers or max(2 * profile.cores, len(profile.node_loading) - 1)
    out = []
    for node in range(1, top + 1):
        for d in sorted({1, max(1, node // 4), max(1, node // 2), node}):
            rate = profile.loading_rate(d, node)
            rate *= max(0.5, 1.0 + rng.normal(0.0, profile.loading_noise))
            out.append(LoadingSample(d, node, rate))
    return out


def samples(profile: DeviceProfile, seed: int = 0, truth=None) -> tuple[list, list]:
    return training_samples(profile, seed, truth=truth), loading_samples(profile, seed)


def fitted_model(profile: DeviceProfile, seed: int = 0, truth=None):
    """The TPM a node with this profile would fit from its own noisy samples (of ``truth``'s
    steps when given: ``adloader.sim.truth``)."""
    from adloader.scheduling.throughput import ThroughputModel

    training, loading = samples(profile, seed, truth)
    return ThroughputModel.fit(training, loading, seed)
