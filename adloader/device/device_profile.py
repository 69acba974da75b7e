"""Device profiles: the ground truth a simulated node runs on, apart from the fitted TPM, and
what the daemon's prior TPM is fitted from before its own heartbeats (``synth``).

A profile says how long a step takes (eq. 6's form with its own α, f in GFLOPs forward
per sample, M in millions of parameters) and how fast the node loads samples with D
workers in all, L(D) (Fig. 5). A job with d of those workers loads λ = d/D · L(D).
The bundled ``paper`` profile (``profiles/``) is calibrated from A-Dloader's testbed;
``adloader profile`` writes one measured on the machine it runs on, with ``--contention``
also the contention surface (``loading_surface``: k pipelines side by side, each one's rate;
``adloader.device.loading_surface``), which the ``measured`` truth replays. A profile without
it loads as before.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from adloader.device.loading_surface import SurfacePoint, points_from_json
from adloader.errors import InputError


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    cores: int
    loading_workers: int
    gpus: int
    alpha: tuple[float, float, float, float, float]
    node_loading: tuple[float, ...]  # L(D) samples/s for D = 0, 1, ...; flat past the end
    step_noise: float = 0.03
    loading_noise: float = 0.02
    max_jobs_per_gpu: int = 2
    device: str = ""
    description: str = ""
    extra: dict = field(default_factory=dict)
    loading_surface: tuple[SurfacePoint, ...] = ()  # measured side by side; () when not

    def step_time(self, batch_size: float, flops_g: float, params_m: float, gpus: int) -> float:
        """Step seconds for per-GPU batch b: α0·b·f + α1·M·n + α2·b·M + α3·M + α4 (eq. 6)."""
        a0, a1, a2, a3, a4 = self.alpha
        b, f, m, n = batch_size, flops_g, params_m, gpus
        return a0 * b * f + a1 * m * n + a2 * b * m + a3 * m + a4

    def node_loading_rate(self, node_workers: float) -> float:
        """L(D): samples/s the node loads with D workers in all (flat past the table)."""
        table = self.node_loading
        return float(np.interp(node_workers, np.arange(len(table)), table))

    def loading_rate(self, job_workers: float, node_workers: float) -> float:
        """λ(d; D) = d/D · L(D) samples/s for a job with d of the node's D workers."""
        if job_workers <= 0 or node_workers <= 0:
            return 0.0
        return job_workers / node_workers * self.node_loading_rate(node_workers)

    def to_json(self) -> dict:
        data = asdict(self)
        data["alpha"] = list(self.alpha)
        data["node_loading"] = [round(x, 4) for x in self.node_loading]
        if self.loading_surface:
            data["loading_surface"] = [p.to_json() for p in self.loading_surface]
        else:  # a profile without a surface writes the file it always did
            data.pop("loading_surface")
        return data


def staged_loading(
    per_worker: float,
    contention_from: int,
    contention_per_worker: float,
    saturation_at: int,
    up_to: int,
) -> tuple[float, ...]:
    """L(D) with three stages: contention-free, contention, saturation (Fig. 5)."""
    out = []
    for d in range(up_to + 1):
        free = min(d, contention_from)
        contended = max(0, min(d, saturation_at) - contention_from)
        out.append(per_worker * free + contention_per_worker * contended)
    return tuple(out)


def _from_dict(data: dict, origin: str) -> DeviceProfile:
    surface = points_from_json(data.get("loading_surface", []), origin)  # its own errors
    try:
        loading = data["node_loading"]
        if isinstance(loading, dict):
            loading = staged_loading(**loading)
        profile = DeviceProfile(
            name=str(data["name"]),
            cores=int(data["cores"]),
            loading_workers=int(data["loading_workers"]),
            gpus=int(data["gpus"]),
            alpha=tuple(float(a) for a in data["alpha"]),
            node_loading=tuple(float(x) for x in loading),
            step_noise=float(data.get("step_noise", 0.03)),
            loading_noise=float(data.get("loading_noise", 0.02)),
            max_jobs_per_gpu=int(data.get("max_jobs_per_gpu", 2)),
            device=str(data.get("device", "")),
            description=str(data.get("description", "")),
            extra=dict(data.get("extra", {})),
            loading_surface=surface,
        )
    except KeyError as exc:
        raise InputError(f"{origin}: profile field {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{origin}: profile is malformed: {exc}") from None
    if len(profile.alpha) != 5:
        raise InputError(f"{origin}: profile field 'alpha' needs 5 coefficients")
    if min(profile.cores, profile.loading_workers, profile.gpus) < 1:
        raise InputError(f"{origin}: cores, loading_workers and gpus must be at least 1")
    if len(profile.node_loading) < 2 or any(x < 0 for x in profile.node_loading):
        raise InputError(f"{origin}: profile field 'node_loading' needs non-negative rates")
    return profile


def bundled_profiles() -> list[str]:
    return sorted(
        p.name.removesuffix(".json")
        for p in resources.files("adloader.device").joinpath("profiles").iterdir()
        if p.name.endswith(".json")
    )


def profile_bytes(name_or_path: str) -> tuple[bytes, str]:
    """The file of a bundled profile by name (``paper``) or of a profile JSON by path, and
    where it came from."""
    if name_or_path in bundled_profiles():
        ref = resources.files("adloader.device").joinpath("profiles", name_or_path + ".json")
        return ref.read_bytes(), name_or_path
    path = Path(name_or_path)
    if not path.exists():
        names = ", ".join(bundled_profiles())
        raise InputError(f"profile {name_or_path!r}: no such file or bundled profile ({names})")
    return path.read_bytes(), str(path)


def load_profile(name_or_path: str) -> DeviceProfile:
    """A bundled profile by name (``paper``) or a profile JSON file by path."""
    raw, origin = profile_bytes(name_or_path)
    text = raw.decode()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise InputError(f"{origin}: a profile is a JSON object")
    return _from_dict(data, origin)


def save_profile(profile: DeviceProfile, path: str | Path) -> None:
    from adloader.host.atomic import write_json

    write_json(path, profile.to_json())
