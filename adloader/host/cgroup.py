"""The CPU a container may use, from its own cgroup: cgroup v2 ``cpu.max`` (quota/period)
and ``cpuset.cpus.effective``, cgroup v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` and
``cpuset.cpus``, each the tightest along the path to the root. Read again on every call, so a
daemon that polls it follows an in-place pod resize (Kubernetes' ``resize`` subresource
rewrites ``cpu.max``) without a restart. ``ADLOADER_CGROUP_ROOT`` moves the mount point and
``/proc/self/cgroup`` with it (``ROOT/proc-self-cgroup``), for tests."""

from __future__ import annotations

import math
import os
from pathlib import Path

from adloader.env import CGROUP_ROOT

DEFAULT_ROOT = "/sys/fs/cgroup"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_list_count(text: str) -> int:
    """CPUs in a list like ``0-3,6,8-9`` (7)."""
    count = 0
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def _membership(root: Path) -> tuple[str | None, dict[str, str]]:
    """(the v2 path, {v1 controller: path}) of this process, from /proc/self/cgroup."""
    text = _read(root / "proc-self-cgroup") if os.environ.get(CGROUP_ROOT) \
        else _read(Path("/proc/self/cgroup"))
    v2, v1 = None, {}
    for line in (text or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path
        for c in controllers.split(","):
            if c:
                v1[c] = path
    return v2, v1


def _ancestors(base: Path, path: str) -> list[Path]:
    parts = [p for p in path.split("/") if p]
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _v1_dir(root: Path, controller: str) -> Path | None:
    for name in (controller, f"{controller},cpuacct", f"cpuacct,{controller}"):
        if (root / name).is_dir():
            return root / name
    return None


def cgroup_cpus(root: str | None = None) -> float | None:
    """The CPUs this process's cgroups allow (quota/period or cpuset, the least), or None
    when no cgroup limits it."""
    base = Path(root or os.environ.get(CGROUP_ROOT) or DEFAULT_ROOT)
    v2, v1 = _membership(base)
    limits: list[float] = []
    if v2 is not None and (base / "cgroup.controllers").exists():
        for d in _ancestors(base, v2):
            quota = _read(d / "cpu.max")
            if quota and not quota.startswith("max"):
                q, _, period = quota.partition(" ")
                limits.append(int(q) / int(period or 100000))
            cpus = _read(d / "cpuset.cpus.effective") or _read(d / "cpuset.cpus")
            if cpus:
                limits.append(cpu_list_count(cpus))
    for controller, reader in (("cpu", _v1_quota), ("cpuset", _v1_cpuset)):
        if controller in v1 and (d := _v1_dir(base, controller)) is not None:
            limits += [x for a in _ancestors(d, v1[controller]) if (x := reader(a)) is not None]
    return min(limits) if limits else None


def _v1_quota(d: Path) -> float | None:
    quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
    if quota is None or int(quota) <= 0:
        return None
    return int(quota) / int(period or 100000)


def _v1_cpuset(d: Path) -> float | None:
    cpus = _read(d / "cpuset.cpus")
    return float(cpu_list_count(cpus)) if cpus else None


def capacity(cores: int, root: str | None = None) -> int:
    """Loading workers the node may run: ``cores`` (its affinity) cut to its cgroup's CPUs,
    rounded down, at least 1."""
    cpus = cgroup_cpus(root)
    if cpus is None:
        return max(1, cores)
    return max(1, min(cores, math.floor(cpus + 1e-9)))
