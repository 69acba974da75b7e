"""Real ranks on this machine: ``spawn_gloo`` forks ``world_size`` processes that meet in a
``torch.distributed`` gloo group, for the locality benchmark and the multi-rank tests."""

from __future__ import annotations

import os
import pickle
import queue as queue_module
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta

import torch


def spawn_gloo(fn: Callable, world_size: int, *args, timeout: float = 60.0,
               gloo_timeout: float = 10.0) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` forked gloo ranks; their results.

    Ranks meet through a file store in a fresh temporary directory (no port to race for).
    A rank whose ``fn`` returns None, or that exits cleanly without returning (a test's dying
    rank), gives None. A rank that raises or crashes, or no answer within ``timeout``, fails.
    """
    ctx = torch.multiprocessing.get_context("fork")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="adloader-gloo-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank_main, daemon=True,
                             args=(fn, r, world_size, store, gloo_timeout, queue, args))
                 for r in range(world_size)]
        for proc in procs:
            proc.start()
        results: dict[int, object] = {}
        deadline = time.monotonic() + timeout
        try:
            while len(results) < world_size:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"gloo ranks: {world_size - len(results)} of "
                                       f"{world_size} did not finish within {timeout} s")
                try:
                    rank, ok, value = queue.get(timeout=min(left, 0.2))
                except queue_module.Empty:
                    _check_exits(procs, results, queue)
                    continue
                if not ok:
                    raise RuntimeError(f"gloo rank {rank} failed:\n{value}")
                results[rank] = pickle.loads(value)
        finally:
            for proc in procs:
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
    return [results[r] for r in range(world_size)]


def _check_exits(procs, results: dict, queue) -> None:
    """Ranks gone without an answer: None when they exited with 0, else an error."""
    gone = [r for r, proc in enumerate(procs) if r not in results and proc.exitcode is not None]
    for r in gone:
        if procs[r].exitcode != 0:
            raise RuntimeError(f"gloo ranks: rank {r} exited with {procs[r].exitcode}")
    if gone:
        try:  # an answer written just before its rank exited
            while True:
                rank, ok, value = queue.get(timeout=0.2)
                if not ok:
                    raise RuntimeError(f"gloo rank {rank} failed:\n{value}")
                results[rank] = pickle.loads(value)
        except queue_module.Empty:
            pass
        for r in gone:
            results.setdefault(r, None)


def _rank_main(fn, rank, world_size, store, gloo_timeout, queue, args) -> None:
    torch.set_num_threads(1)
    try:
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{store}", rank=rank, world_size=world_size,
            timeout=timedelta(seconds=gloo_timeout))
        # plain pickle: tensors go by value, not as shared-memory handles of a dying process
        queue.put((rank, True, pickle.dumps(fn(rank, world_size, *args))))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))
    queue.close()
    queue.join_thread()
    os._exit(0)  # skip gloo's teardown: peers may be gone
