"""What a burst of work freed goes back to the system: glibc's free heap trimmed
(``adloader.host.heap``), after a big page of history and after a prune, and a burst of
ended jobs let go of at the clock's next tick rather than at the next store check.

``adloader bench soak --jobs 20000`` measured the daemon's RSS growth at +17.6 to +21.5 MB
(budget 20) before, +6.3 to +7.0 after (3 runs each way, interleaved; docs/benchmarks.md,
"What the soak's last 20 MB were"). Those runs are the benchmark; these tests check each
part does what it is there for, on this process's own resident anonymous memory. A page of
5,000 jobs, measured here twice each way: 1.0 MB left resident besides its body with the
trim, 3.8 MB without it (the budget, 2.0).
"""

from __future__ import annotations

import platform
import sqlite3

import pytest
from daemon_harness import RawMaster, wait_for

from adloader.config import config_from
from adloader.daemon import node as node_module
from adloader.daemon.api.service_impl import NodeApi
from adloader.daemon.node import Node
from adloader.host import heap
from adloader.protocol import Finish
from adloader.rest import JobQuery, JobSpec

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
MB = 2**20
HISTORY = 5000  # ended jobs in the store: one page of them holds ~7 MB of rows while built


def _anon() -> int:
    """This process's resident anonymous memory, bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@glibc
def test_trim_gives_back_a_fragmented_heap():
    # blocks of 700 bytes (malloc's, not Python's small-object allocator), one in 64 kept:
    # no heap top to shrink, only pages in the middle of free chunks to give back
    blocks = [bytes(700) for _ in range(40_000)]
    kept = blocks[::64]
    del blocks
    before = _anon()
    assert heap.trim()
    after = _anon()
    assert before - after >= 12 * MB, (
        f"malloc_trim gave back {(before - after) / MB:.1f} MB of ~27 MB freed")
    assert len(kept) == 625


@glibc
def test_a_big_page_of_history_leaves_nothing_resident(tmp_path):
    config = config_from({"state_dir": str(tmp_path / "state"),
                          "endpoint": f"ipc://{tmp_path / 'control.sock'}",
                          "capacity": 8, "gpus": 2}, environ={})
    node = Node(config)
    try:
        spec = JobSpec(name="r18", command=["python", "train.py"], iterations=100,
                       batch_size=32, features={"flops_g": 3.6, "params_m": 11.7})
        rows = [(f"h-{i:06d}", "r18", spec.model_dump_json(), "finished", "tok", 1e9 + i,
                 1e9 + i, 100, 0, "rest") for i in range(HISTORY)]
        with sqlite3.connect(node.store.path) as db:  # history another daemon left
            db.executemany("INSERT INTO jobs (id, name, spec, state, token_digest, "
                           "submitted_at, finished_at, iteration, exit_code, origin) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        api = NodeApi(node)
        api.jobs_page(JobQuery(limit=HISTORY))  # the statement, the reader, Python's arenas
        heap.trim()  # made, and what that page freed given back: the next one starts clean
        before = _anon()
        body, cursor = api.jobs_page(JobQuery(limit=HISTORY))
        after = _anon()
    finally:
        node.stop()
    assert cursor is None and body.count(b'"id":"h-') == HISTORY
    grew = (after - before - len(body)) / MB  # the body itself is the answer: it stays
    assert grew <= 2.0, (
        f"a page of {HISTORY} jobs left {grew:.1f} MB resident besides its "
        f"{len(body) / MB:.1f} MB body: its rows' blocks were kept by the allocator")


def test_ended_jobs_leave_memory_at_the_next_tick_not_the_next_store_check(
        tmp_path, monkeypatch):
    """A burst of jobs that end is not held in memory until the store is next looked at
    (every STORE_CHECK_S: 2 s, in which a burst ends ~1,600 jobs here)."""
    monkeypatch.setattr(node_module, "STORE_CHECK_S", 3600.0)  # once, at start, then never
    config = config_from({"state_dir": str(tmp_path / "state"),
                          "endpoint": f"ipc://{tmp_path / 'control.sock'}",
                          "capacity": 8, "gpus": 2}, environ={})
    node = Node(config)
    node.start()
    ids = [f"burst-{i}" for i in range(5)]
    try:
        with RawMaster(config.control_endpoint) as master:
            for job in ids:
                master.register(job, f"t-{job}", iterations=10)
            wait_for(lambda: all(node.store.held(j) for j in ids), 10.0, "the registrations")
            for job in ids:
                master.beat(job, f"t-{job}", 10)
                master.send(Finish(job=job, token=f"t-{job}", iterations=10))
            wait_for(lambda: all(node.store.get_job(j).state == "finished" for j in ids),
                     10.0, "the jobs to finish")
            wait_for(lambda: not any(node.store.held(j) or j in node.scheduler.jobs
                                     for j in ids), 5.0,
                     "the finished jobs to be let go of before the next store check")
    finally:
        node.stop()
    assert all(node.scheduler.ended[j] == "finished" for j in ids)
