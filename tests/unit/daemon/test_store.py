"""The SQLite store: jobs, events, samples and models survive a restart; threads may share it."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from adloader.daemon.store.store import Store
from adloader.errors import StorageError
from adloader.rest import JobSpec
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

SPEC = JobSpec(name="r18", command=["python", "train.py"], features={"flops_g": 3.6,
               "params_m": 11.7}, batch_size=32, iterations=100)  # fmt: skip


def test_jobs_roundtrip_and_update(tmp_path):
    with Store(tmp_path / "state" / "deep" / "adloader.db") as store:
        a = store.add_job(SPEC, token_digest="tok-a", t=10.0)
        b = store.add_job(SPEC.model_copy(update={"name": "b"}), "tok-b", "attached", "running")
        assert (a, b) == ("j-000001", "j-000002")
        job = store.get_job(a)
        assert job.spec == SPEC and job.state == "queued" and job.origin == "rest"
        assert job.token_digest == "tok-a" and job.submitted_at == 10.0 and job.pid is None
        updated = store.update_job(a, state="running", pid=123, workers=4, started_at=11.0)
        assert (updated.state, updated.pid, updated.workers) == ("running", 123, 4)
        assert [j.id for j in store.list_jobs()] == [a, b]
        store.update_job(b, state="finished", exit_code=0, finished_at=20.0)
        assert [j.id for j in store.list_jobs(["running"])] == [a]
        assert [j.id for j in store.list_jobs(("finished", "failed"))] == [b]
        assert store.list_jobs([]) == []
        assert store.get_job("j-999999") is None
        assert store.update_job("j-999999", state="lost") is None


def test_a_job_keeps_the_uid_that_registered_it_and_an_older_store_gains_the_column(tmp_path):
    """``uid`` (the user the kernel said registered the job) survives a restart; a store the
    release before wrote (schema 2, no such column) gets it, its jobs kept, theirs None —
    and that release, reading by named columns, still reads this one's."""
    path = tmp_path / "adloader.db"
    with Store(path) as store:
        a = store.add_job(SPEC, token_digest="tok-a", t=10.0)
        assert store.get_job(a).uid is None
        assert store.update_job(a, uid=1000).uid == 1000
    with Store(path) as store:
        assert store.get_job(a).uid == 1000
    with closing(sqlite3.connect(path)) as db:  # as the release before left it
        db.execute("ALTER TABLE jobs DROP COLUMN uid")
        db.commit()
    with Store(path) as store:
        assert store.get_job(a).uid is None and store.get_job(a).token_digest == "tok-a"
        store.update_job(a, uid=7)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id, state, uid FROM jobs").fetchall() == [(a, "queued", 7)]
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_bad_updates_are_refused(tmp_path):
    with Store(tmp_path / "s.db") as store:
        job = store.add_job(SPEC, "t")
        with pytest.raises(ValueError, match="state 'sleeping'"):
            store.update_job(job, state="sleeping")
        with pytest.raises(ValueError, match="jobs.id cannot be updated"):
            store.update_job(job, id="j-000009")
        with pytest.raises(ValueError, match="origin"):
            store.add_job(SPEC, "t", origin="email")
        assert store.get_job(job).state == "queued"


def test_events_samples_models(tmp_path):
    with Store(tmp_path / "s.db") as store:
        ids = [store.add_event("j-000001", kind, {"n": i}, t=float(i))
               for i, kind in enumerate(["submitted", "started", "resize"])]  # fmt: skip
        store.add_event(None, "refit")
        assert ids == [1, 2, 3]
        kinds = [e["kind"] for e in store.history.events()]
        assert kinds == ["submitted", "started", "resize", "refit"]
        assert store.history.events(since_id=1, limit=1) == [
            {"id": 2, "t": 1.0, "job": "j-000001", "kind": "started", "data": {"n": 1}}]
        t1 = TrainingSample(32, 1, 3.6, 11.7, 0.05, "Resnet18")
        l1, l2 = LoadingSample(2, 8, 410.0), LoadingSample(4, 8, 790.5)
        store.tpm.add_sample("j-000001", l1)
        store.tpm.add_samples("j-000001", [t1, l2])
        assert store.tpm.samples() == ([t1], [l1, l2])
        with pytest.raises(TypeError):
            store.tpm.add_sample(None, {"step_s": 1})
        assert store.tpm.samples() == ([t1], [l1, l2])  # the failed batch left nothing behind
        assert store.tpm.latest_model() is None
        store.tpm.save_model({"v": 1})
        store.tpm.save_model({"v": 2, "training": {"regressor": "staged"}})
        assert store.tpm.latest_model() == {"v": 2, "training": {"regressor": "staged"}}


