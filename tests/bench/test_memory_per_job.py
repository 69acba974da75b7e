"""The Python memory a daemon still holds per finished job: a budget noise cannot move.

A real ``Node`` (the daemon's, as ``adloader daemon`` builds it from its settings) runs in
this process under ``tracemalloc``; a forked child plays real jobs to it over ZeroMQ
(``adloader.bench.ops.soak``'s player: 8 long-lived jobs heartbeating throughout, then jobs that
each register, heartbeat once and finish). Once the first FIRST jobs have ended, been retired
from memory and pruned past the retention count, and the online model's first refit turn has
been taken, the traced memory is read (m1); then MORE more jobs are played, and once all have
ended and the ended jobs kept are back at the retention count, it is read again (m2), each
time after ``gc.collect()`` and two turns of the control loop. Per finished job:
(m2 − m1) / MORE.

Only this process's Python allocations count: SQLite's own memory (the store's pages) is not
Python's, and the model's fits run in a child process (``daemon.model.refit``) whose scikit-learn
is not here. RSS, which counts all of it and the allocator's free lists too, is what
``adloader bench soak`` reports (``tests/bench/test_soak.py``: not asserted, this machine's
load moves it); this figure is the same process's bookkeeping, which load does not move.

Measured here (2-core shared machine, 2026-11-27, three runs): 34.3, 33.9 and 23.9 bytes a
finished job, 36–51 KB in all over the 1,500 (the first refit turn kept the prior; no fit
in between): bounded structures reaching their high-water mark (dict tables, the long-lived
jobs' latest messages), not growth with jobs. The budget, BUDGET_BYTES, is 15 times the
largest. A daemon that does not retire its ended jobs from memory (``Retirement.retire``
not called) held 4,469 and 4,548 bytes a job (two runs): 8.7–8.9 times the budget; the
regression this guards against held ~25 KB a job (5,000 jobs: RSS 69 → 194 MB). A smaller
leak goes under it: the ids of pruned jobs kept in the scheduler's ``ended`` map came to
119–148 bytes a job.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import tracemalloc

from daemon_harness import wait_for

from adloader.bench.ops.soak import LIVE, _jobs_player
from adloader.config import config_from
from adloader.daemon.node import Node
from adloader.daemon.store.retention import ENDED_STATES

FIRST = 300  # jobs ended before the first reading (past the retention count: pruning runs)
MORE = 1500  # jobs ended between the two readings
RETAIN = 200  # ended jobs kept
BUDGET_BYTES = 512  # per finished job
SETTLE_S = 60.0  # the longest wait for the daemon to catch up (end, retire, prune)


def _player(endpoint, total, done, pause_at, go, stop) -> None:
    """The soak's player, untraced whatever this process traces (a forked child inherits
    tracemalloc's hooks)."""
    tracemalloc.stop()
    _jobs_player(endpoint, total, done, pause_at, go, stop)


def _settled(node: Node, last: str) -> bool:
    """Every job played so far has ended, been retired from memory (only the long-lived
    ones are held) and pruned down to the retention count; no record waits to be written
    and no refit is under way."""
    with node.lock:
        sched = node.scheduler
        counts = node.store.state_counts()
        return (last in sched.ended
                and all(job_id.startswith("live-") for job_id in sched.jobs)
                and sum(counts.get(s, 0) for s in ENDED_STATES) == RETAIN
                and not node.dirty and not node.online.pending
                and not node.online._refitting)


def _traced(node: Node) -> int:
    """The Python memory traced, once the control loop has let go of the batch of messages
    it last received (its local until its next turn: up to MAX_DRAIN decoded messages) and
    taken one received after the daemon settled."""
    for _ in range(2):
        turn = node.loop_at
        wait_for(lambda t=turn: node.loop_at > t, SETTLE_S, "a turn of the control loop")
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_the_daemon_holds_no_python_memory_per_finished_job(tmp_path):
    config = config_from({
        "state_dir": str(tmp_path / "state"),
        "endpoint": f"ipc://{tmp_path / 'control.sock'}",
        "capacity": 64, "gpus": 4, "arrival_window_s": 0.2, "completion_window_s": 0.2,
        "retain_jobs": RETAIN,
    }, environ={})
    ctx = mp.get_context("fork")
    done, go, stop = ctx.Value("i", 0), ctx.Event(), ctx.Event()
    # forked before the node's threads exist; it waits for the node to answer
    child = ctx.Process(target=_player, args=(config.control_endpoint, FIRST + MORE, done,
                                              FIRST, go, stop), daemon=True)
    child.start()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start(1)
    node = None
    try:
        node = Node(config)
        node.start()
        wait_for(lambda: done.value >= FIRST or not child.is_alive(), SETTLE_S,
                 f"the first {FIRST} jobs to be played")
        assert child.is_alive(), f"the jobs' player exited ({child.exitcode})"
        # past the first refit turn, as any daemon is after its first jobs (a model fitted,
        # or the prior kept because it predicted the samples)
        wait_for(lambda: node.online.source != "prior" or node.online.skipped > 0,
                 SETTLE_S, "the first refit turn")
        wait_for(lambda: _settled(node, f"soak-{FIRST - 1:06d}"), SETTLE_S,
                 f"the first {FIRST} jobs to end and be pruned to {RETAIN}")
        m1 = _traced(node)
        go.set()
        wait_for(lambda: done.value >= FIRST + MORE or not child.is_alive(), SETTLE_S,
                 f"{MORE} more jobs to be played")
        assert child.is_alive(), f"the jobs' player exited ({child.exitcode})"
        wait_for(lambda: _settled(node, f"soak-{FIRST + MORE - 1:06d}"), SETTLE_S,
                 f"{MORE} more jobs to end and be pruned to {RETAIN}")
        m2 = _traced(node)
        live = [j for j in node.scheduler.jobs if j.startswith("live-")]
        model = f"model {node.online.source}, {node.online.skipped} refits skipped"
    finally:
        stop.set()
        go.set()
        if node is not None:
            node.stop()
        if not tracing:
            tracemalloc.stop()
        child.join(30)
        if child.is_alive():
            child.kill()
    per_job = (m2 - m1) / MORE
    print(f"\npython memory held: {m1 / 2**20:.2f} MB after {FIRST} jobs, "
          f"{m2 / 2**20:.2f} MB after {FIRST + MORE}: {per_job:.1f} bytes per finished job "
          f"({model})")
    assert len(live) == LIVE
    assert per_job <= BUDGET_BYTES, (
        f"the daemon holds {per_job:.0f} bytes of Python memory per finished job "
        f"(budget {BUDGET_BYTES}): ended jobs are kept in memory ({m1} -> {m2} bytes over "
        f"{MORE} jobs)")
