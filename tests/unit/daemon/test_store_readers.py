"""The store's readers (``daemon/store/readers.py``): reads of the history are made side by
side, each on a read-only connection of its own, at most ``most`` of them; a reader whose
read failed is closed and the read made on the writer; closing waits for reads under way."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from adloader.daemon.store.readers import Readers
from adloader.daemon.store.store import Store
from adloader.rest import JobQuery, JobSpec

SPEC = JobSpec(name="r18", command=["python", "train.py"], features={"flops_g": 3.6,
               "params_m": 11.7}, batch_size=32, iterations=100)  # fmt: skip


def _ended(store: Store, n: int) -> list[str]:
    ids = []
    for i in range(n):
        job = store.add_job(SPEC, "tok", t=float(i))
        store.update_job(job, state="finished", finished_at=float(i), exit_code=0)
        store.release(job)
        ids.append(job)
    return ids


def _in_thread(fn) -> tuple[threading.Thread, threading.Event, list]:
    done, out = threading.Event(), []

    def run() -> None:
        out.append(fn())
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, out


def test_a_read_is_made_while_another_holds_a_reader(tmp_path):
    """A read under way (its snapshot open on a reader) does not hold back a page, a job of
    the history or the counts: each takes a reader of its own (one reader shared under a
    lock made them wait: a client's page waited up to 41 ms under the soak bench)."""
    with Store(tmp_path / "s.db") as store:
        ids = _ended(store, 3)
        under_way = store.database.readers.take()
        under_way.execute("BEGIN")
        assert under_way.execute("SELECT count(*) FROM jobs").fetchone() == (3,)
        try:
            _, done, out = _in_thread(lambda: (store.job_page(JobQuery())[0],
                                               store.get_job(ids[0]), store.state_counts()))
            assert done.wait(10), "a read waited for another read"
            assert store.database.readers.open == 2
        finally:
            under_way.execute("COMMIT")
            store.database.readers.give_back(under_way)
        page, job, counts = out[0]
        assert [i for i, _, _ in page] == ids and job.id == ids[0]
        assert counts == {"finished": 3}


def test_readers_are_bounded_and_a_read_waits_for_one(tmp_path):
    Store(tmp_path / "s.db").close()
    readers = Readers(tmp_path / "s.db", most=2)
    first, second = readers.take(), readers.take()
    assert first is not None and second is not None and first is not second
    _, got, out = _in_thread(readers.take)
    assert not got.wait(0.3), "a third reader opened beyond most=2"
    readers.give_back(first)
    assert got.wait(10) and out == [first]  # the idle one, reused: none opened
    assert readers.open == 2
    readers.give_back(out[0])
    readers.give_back(second)
    readers.close()
    assert readers.open == 0 and readers.take() is None


def test_a_failed_read_closes_its_reader_and_is_made_on_the_writer(tmp_path):
    with Store(tmp_path / "s.db") as store:
        assert store.database.read("SELECT count(*) FROM jobs") == [(0,)]
        assert store.database.readers.open == 1  # idle, kept for the next read
        store.database.conn.execute("CREATE TEMP TABLE only_the_writer (x)")  # not on a reader
        assert store.database.read("SELECT count(*) FROM only_the_writer") == [(0,)]
        assert store.database.readers.open == 0  # the reader it failed on: closed


def test_close_waits_for_a_read_under_way(tmp_path):
    Store(tmp_path / "s.db").close()
    readers = Readers(tmp_path / "s.db")
    taken, idle = readers.take(), readers.take()
    readers.give_back(idle)
    closer, closed, _ = _in_thread(readers.close)
    assert not closed.wait(0.3), "close did not wait for the read under way"
    assert readers.take() is None  # closing: no new read is handed a reader
    readers.give_back(taken)
    assert closed.wait(10) and readers.open == 0
    for conn in (taken, idle):
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")


def test_reads_from_many_threads_at_once(tmp_path):
    """Eight threads paging at once: every page whole and in order, no more readers open
    than ``most``, none lost."""
    with Store(tmp_path / "s.db") as store:
        ids = _ended(store, 40)
        most, errors = [], []

        def pages() -> None:
            for _ in range(30):
                page = store.job_page(JobQuery(limit=500))[0]
                if [i for i, _, _ in page] != ids:
                    errors.append(page)
                most.append(store.database.readers.open)

        threads = [threading.Thread(target=pages) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads) and not errors
        assert max(most) <= store.database.readers.most
