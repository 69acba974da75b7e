"""The node's cores: the CPUs this process may run on (its affinity mask, so a cpuset or
``taskset`` is honoured), the count every part of adloader uses."""

from __future__ import annotations

import os


def node_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def cuda_devices() -> int:
    """CUDA devices, counted without importing torch (the daemon never does)."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))
