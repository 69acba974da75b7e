"""Retention and paging in the store: ended jobs are released from memory, pruned by age and
count with their events (never a held job), ids are never given twice, and pages by cursor
reach every job exactly once, whatever arrives or is pruned between them."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from adloader import rest
from adloader.daemon.store.history import EVENT_CURSOR, JOB_CURSOR, decode_cursor, encode_cursor
from adloader.daemon.store.retention import Retention
from adloader.daemon.store.store import Store
from adloader.errors import InputError
from adloader.rest import EventQuery, JobQuery, JobSpec, JobView

SPEC = JobSpec(name="r18", command=["python", "train.py"], features={"flops_g": 3.6,
               "params_m": 11.7}, batch_size=32, iterations=100)  # fmt: skip
DAY = 86400.0


def _ended(store: Store, n: int, t0: float, name: str = "r18", state: str = "finished"):
    """``n`` jobs that ran and ended at t0, t0+1, ...: released as the node retires them."""
    ids = []
    for i in range(n):
        job = store.add_job(SPEC.model_copy(update={"name": name}), "tok", t=t0 + i)
        store.add_event(job, "buffered", t=t0 + i)
        store.update_job(job, state=state, finished_at=t0 + i, exit_code=0, iteration=7)
        store.add_event(job, state, {"iterations": 7}, t=t0 + i)
        store.release(job)
        ids.append(job)
    return ids


def _all_pages(store: Store, **filters) -> list[str]:
    seen, cursor = [], None
    while True:
        page, cursor = store.job_page(JobQuery(cursor=cursor, **filters))
        seen += [i for i, _, _ in page]
        if cursor is None:
            return seen


def test_released_jobs_are_read_from_the_file(tmp_path):
    with Store(tmp_path / "s.db") as store:
        (done,) = _ended(store, 1, 100.0)
        live = store.add_job(SPEC, "tok", state="running")
        assert not store.held(done) and store.held(live)
        rec = store.get_job(done)
        assert (rec.state, rec.iteration, rec.spec.name) == ("finished", 7, "r18")
        assert store.update_job(done, reason="x").reason == "x"  # history stays writable
        assert [j.id for j in store.list_jobs()] == [done, live]
        assert store.state_counts() == {"finished": 1, "running": 1}
    with Store(tmp_path / "s.db") as store:  # reopened: only what is not over is held
        assert not store.held(done) and store.held(live)


def test_prune_by_count_keeps_the_newest_and_never_a_held_job(tmp_path):
    with Store(tmp_path / "s.db") as store:
        lost = store.add_job(SPEC, "tok", state="lost", t=1.0)  # held: may come back
        store.update_job(lost, finished_at=1.0)
        ids = _ended(store, 30, 1000.0)
        store.add_event(None, "plan", t=1000.0)  # the node's own: kept within the bounds
        pruned = store.retention.prune(Retention(max_age_s=1e9, max_jobs=10, max_events=10_000),
                             now=2000.0)
        assert [j for j, _ in pruned.jobs] == ids[:21]  # 31 ended, 10 kept: lost is held
        assert pruned.events == 2 * 21
        assert _all_pages(store) == [lost, *ids[21:]]
        assert {e["job"] for e in store.history.events(limit=5000)} == {*ids[21:], None}
        again = store.retention.prune(Retention(max_age_s=1e9, max_jobs=10, max_events=10_000),
                            now=2000.0)
        assert again.jobs == [] and again.events == 0


def test_prune_by_age_and_event_bounds(tmp_path):
    with Store(tmp_path / "s.db") as store:
        old = _ended(store, 5, 0.0)
        new = _ended(store, 5, 10 * DAY)
        running = store.add_job(SPEC, "tok", state="running", t=0.0)  # never pruned
        store.add_event(None, "plan", t=0.0)
        pruned = store.retention.prune(Retention(max_age_s=7 * DAY, max_jobs=100, max_events=4),
                             now=11 * DAY)
        assert [j for j, _ in pruned.jobs] == old
        assert _all_pages(store) == [*new, running]
        assert len(store.history.events(limit=5000)) == 4  # the newest four of new's ten


def test_prune_goes_in_batches(tmp_path):
    with Store(tmp_path / "s.db") as store:
        _ended(store, 25, 0.0)
        rule = Retention(max_age_s=DAY, max_jobs=5, max_events=10_000, batch=8)
        sizes = [len(store.retention.prune(rule, now=10 * DAY).jobs) for _ in range(5)]
        assert sizes == [8, 8, 8, 1, 0]


def test_ids_are_never_given_twice_after_pruning(tmp_path):
    with Store(tmp_path / "s.db") as store:
        ids = _ended(store, 3, 0.0)
        store.retention.prune(Retention(max_age_s=1.0, max_jobs=1, max_events=10_000), now=10 * DAY)
        assert store.get_job(ids[-1]) is None
        assert store.add_job(SPEC, "tok") == "j-000004"
    with Store(tmp_path / "s.db") as store:
        assert store.add_job(SPEC, "tok") == "j-000005"


def test_pages_reach_every_job_once_while_jobs_come_and_go(tmp_path):
    with Store(tmp_path / "s.db") as store:
        ids = _ended(store, 12, 0.0)
        seen, cursor = [], None
        page, cursor = store.job_page(JobQuery(limit=5))
        seen += [i for i, _, _ in page]
        store.retention.prune(Retention(max_age_s=1e9, max_jobs=5, max_events=10_000), now=1.0)
        late = store.add_job(SPEC, "tok", state="running")  # arrives meanwhile
        while cursor is not None:
            page, cursor = store.job_page(JobQuery(limit=5, cursor=cursor))
            seen += [i for i, _, _ in page]
        assert seen == [*ids[:5], *ids[7:], late]  # 5..6 pruned before they were reached
        assert len(set(seen)) == len(seen)


def test_job_filters(tmp_path):
    with Store(tmp_path / "s.db") as store:
        a = _ended(store, 3, 100.0, name="a")
        b = _ended(store, 2, 200.0, name="b", state="failed")
        run = store.add_job(SPEC.model_copy(update={"name": "a"}), "tok", state="running",
                            t=300.0)
        assert _all_pages(store, state=["failed"]) == b
        assert _all_pages(store, state=["running", "failed"]) == [*b, run]
        assert _all_pages(store, name="a") == [*a, run]
        assert _all_pages(store, since=101.0, until=201.0) == [a[1], a[2], b[0]]
        assert _all_pages(store, limit=1, name="a", state=["finished"]) == a
        assert _all_pages(store, name="nobody") == []


def test_event_pages_and_filters(tmp_path):
    with Store(tmp_path / "s.db") as store:
        a = _ended(store, 2, 100.0, name="a")
        b = _ended(store, 1, 200.0, name="b")
        store.add_event(None, "plan", t=300.0)
        body, cursor = store.event_page(EventQuery(limit=4))
        assert [e["id"] for e in json.loads(body)] == [1, 2, 3, 4]
        body, cursor = store.event_page(EventQuery(limit=4, cursor=cursor))
        assert [e["id"] for e in json.loads(body)] == [5, 6, 7]
        body, tail = store.event_page(EventQuery(cursor=cursor))  # nothing new: same place
        assert json.loads(body) == [] and tail == cursor
        store.add_event(None, "plan", t=400.0)
        assert [e["id"] for e in json.loads(store.event_page(EventQuery(cursor=tail))[0])] \
            == [8]

        def kinds(**f):
            return [(e["job"], e["kind"]) for e in json.loads(store.event_page(
                EventQuery(**f))[0])]

        assert kinds(kind=["finished"]) == [(a[0], "finished"), (a[1], "finished"),
                                            (b[0], "finished")]
        assert kinds(job=b[0]) == [(b[0], "buffered"), (b[0], "finished")]
        assert kinds(name="a", kind=["buffered"]) == [(a[0], "buffered"), (a[1], "buffered")]
        assert kinds(t_since=200.0, t_until=400.0) == [(b[0], "buffered"),
                                                       (b[0], "finished"), (None, "plan")]
        assert kinds(since=6) == [(None, "plan"), (None, "plan")]  # clients before cursors


def test_a_cursor_names_the_last_item_and_matches_its_list_s_pattern():
    job = encode_cursor(JOB_CURSOR, "j-000007")
    assert job == "j.j-000007" and decode_cursor(JOB_CURSOR, job) == "j-000007"
    assert re.fullmatch(rest.JOB_CURSOR_PATTERN, job)
    assert re.fullmatch(rest.JOB_CURSOR_PATTERN, encode_cursor(JOB_CURSOR, "slurm-12.0@n:1"))
    assert decode_cursor(EVENT_CURSOR, encode_cursor(EVENT_CURSOR, 42)) == 42
    assert re.fullmatch(rest.EVENT_CURSOR_PATTERN, encode_cursor(EVENT_CURSOR, 2**63 - 1))
    assert decode_cursor(EVENT_CURSOR, "e." + "9" * 19) == 2**63 - 1  # none is past it
    for bad in ("", "nonsense", "!!", "j.", "j.-x", "j.a\n", encode_cursor(EVENT_CURSOR, 3),
                "WyJqIiwiai0wMDAwMDciXQ"):  # the base64 form an earlier release issued
        with pytest.raises(InputError, match="query parameter 'cursor'"):
            decode_cursor(JOB_CURSOR, bad)
    for bad in ("e.", "e.-1", "e.3x", "e." + "9" * 20, encode_cursor(JOB_CURSOR, "3")):
        with pytest.raises(InputError, match="query parameter 'cursor'"):
            decode_cursor(EVENT_CURSOR, bad)


def test_a_page_of_history_shows_what_a_view_of_the_record_shows(tmp_path):
    with Store(tmp_path / "s.db") as store:
        # a timestamp SQLite's JSON functions would round (15 digits), text JSON escapes
        (done,) = _ended(store, 1, 1764287023.1234567, state="failed", name='a "b"\té')
        store.update_job(done, pid=4242, reason="exit code 3:\n\\ \u2028", exit_code=3,
                         workers=0, started_at=1764287024.0000002)
        live = store.add_job(SPEC, "tok", state="running")
        (first, rec, view), (second, held, none) = store.job_page(JobQuery())[0]
        assert (first, rec, second, held.id, none) == (done, None, live, live, None)
        full = store.get_job(done)
        expected = JobView.from_record(full, iteration=full.iteration).model_dump_json()
        assert json.loads(view) == json.loads(expected)


def test_a_page_is_read_while_a_write_holds_the_store(tmp_path):
    """Pages, a job of the history and the counts by state (``/metrics``) are read on a
    connection of their own: a write transaction open in another thread (it holds the
    store's lock) does not hold them back, and what it has not committed is not in them
    (the job and the counts waited for the lock before 2026-11-29)."""
    with Store(tmp_path / "s.db") as store:
        ids = _ended(store, 3, 0.0)
        writing, release, read = threading.Event(), threading.Event(), threading.Event()
        pages = []

        def write() -> None:
            with store.database.transaction() as db:
                db.execute("UPDATE jobs SET name = 'renamed' WHERE id = ?", (ids[0],))
                writing.set()
                release.wait(30)

        def page() -> None:
            pages.append(store.job_page(JobQuery())[0])
            pages.append(store.get_job(ids[0]))
            pages.append(store.state_counts())
            read.set()

        writer = threading.Thread(target=write)
        writer.start()
        try:
            assert writing.wait(10)
            threading.Thread(target=page, daemon=True).start()
            assert read.wait(10), "the page waited for the write's lock"
        finally:
            release.set()
            writer.join(10)
        assert [i for i, _, _ in pages[0]] == ids
        assert json.loads(pages[0][0][2])["name"] == "r18"  # not the uncommitted name
        assert pages[1].name == "r18" and pages[2] == {"finished": 3}
        assert store.get_job(ids[0]).name == "renamed"


def test_a_view_made_for_a_job_retired_meanwhile_is_not_kept(tmp_path):
    """``GET /v1/jobs`` reads the held jobs' views without the node's lock; a retirement
    (record released, then its view dropped) can fall between a page's read of the record
    and the view it keeps: the view is dropped again, so none stays behind for months."""
    from types import SimpleNamespace

    from adloader.daemon.api.service_impl import NodeApi

    with Store(tmp_path / "s.db") as store:
        held = store.add_job(SPEC, "tok", state="running")
        gone = store.add_job(SPEC, "tok", state="running")
        node = SimpleNamespace(store=store, static_views={},
                               scheduler=SimpleNamespace(jobs={}))
        rec = store.get_job(gone)
        store.update_job(gone, state="finished", finished_at=1.0, exit_code=0)
        store.release(gone)  # the retirement, after the page read its record
        node.static_views.pop(gone, None)
        api = NodeApi(node)
        body = api._job_json(rec)
        assert json.loads(body)["id"] == gone  # the page still shows what it read
        assert gone not in node.static_views
        body = api._job_json(store.get_job(held))
        assert json.loads(body)["iteration"] is None and held in node.static_views


def test_an_events_page_written_by_sqlite_reads_as_the_events_stored(tmp_path):
    """A page of events is written by SQLite from its rows (``history.EVENT_VIEW``): every
    field reads back as stored — a timestamp to its last bit, ids and kinds that need
    escaping, data spliced in as stored, a node event's job as null."""
    t = 1795863765.6600001  # 17 significant digits: SQLite's JSON functions keep 15
    odd = 'j-"quoted"\\ünï'
    data = {"workers": {"a": 3}, "note": 'tab\t and "quotes"', "x": 1e-7, "none": None}
    with Store(tmp_path / "s.db") as store:
        store.add_event(odd, 'kind "q"', data, t=t)
        store.add_event(None, "plan", t=0.1)
        events = json.loads(store.event_page(EventQuery())[0])
    assert events == [{"id": 1, "t": t, "job": odd, "kind": 'kind "q"', "data": data},
                      {"id": 2, "t": 0.1, "job": None, "kind": "plan", "data": {}}]
    assert events[0]["t"] == t and repr(events[0]["t"]) == repr(t)


def test_a_page_comes_from_sqlite_as_one_row(tmp_path, monkeypatch):
    """A page of jobs or events is one row from SQLite (it joins the page itself): Python's
    sqlite3 lets the GIL go around every step of a statement, and beside a busy thread each
    step waited up to the switch interval (1 ms in the daemon) to take it back
    (docs/benchmarks.md, "A page read in one step"). The pages read row by row before: 501
    and 1,000 rows here."""
    with Store(tmp_path / "s.db") as store:
        live = store.add_job(SPEC, "tok", state="running")  # held: its record, not a view
        ids = _ended(store, 600, 0.0)
        read, rows = store.database.read, []

        def counted(sql, params=()):
            rows.append(len(got := read(sql, params)))
            return got

        monkeypatch.setattr(store.database, "read", counted)
        page, cursor = store.job_page(JobQuery(limit=500))
        body, after = store.event_page(EventQuery(limit=1000))
    assert rows == [1, 1]
    assert [i for i, _, _ in page] == [live, *ids[:499]] and cursor is not None
    assert page[0][1] is not None and page[0][2] is None  # the held job, from memory
    assert json.loads(page[1][2])["id"] == ids[0]
    events = json.loads(body)
    assert [e["id"] for e in events] == list(range(1, 1001))
    assert decode_cursor(EVENT_CURSOR, after) == 1000


def test_the_store_is_pruned_outside_the_node_lock(tmp_path):
    """``Retirement.prune`` deletes from the store without the node's lock (a batch of
    1,000 jobs took 60-125 ms under the soak bench, and every request taking the lock
    waited as long); it takes the lock for what memory names of the pruned jobs and the
    event, and removes their files after."""
    from types import SimpleNamespace

    from adloader.daemon.store.retirement import Retirement

    lock = threading.Lock()
    with Store(tmp_path / "s.db") as store:
        ids = _ended(store, 5, time.time() - 10)
        logs = {i: tmp_path / f"{i}.log" for i in ids}
        for path in logs.values():
            path.write_text("log\n")
        free_while_pruning, recorded = [], []
        pruning = store.retention.prune

        def prune(retention):
            taken = lock.acquire(timeout=10)  # what a request would do meanwhile
            free_while_pruning.append(taken)
            if taken:
                lock.release()
            return pruning(retention)

        store.retention.prune = prune
        scheduler = SimpleNamespace(ended={i: "finished" for i in ids})
        launcher = SimpleNamespace(status_path=lambda i: str(tmp_path / f"{i}.status"),
                                   log_path=lambda i: str(logs[i]))
        retirement = Retirement(Retention(max_jobs=2), store, scheduler, None, launcher,
                                {i: b"view" for i in ids},
                                lambda *event: recorded.append((lock.locked(), event)))
        pruned = retirement.prune(lock)
        assert free_while_pruning == [True]
        assert [i for i, _ in pruned.jobs] == ids[:3]
        assert set(scheduler.ended) == set(ids[3:]) and set(retirement.views) == set(ids[3:])
        assert recorded == [(True, (None, "pruned", {"jobs": 3, "events": 6}))]
        assert [i for i in ids if logs[i].exists()] == ids[3:]
        assert not lock.locked()