def test_restart_keeps_everything(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    job = store.add_job(SPEC, "tok")
    store.update_job(job, state="running", pid=42, log_path="/tmp/j.log")
    store.add_event(job, "started", {"workers": 3})
    store.tpm.add_sample(job, LoadingSample(3, 3, 500.0))
    store.tpm.save_model({"fitted": True})
    store.close()
    with Store(path) as again:
        record = again.get_job(job)
        assert (record.state, record.pid, record.log_path, record.spec) == (
            "running", 42, "/tmp/j.log", SPEC)
        assert again.history.events()[0]["data"] == {"workers": 3}
        assert again.tpm.samples() == ([], [LoadingSample(3, 3, 500.0)])
        assert again.tpm.latest_model() == {"fitted": True}
        assert again.add_job(SPEC, "tok") == "j-000002"  # ids continue
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_concurrent_writers(tmp_path):
    store = Store(tmp_path / "s.db")
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        try:
            barrier.wait()
            for i in range(25):
                job = store.add_job(SPEC, f"t{k}")
                store.update_job(job, state="running", workers=k)
                store.add_event(job, "submitted", {"k": k, "i": i})
                store.tpm.add_sample(job, LoadingSample(k + 1, 8, float(i + 1)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    jobs = store.list_jobs()
    assert [j.id for j in jobs] == [f"j-{i:06d}" for i in range(1, 101)]  # unique, no gaps
    assert all(j.state == "running" for j in jobs)
    assert len(store.history.events(limit=1000)) == 100 and len(store.tpm.samples()[1]) == 100
    store.close()


def test_not_a_database_names_the_file(tmp_path):
    bad = tmp_path / "state.db"
    bad.write_bytes(b"this is not sqlite at all, just some text " * 100)
    with pytest.raises(StorageError, match="state.db: not a usable adloader state database"):
        Store(bad)
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(StorageError, match="a-folder"):
        Store(folder)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(StorageError, match="schema version 99"):
        Store(path)


def _v1_store(path, job_id="j-000001", token="clear-token"):
    """A store as schema 1 wrote it: tokens in clear, no supervisor nor reason."""
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL,
            spec TEXT NOT NULL, state TEXT NOT NULL, token TEXT NOT NULL, workers INTEGER,
            pid INTEGER, exit_code INTEGER, submitted_at REAL NOT NULL, started_at REAL,
            finished_at REAL, log_path TEXT, origin TEXT NOT NULL);
        PRAGMA user_version=1;""")
    _v1_job(db, job_id, token)
    db.close()


def _v1_job(db, job_id, token):
    db.execute("INSERT INTO jobs (id, name, spec, state, token, submitted_at, origin) VALUES "
               "(?, 'r18', ?, 'running', ?, 1.0, 'rest')", (job_id, SPEC.model_dump_json(),
                                                           token))  # fmt: skip
    db.commit()


def test_a_version_1_database_keeps_digests_not_tokens(tmp_path):
    path = tmp_path / "v1.db"
    _v1_store(path)
    with pytest.raises(StorageError, match="clear tokens"):
        Store(path)
    with Store(path, digest=lambda t: "d:" + t[::-1]) as store:
        assert store.get_job("j-000001").token_digest == "d:nekot-raelc"
    assert b"clear-token" not in path.read_bytes()  # closed: the WAL is checkpointed



def _digest(token):
    return "d:" + token[::-1]


def _rows(path):
    with closing(sqlite3.connect(path)) as db:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        return version, db.execute("SELECT * FROM jobs ORDER BY id").fetchall()


def test_a_migration_backs_the_store_up_first_its_wal_included(tmp_path, caplog):
    path = tmp_path / "adloader.db"
    _v1_store(path)
    wal = sqlite3.connect(path)  # held open: j-000002 is in the WAL only, not in the file
    wal.execute("PRAGMA journal_mode=WAL")
    _v1_job(wal, "j-000002", "second-token")
    assert Path(f"{path}-wal").stat().st_size > 0 and b"second-token" not in path.read_bytes()
    before = _rows(path)
    assert [row[0] for row in before[1]] == ["j-000001", "j-000002"]
    with caplog.at_level(logging.INFO, logger="adloader.daemon"), \
            Store(path, digest=_digest) as store:
        assert store.get_job("j-000002").token_digest == "d:nekot-dnoces"
    wal.close()
    backup = tmp_path / "adloader.db.schema1.bak"
    assert _rows(backup) == before  # opens, at schema 1, the same rows (the WAL's included)
    assert not Path(f"{backup}-wal").exists()  # one file
    assert backup.stat().st_mode & 0o077 == 0  # clear tokens: the daemon's user's alone
    assert not backup.with_name(backup.name + ".partial").exists()
    assert [r.getMessage() for r in caplog.records if str(backup) in r.getMessage()]
    assert _rows(path)[0] == 2


def test_a_backup_in_place_is_never_overwritten(tmp_path, caplog):
    path = tmp_path / "adloader.db"
    backup = tmp_path / "adloader.db.schema1.bak"
    _v1_store(path)
    Store(path, digest=_digest).close()
    kept = backup.read_bytes(), backup.stat().st_mtime_ns
    Store(path, digest=_digest).close()  # already at schema 2: nothing to back up
    assert (backup.read_bytes(), backup.stat().st_mtime_ns) == kept
    for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):  # a schema 1 store again,
        f.unlink(missing_ok=True)  # as one that crashed before its migration committed is
    _v1_store(path, "j-000009", "other-token")
    with caplog.at_level(logging.INFO, logger="adloader.daemon"), \
            Store(path, digest=_digest) as store:
        assert store.get_job("j-000009").token_digest == "d:nekot-rehto"
    assert (backup.read_bytes(), backup.stat().st_mtime_ns) == kept
    assert [row[0] for row in _rows(backup)[1]] == ["j-000001"]
    assert any("is kept" in r.getMessage() and str(backup) in r.getMessage()
               for r in caplog.records)


def test_a_store_that_cannot_be_backed_up_is_not_migrated(tmp_path):
    path = tmp_path / "adloader.db"
    _v1_store(path)
    before = _rows(path)
    blocker = tmp_path / "adloader.db.schema1.bak"
    blocker.mkdir()  # the backup cannot be written there, not even by root
    with pytest.raises(StorageError) as refused:
        Store(path, digest=_digest)
    message = str(refused.value)
    assert "not migrated from schema 1 to 2" in message and str(blocker) in message
    assert "Is a directory" in message and "\n" not in message
    assert _rows(path) == before  # schema 1, tokens in clear, untouched
    assert sorted(f.name for f in tmp_path.iterdir()) == ["adloader.db", blocker.name]
    blocker.rmdir()
    with Store(path, digest=_digest) as store:  # the way cleared: backed up, then migrated
        assert store.get_job("j-000001").token_digest == "d:nekot-raelc"
    assert _rows(blocker) == before


def test_a_rolled_back_daemon_is_told_in_one_line_how_to_go_back(tmp_path):
    path = tmp_path / "adloader.db"
    with Store(path) as store:
        job = store.add_job(SPEC, "d")
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=3")  # a newer release migrated it, no backup made
        db.commit()
    with pytest.raises(StorageError) as refused:
        Store(path)
    message = str(refused.value)
    assert "schema version 3, newer than this adloader's 2" in message
    assert "no backup adloader.db.schema2.bak" in message and "\n" not in message
    backup = tmp_path / "adloader.db.schema2.bak"
    with closing(sqlite3.connect(path)) as db, closing(sqlite3.connect(backup)) as copy:
        db.execute("PRAGMA user_version=2")
        db.commit()
        db.backup(copy)  # the backup that newer release makes before migrating
        db.execute("PRAGMA user_version=3")
        db.commit()
    with pytest.raises(StorageError) as refused:
        Store(path)
    message = str(refused.value)
    assert "\n" not in message and "schema version 3" in message
    assert f"move {path} and its -wal and -shm files aside, copy {backup} to {path}" in message
    assert "lost from the history" in message
    path.rename(tmp_path / "newer.db")  # the steps it names: the store opens again
    shutil.copy(backup, path)
    with Store(path) as store:
        assert store.get_job(job).name == "r18"

def test_garbage_in_the_middle_is_a_clear_error_that_says_what_to_do(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as store:
        for i in range(300):
            job = store.add_job(SPEC.model_copy(update={"name": f"n{i}"}), "d")
            store.add_event(job, "submitted", {"i": i, "pad": "x" * 200})
    data = bytearray(path.read_bytes())
    assert len(data) > 40 * 4096
    middle = len(data) // 2 // 4096 * 4096
    data[middle:middle + 4096] = b"\xde\xad\xbe\xef" * 1024  # a whole page of garbage
    path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match=r"s\.db: .*mv .*s\.db\.damaged"):
        Store(path)


def test_a_deleted_database_is_written_back_from_the_open_copy(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    job = store.add_job(SPEC, "d")
    store.add_event(job, "submitted")
    assert store.restore_if_gone() is None
    for f in tmp_path.iterdir():
        f.unlink()
    note = store.restore_if_gone()
    assert note and "deleted" in note
    store.update_job(job, state="running")
    store.close()
    with Store(path) as again:
        assert again.get_job(job).state == "running"
        assert [e["kind"] for e in again.history.events()] == ["submitted"]


def test_only_finite_in_bounds_samples_are_stored_and_no_job_outweighs_the_node(tmp_path):
    with Store(tmp_path / "s.db") as store:
        with pytest.raises(ValueError, match="out of bounds"):
            store.tpm.add_sample("j", LoadingSample(2, 8, float("nan")))
        with pytest.raises(ValueError, match="out of bounds"):
            store.tpm.add_sample("j", TrainingSample(32, 1, 3.6, 11.7, float("inf")))
        assert store.tpm.samples() == ([], [])
        store.tpm.add_samples("loud", [LoadingSample(1, 8, 100.0 + i) for i in range(50)])
        store.tpm.add_samples("quiet", [LoadingSample(2, 8, 7.0)])
        _, loading = store.tpm.samples(per_job=5)
        assert [s.loading_rate for s in loading] == [145.0, 146.0, 147.0, 148.0, 149.0, 7.0]


def test_pruning_keeps_what_a_fit_reads(tmp_path):
    with Store(tmp_path / "s.db") as store:
        for j in range(5):
            store.tpm.add_samples(f"j{j}", [LoadingSample(1, 8, float(i + 1)) for i in range(30)])
        assert store.tpm.prune_samples(per_job=10, per_kind=40) == 130
        assert store.tpm.sample_counts() == {"loading": 20}  # j4's and j3's newest ten
        _, loading = store.tpm.samples(per_job=3, newest=5)
        assert [s.loading_rate for s in loading] == [29.0, 30.0, 28.0, 29.0, 30.0]


def test_fitted_models_are_bounded_newest_kept(tmp_path):
    """A busy node refits every few tens of seconds for months: the store keeps the newest
    ``MODELS_KEPT`` fitted models, not every one."""
    from adloader.daemon.store.tpm import MODELS_KEPT

    store = Store(tmp_path / "s.db")
    for v in range(3 * MODELS_KEPT):
        store.tpm.save_model({"v": v})
    assert store.tpm.latest_model() == {"v": 3 * MODELS_KEPT - 1}
    assert store.database.query("SELECT COUNT(*) FROM models")[0][0] == MODELS_KEPT


def test_sample_counts_follow_adds_and_prunes_without_reading_every_sample(tmp_path):
    """``GET /v1/model`` shows the counts: they are counted from the file once, then kept
    as samples are added from several threads at once, and counted again after a prune."""
    with Store(tmp_path / "s.db") as store:
        store.tpm.add_samples("a", [LoadingSample(1, 8, 1.0)] * 3)
        assert store.tpm.sample_counts() == {"loading": 3}
        statements = []
        store.database.conn.set_trace_callback(statements.append)

        def add(job: str) -> None:
            for i in range(20):
                store.tpm.add_samples(job, [LoadingSample(1, 8, 2.0), TrainingSample(
                    batch_size=32, gpus=1, flops_g=3.6, params_m=11.7, step_s=0.1 + i)])

        threads = [threading.Thread(target=add, args=(f"j{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert store.tpm.sample_counts() == {"loading": 83, "training": 80}
        assert not [s for s in statements if "COUNT" in s.upper()]  # kept, not counted again
        store.database.conn.set_trace_callback(None)
        truth = dict(store.database.query("SELECT kind, COUNT(*) FROM samples GROUP BY kind"))
        assert store.tpm.sample_counts() == truth
        store.tpm.prune_samples(per_job=5, per_kind=1000)
        assert store.tpm.sample_counts() == {"loading": 23, "training": 20}
