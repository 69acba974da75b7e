"""The daemon's state in one SQLite file (WAL): jobs, events, TPM samples and fitted models.

Every write is one transaction under the database's lock (``daemon.store.database``), so
threads may share a Store; the file survives a daemon restart. Job ids are ``j-000001``,
``j-000002``, ... in submit order, never given twice (the last number is kept in ``meta``, so
pruning cannot hand one out again). The jobs the daemon still manages (not finished, failed
or cancelled) are also held in memory, written through, so reading them costs no query; the
history is read from the file (``daemon.store.history``) and pruned
(``daemon.store.retention``); the TPM's samples and models are ``daemon.store.tpm``'s: each
an object the store holds, given the database and, where it needs them, the held jobs.
Tokens are never stored, only their keyed digests (``daemon.control.tokens``). Anything
SQLite reports — a damaged file, a full disk — becomes a StorageError that names the file
and what to do. An older schema is migrated only after the file is backed up beside it, and
a newer one is refused naming that backup (``daemon.store.backup``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from adloader.errors import StorageError
from adloader.rest import JOB_STATES, EventQuery, JobQuery, JobSpec

from ..control.live import TERMINAL
from . import backup, identity
from .database import DAMAGED, Database
from .fault import StoreFault
from .history import History
from .job_record import JOB_COLUMNS, JobRecord, record_of
from .retention import Pruner
from .tpm import TpmTables

FINAL_STATES = ("finished", "failed", "lost", "cancelled")
ORIGINS = ("rest", "attached")
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
    token_digest TEXT NOT NULL, workers INTEGER, pid INTEGER, exit_code INTEGER,
    submitted_at REAL NOT NULL, started_at REAL, finished_at REAL, log_path TEXT,
    origin TEXT NOT NULL, supervisor TEXT, reason TEXT, iteration INTEGER, uid INTEGER);
CREATE INDEX IF NOT EXISTS jobs_state_id ON jobs (state, id);
DROP INDEX IF EXISTS jobs_state;
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (finished_at);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events (job);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    model TEXT, batch_size INTEGER, gpus INTEGER, flops_g REAL, params_m REAL, step_s REAL,
    job_workers INTEGER, node_workers INTEGER, loading_rate REAL);
CREATE INDEX IF NOT EXISTS samples_job ON samples (job, kind, id);
CREATE TABLE IF NOT EXISTS models (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, json TEXT NOT NULL);
"""
_UPDATABLE = ("name", "state", "workers", "pid", "exit_code", "started_at", "finished_at",
              "log_path", "supervisor", "reason", "token_digest", "iteration", "uid")  # fmt: skip


