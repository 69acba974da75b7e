"""CPU time of a process's own threads by name, from ``/proc/self/task`` (Linux): how a job
tells what its application master costs, libzmq's I/O threads (``ZMQbg/…``) included."""

from __future__ import annotations

import os


def named_threads_cpu_s(prefix: str) -> float:
    """User + system CPU seconds of this process's live threads whose name starts with
    ``prefix`` (0 where ``/proc`` has no tasks)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as fh:
                if not fh.read().startswith(prefix):
                    continue
            with open(f"/proc/self/task/{task}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick
