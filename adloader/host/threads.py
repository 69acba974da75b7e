"""CPU time of a process's own threads by name, from ``/proc/self/task`` (Linux): how a job
tells what its application master costs, libzmq's I/O threads (``ZMQbg/…``) included; and
the time a thread spent in the interpreter's full collections, which are the process's."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time


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


class FullCollections:
    """CPU seconds each thread spent in the interpreter's full (generation-2) collections.

    A full collection walks every object of the process (a job's: torch's, the script's)
    and runs in whichever thread's allocation crosses the threshold. The reference job
    with no daemon pays one of ~75 ms during its loop, so when the master's thread is the
    one that crosses it, that time is the process's, not the master's: the master counts
    it apart (``docs/benchmarks.md``, "The master's CPU and the process's collections").
    """

    def __init__(self) -> None:
        self._began: dict[int, float] = {}
        self._spent: dict[int, float] = {}

    def start(self) -> FullCollections:
        gc.callbacks.append(self._on)
        return self

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on)

    def spent(self, ident: int | None = None) -> float:
        """Seconds thread ``ident`` (this one by default) spent in full collections."""
        return self._spent.get(threading.get_ident() if ident is None else ident, 0.0)

    def _on(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        ident = threading.get_ident()
        if phase == "start":
            self._began[ident] = time.thread_time()
        elif (began := self._began.pop(ident, None)) is not None:
            self._spent[ident] = self._spent.get(ident, 0.0) + time.thread_time() - began
