"""The ground truth a simulated node runs on: how long a job's step takes on its GPUs, and what
sharing a GPU costs. The TPM the simulated daemon decides with is fitted from noisy samples of
the truth (``adloader.device.synth``); the simulator runs time on the truth itself.

- ``model`` (the ablation): the device profile's own eq. 6 and perfect time-slicing
  (``scheduling.policies.gpushare``) — the forms the TPM regresses on, so it fits them exactly.
- ``published``: step times from published measurements of the profile's GPU, interpolated
  over batch (``truths/published-steps.json``, every figure cited by its line in
  ``docs/sources/gpu-measurements.md``), and co-location slowed by the published pair
  throughputs (``adloader.sim.colocation``). The TPM cannot fit it exactly.
- ``measured``: loading as measured on the node, k pipelines side by side — the profile's
  contention surface (``loading_surface``, ``adloader profile --contention``), read by
  ``adloader.device.loading_surface``; steps and GPU sharing as ``model`` (the profile's eq. 6,
  which is what a node that emulates its GPUs runs). It needs a profile with a surface.
- ``gpu-node``: ``model``'s steps and loading, and each job's intake ceiling as measured on
  a GPU node (``adloader.sim.gpu_node``): its training loop takes in at most L(1) ÷ r
  samples/s, r its time outside ``next()`` a batch against one worker's decode time for one
  (the H100 node's, under the even split: 0.13–0.17). The TPM does not know it; a daemon
  measures it from heartbeats.

Loading is the profile's L(D), λ = d/D · L(D), under ``model`` and ``published`` (whether or not
the profile carries a surface: a truth is chosen by name, never by what the file holds); a
truth's ``surface`` is the loading it replays instead, None for those two. Each truth names the
file it is read from and its sha256, which every simulated bench prints.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from adloader.device.device_profile import DeviceProfile
from adloader.device.loading_surface import LoadingSurface
from adloader.errors import InputError
from adloader.models import features
from adloader.sim.colocation import Colocation

TRUTHS = ("model", "published", "measured", "gpu-node")
DEFAULT_TRUTH = "model"
PUBLISHED_FILE = "published-steps.json"


def check_truth(name: str) -> str:
    if name not in TRUTHS:
        raise InputError(f"truth {name!r}: unknown; choose one of {', '.join(TRUTHS)}")
    return name


@lru_cache(maxsize=4)
def _bundled(name: str) -> bytes:
    return resources.files("adloader.sim").joinpath("truths", name).read_bytes()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ProfileSteps:
    """Steps from the profile's own eq. 6 (the truths that keep the TPM's step form)."""

    @property
    def file_sha256(self) -> str:
        return str(self.profile.extra.get("sha256", ""))

    def step_time(self, model: str, batch_size: float, gpus: int) -> float:
        """Step seconds of ``model`` at per-GPU batch ``batch_size`` on ``gpus`` GPUs."""
        feat = features(model)
        return self.profile.step_time(batch_size, feat.flops_g, feat.params_m, gpus)


@dataclass(frozen=True)
class ModelTruth(ProfileSteps):
    """Eq. 6 of the profile, perfect time-slicing: the TPM's own forms (the ablation)."""

    profile: DeviceProfile
    name: str = "model"
    colocation: Colocation | None = None
    surface = None  # loading: the profile's d/D · L(D)

    @property
    def source(self) -> str:
        return f"profile {self.profile.name!r} (eq. 6 and L(D)), perfect GPU time-slicing"


class PublishedSteps:
    """Step times from the published figures of ``published-steps.json`` (its ``step_time``
    section says the form: an anchor per published model, a measured batch curve
    interpolated piecewise-linearly in log2(batch), time per image scaled by FLOPs)."""

    def __init__(self, data: dict):
        steps = data["step_time"]
        self.anchors = steps["anchors"]
        curve = steps["batch_curve"]
        self.log_batch = np.log2([c["batch"] for c in curve])
        self.rates = np.array([c["images_per_s"] for c in curve], float)
        self.ms_per_mparam = float(steps["communication"]["ms_per_mparam"])

    def relative_rate(self, batch: float) -> float:
        """Images/s of the batch curve at ``batch`` (flat outside its published batches)."""
        return float(np.interp(math.log2(max(batch, 1e-9)), self.log_batch, self.rates))

    def anchor(self, model: str, flops_g: float) -> dict:
        """The published model nearest to ``model`` in FLOPs within its family."""
        vgg = "vgg" in model.lower()
        same = [a for a in self.anchors if ("VGG" in a["model"]) == vgg] or self.anchors
        return min(same, key=lambda a: abs(math.log(flops_g / a["flops_g"])))

    def step_time(self, model: str, batch_size: float, gpus: int) -> float:
        feat = features(model)
        a = self.anchor(model, feat.flops_g)
        ms_img = (a["ms_per_image"] * self.relative_rate(a["batch"])
                  / self.relative_rate(batch_size) * feat.flops_g / a["flops_g"])
        comm_ms = self.ms_per_mparam * feat.params_m * 2 * (gpus - 1) / gpus
        return (batch_size * ms_img + comm_ms) / 1000.0


@dataclass(frozen=True)
class PublishedTruth:
    """Published step times and co-location (``published-steps.json``)."""

    steps: PublishedSteps
    colocation: Colocation
    file_sha256: str
    gpu: str
    name: str = "published"
    surface = None  # loading: the profile's d/D · L(D)

    @property
    def source(self) -> str:
        return f"adloader/sim/truths/{PUBLISHED_FILE} ({self.gpu}; published measurements)"

    def step_time(self, model: str, batch_size: float, gpus: int) -> float:
        return self.steps.step_time(model, batch_size, gpus)


@dataclass(frozen=True)
class GpuNodeTruth(ModelTruth):
    """``model``'s steps and loading, each job capped at its intake ceiling."""

    name: str = "gpu-node"

    @property
    def source(self) -> str:
        return (f"{super().source}; intake ceilings L(1) ÷ r, r the H100 node's time outside "
                f"next() a batch against a worker's decode time for one "
                f"(adloader/sim/gpu_node.py)")

    def intake(self, model: str) -> float:
        """C_j, samples/s: what ``model``'s training loop takes in at most."""
        from adloader.sim.gpu_node import intake_ratio

        return self.profile.node_loading_rate(1) / intake_ratio(model)


@dataclass(frozen=True)
class MeasuredTruth(ProfileSteps):
    """Loading from the profile's contention surface; steps the profile's eq. 6, perfect
    time-slicing (as ``model``)."""

    profile: DeviceProfile
    surface: LoadingSurface
    name: str = "measured"
    colocation: Colocation | None = None

    @property
    def source(self) -> str:
        ks = sorted({len(p.workers) for p in self.profile.loading_surface})
        return (f"profile {self.profile.name!r}: loading surface measured side by side "
                f"({len(self.profile.loading_surface)} points, k = {', '.join(map(str, ks))} "
                f"pipelines), eq. 6 steps, perfect GPU time-slicing")


def measured_truth(profile: DeviceProfile) -> MeasuredTruth:
    if not profile.loading_surface:
        raise InputError(f"truth 'measured': profile {profile.name!r} has no loading surface "
                         f"(measure one with `adloader profile --contention`)")
    return MeasuredTruth(profile, LoadingSurface(profile.loading_surface,
                                                 profile.node_loading_rate))


@lru_cache(maxsize=2)
def published_truth(file: str = PUBLISHED_FILE) -> PublishedTruth:
    raw = _bundled(file)
    data = json.loads(raw)
    return PublishedTruth(PublishedSteps(data), Colocation.from_json(data["colocation"]),
                          sha256(raw), data["gpu"])


def load_truth(name: str, profile: DeviceProfile):
    """The truth named ``name`` (one of ``TRUTHS``) for a node with ``profile``."""
    if check_truth(name) == "model":
        return ModelTruth(profile)
    if name == "measured":
        return measured_truth(profile)
    if name == "gpu-node":
        return GpuNodeTruth(profile)
    return published_truth()


def tpm_error(truth, model, jobs) -> dict:
    """Relative error of the TPM's step time against the truth's over ``jobs``
    ((model name, global batch, GPUs) each): median, max and the job of the max."""
    errors = []
    for name, batch, gpus in jobs:
        feat = features(name)
        real = truth.step_time(name, batch / gpus, gpus)
        predicted = float(model.training.step_time(batch / gpus, feat.flops_g, feat.params_m,
                                                   gpus))
        errors.append((abs(predicted / real - 1.0), f"{name}×{batch}/{gpus}"))
    worst = max(errors)
    return {"median": float(np.median([e for e, _ in errors])), "max": worst[0],
            "worst_job": worst[1], "jobs": len(errors)}


def profile_sha256(name_or_path: str) -> str:
    """sha256 of the profile file ``load_profile(name_or_path)`` reads."""
    from adloader.device.device_profile import profile_bytes

    return sha256(profile_bytes(name_or_path)[0])
