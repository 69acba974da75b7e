"""The kernel's CPU scheduling group a process is in, when its session decides its share.

With the kernel's autogroup on (most distributions), every session is one scheduling group
and CFS shares the CPU equally between groups — but only for tasks in the root CPU cgroup;
a task in a CPU cgroup of its own is scheduled by that cgroup instead. A job reports its own
group in ``Register`` (read from ``/proc/self``, which is right in any PID namespace) and the
daemon compares it with its own: a job in another group gets a session's share of the CPU
whatever its workers.
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def autogroup_enabled(proc: Path = PROC) -> bool:
    """Does the kernel group the CPU scheduling of each session (``sched_autogroup``)?"""
    try:
        return (proc / "sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return False


def in_cpu_cgroup(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> bool:
    """Is this process in a CPU cgroup other than the root (autogroup then does not apply)?"""
    try:
        lines = (proc / "self/cgroup").read_text().splitlines()
    except OSError:
        return False
    unified = None
    for fields in (line.split(":", 2) for line in lines):
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if "cpu" in controllers.split(","):  # cgroup v1: the cpu hierarchy
            return path != "/"
        if controllers == "":
            unified = path
    if unified in (None, "/"):
        return False
    try:  # cgroup v2: a cgroup has its own CPU share when its parent hands it the controller
        controllers = (cgroup_root / unified.lstrip("/") / "cgroup.controllers").read_text()
    except OSError:
        return False
    return "cpu" in controllers.split()


DEFAULT_GROUP = "/autogroup-0"  # no session of its own since boot: the root task group


def cpu_group(proc: Path = PROC, cgroup_root: Path = CGROUP_ROOT) -> str | None:
    """This process's autogroup (``/autogroup-N``) when it decides its CPU share, else None.

    The kernel prints nothing for a process still in the default autogroup (none of its
    ancestors started a session): its tasks are scheduled one by one in the root group."""
    if not autogroup_enabled(proc) or in_cpu_cgroup(proc, cgroup_root):
        return None
    try:
        text = (proc / "self/autogroup").read_text().split()
    except OSError:
        return None
    return text[0] if text else DEFAULT_GROUP


def separate_cpu_group(theirs: str | None, mine: str | None) -> bool:
    """Is a job that reported ``theirs`` in another scheduling group than ``mine``?"""
    return bool(mine) and bool(theirs) and mine != theirs