class Store:
    """SQLite-backed state of one daemon (``path`` is created with its parent folders): its
    jobs and events; ``history`` reads them a page at a time, ``retention`` prunes them,
    ``tpm`` keeps the TPM's samples and models, all on one ``database``.

    ``digest`` turns a v1 database's clear tokens into digests when it is opened."""

    def __init__(self, path: str | Path, digest: Callable[[str], str] | None = None):
        self.path = Path(path)
        self._digest = digest
        self.identity_note: str | None = None  # not the database the folder last had
        self.database = Database(self.path)
        self._jobs: dict[str, JobRecord] = {}  # held in memory: the same dict all along
        self.history = History(self.database, self._jobs)
        self.retention = Pruner(self.database, self._jobs)
        self.tpm = TpmTables(self.database)
        self._open()

    @property
    def fault(self) -> StoreFault | None:
        """The first failed write of a run of failures, until a write succeeds again."""
        return self.database.fault

    @property
    def recovered(self) -> list[StoreFault]:
        """Faults that ended since the daemon last took them (it sets this to ``[]``)."""
        return self.database.recovered

    @recovered.setter
    def recovered(self, faults: list[StoreFault]) -> None:
        self.database.recovered = faults

    def _open(self) -> None:
        db = self.database.connect()
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:  # a rolled-back daemon: the backup named, if any
                raise StorageError(backup.newer_than_code(self.path, version,
                                                                SCHEMA_VERSION))
            check = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            with self.database.lock:
                if 0 < version < SCHEMA_VERSION:
                    self._migrate(db, version)
                db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
                columns = [row[1] for row in db.execute("PRAGMA table_info(jobs)")]
                for added in ("iteration", "uid"):  # added within schema 2: older daemons
                    if added not in columns:  # read by named columns, and ignore them
                        db.execute(f"ALTER TABLE jobs ADD COLUMN {added} INTEGER")
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                self.identity_note = identity.check(db, self.path)
            held = ",".join("?" * len(TERMINAL))
            jobs = {row[0]: record_of(row) for row in db.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE state NOT IN ({held}) ORDER BY id",
                TERMINAL)}
            for gone in self._jobs.keys() - jobs.keys():  # in place: ``history`` and
                self._jobs.pop(gone, None)  # ``retention`` read this dict
            self._jobs.update(jobs)
        except OSError as exc:  # the id file beside it
            db.close()
            raise StorageError(f"{identity.id_file(self.path)}: cannot write the state "
                               f"database's id: {exc.strerror}") from None
        except sqlite3.Error as exc:
            db.close()
            why = " ".join(str(exc).replace("*** in database main ***", "").split())
            raise StorageError(f"{self.path}: not a usable adloader state database ({why}); "
                               + DAMAGED.format(path=self.path)) from None
        except StorageError:
            db.close()
            raise
        try:
            self._identity = _file_identity(self.path)
        except OSError as exc:
            db.close()
            raise StorageError(f"{self.path}: cannot read the state database's file: "
                               f"{exc.strerror}") from None
        self.database.open_readers()

    def _migrate(self, db: sqlite3.Connection, version: int) -> None:
        """From schema ``version`` to this one, after a whole backup beside the file
        (``backup``) or not at all; a step sets the version it reaches in its own
        transaction, so a crash leaves the store at one version or the next."""
        if version == 1 and self._digest is None:
            raise StorageError(f"{self.path}: schema 1 holds clear tokens; open it with the "
                               "daemon's token key to migrate it")
        backup.before_migration(db, self.path, version, SCHEMA_VERSION)
        self._migrate_v1(db)

    def _migrate_v1(self, db: sqlite3.Connection) -> None:
        """Schema 1 kept tokens in clear: keep their digests instead."""
        db.execute("BEGIN IMMEDIATE")
        db.execute("ALTER TABLE jobs RENAME COLUMN token TO token_digest")
        db.execute("ALTER TABLE jobs ADD COLUMN supervisor TEXT")
        db.execute("ALTER TABLE jobs ADD COLUMN reason TEXT")
        for job_id, token in db.execute("SELECT id, token_digest FROM jobs").fetchall():
            db.execute("UPDATE jobs SET token_digest = ? WHERE id = ?",
                       (self._digest(token), job_id))
        db.execute("PRAGMA user_version=2")
        db.execute("COMMIT")

    def probe(self) -> None:
        """One small write (the time, in ``meta``): whether the store takes writes again."""
        with self.database.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('probe', ?)",
                       (int(time.time()),))

    def close(self) -> None:
        """Checkpoint the WAL into the file and close."""
        self.database.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restore_if_gone(self) -> str | None:
        """If the file was deleted or replaced under the daemon, write what the open
        connection still holds back to ``path`` and carry on there; says what happened.
        A file the disk cannot stat (EIO) is not taken for gone: the writes say the fault."""
        try:
            now = _file_identity(self.path)
        except OSError:
            return None
        if now == self._identity:
            return None
        with self.database.lock:
            what = "deleted" if now is None else "replaced"
            if now is not None:
                os.replace(self.path, self.path.with_name(f"{self.path.name}.replaced-"
                                                          f"{int(time.time())}"))
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            for suffix in ("-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
            tmp = self.path.with_name(self.path.name + ".restoring")
            tmp.unlink(missing_ok=True)
            copy = sqlite3.connect(str(tmp))
            try:
                self.database.conn.backup(copy)
            finally:
                copy.close()
            os.replace(tmp, self.path)
            self.database.conn.close()
            self._open()
        return (f"{self.path}: the state database was {what} while the daemon ran; "
                "it was written back from the daemon's open copy")

    # -- what the REST service reads (``daemon.api``) ---------------------------------
    def job_page(self, query: JobQuery) -> tuple[list, str | None]:
        """``History.job_page``."""
        return self.history.job_page(query)

    def event_page(self, query: EventQuery) -> tuple[bytes, str]:
        """``History.event_page``."""
        return self.history.event_page(query)

    def sample_counts(self) -> dict[str, int]:
        """``TpmTables.sample_counts``."""
        return self.tpm.sample_counts()

    # -- jobs --------------------------------------------------------------------------
    def add_job(self, spec: JobSpec, token_digest: str, origin: str = "rest",
                state: str = "queued", t: float | None = None, job_id: str | None = None,
                supervisor: str | None = None) -> str:
        """Store a new job; returns its id (``j-000001``..., or ``job_id`` when given: a job
        started by hand names itself)."""
        _check("state", state, JOB_STATES)
        _check("origin", origin, ORIGINS)
        t = time.time() if t is None else t
        with self.database.transaction() as db:
            if job_id is None:
                (last,) = db.execute(
                    "SELECT MAX(COALESCE((SELECT value FROM meta WHERE key = 'last_job'), 0), "
                    "COALESCE((SELECT MAX(CAST(substr(id, 3) AS INTEGER)) FROM jobs "
                    "WHERE id GLOB 'j-[0-9]*'), 0))").fetchone()
                job_id = f"j-{last + 1:06d}"
                db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('last_job', ?)",
                           (last + 1,))
            db.execute(
                "INSERT INTO jobs (id, name, spec, state, token_digest, submitted_at, origin, "
                "supervisor) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, spec.name, spec.model_dump_json(), state, token_digest, t, origin,
                 supervisor),
            )  # fmt: skip
        self._jobs[job_id] = JobRecord(job_id, spec.name, spec, state, token_digest, None, None,
                                       None, t, None, None, None, origin, supervisor)
        return job_id

    def update_job(self, job_id: str, **fields: Any) -> JobRecord | None:
        """Set some columns of a job; returns the updated record, None for an unknown id."""
        for key in fields:
            if key not in _UPDATABLE:
                raise ValueError(f"jobs.{key} cannot be updated")
        if "state" in fields:
            _check("state", fields["state"], JOB_STATES)
        if fields:
            sets = ", ".join(f"{key} = ?" for key in fields)
            with self.database.transaction() as db:
                db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))
            if job_id in self._jobs:
                self._jobs[job_id] = replace(self._jobs[job_id], **fields)
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> JobRecord | None:
        """A held job from memory; one of the history from the file; None if unknown."""
        held = self._jobs.get(job_id)
        if held is not None:
            return held
        # on the reader: a REST read of the history does not wait for a write (a prune)
        rows = self.database.read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return record_of(rows[0], trusted=True) if rows else None

    def held(self, job_id: str) -> bool:
        """Whether the job's record is held in memory (the daemon still manages it)."""
        return job_id in self._jobs

    def release(self, job_id: str) -> None:
        """The job has ended for good: its record stays in the file only."""
        self._jobs.pop(job_id, None)

    def list_jobs(self, states: Iterable[str] | None = None) -> list[JobRecord]:
        """Every stored job in id order (the history read from the file), optionally only
        those in ``states``; for a page of them, ``job_page``."""
        with self.database.lock:
            rows = self.database.query(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY id")
            jobs = [self._jobs.get(row[0]) or record_of(row, trusted=True) for row in rows]
        if states is None:
            return jobs
        wanted = set(states)
        return [job for job in jobs if job.state in wanted]

    def state_counts(self) -> dict[str, int]:
        """How many stored jobs are in each state."""
        return dict(self.database.read("SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    # -- events ------------------------------------------------------------------------
    def add_event(self, job: str | None, kind: str, data: dict | None = None,
                  t: float | None = None) -> int:
        """Append an event (``kind`` e.g. 'submitted', 'resize'); returns its id."""
        with self.database.transaction() as db:
            cur = db.execute("INSERT INTO events (t, job, kind, data) VALUES (?, ?, ?, ?)",
                             (time.time() if t is None else t, job, kind,
                              json.dumps(data or {})))  # fmt: skip
            return int(cur.lastrowid)


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``; None when it is gone (other errors are raised)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_dev, st.st_ino


def _check(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"job {field} {value!r} is not one of {', '.join(allowed)}")
