"""The node's cores: the CPUs this process may run on (its affinity mask, so a cpuset or
``taskset`` is honoured), the count every part of adloader uses."""

from __future__ import annotations

import os


def node_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
