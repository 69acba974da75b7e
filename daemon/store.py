"""The daemon's state in one SQLite file (WAL): jobs, events, TPM samples and fitted models.

Every write is one transaction under an internal lock, so threads may share a Store; the
file survives a daemon restart. Job ids are ``j-000001``, ``j-000002``, ... in submit order.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from adloader.errors import InputError
from adloader.jobspec import JobSpec, describe_error
from adloader.samples import LoadingSample, TrainingSample

JOB_STATES = ("queued", "buffered", "running", "paused", "finished", "failed", "lost",
              "cancelled")  # fmt: skip
FINAL_STATES = ("finished", "failed", "lost", "cancelled")
ORIGINS = ("rest", "attached")
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
    token TEXT NOT NULL, workers INTEGER, pid INTEGER, exit_code INTEGER,
    submitted_at REAL NOT NULL, started_at REAL, finished_at REAL, log_path TEXT,
    origin TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    model TEXT, batch_size INTEGER, gpus INTEGER, flops_g REAL, params_m REAL, step_s REAL,
    job_workers INTEGER, node_workers INTEGER, loading_rate REAL);
CREATE TABLE IF NOT EXISTS models (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, json TEXT NOT NULL);
"""
_UPDATABLE = ("name", "state", "token", "workers", "pid", "exit_code", "started_at",
              "finished_at", "log_path")  # fmt: skip


@dataclass(frozen=True)
class JobRecord:
    """One row of ``jobs``: the spec as submitted and what the daemon has made of it."""

    id: str
    name: str
    spec: JobSpec
    state: str
    token: str
    workers: int | None
    pid: int | None
    exit_code: int | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    log_path: str | None
    origin: str


class Store:
    """SQLite-backed state of one daemon (``path`` is created with its parent folders)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False,
                                       isolation_level=None, timeout=10.0)  # fmt: skip
        except (OSError, sqlite3.Error) as exc:
            raise InputError(f"{self.path}: cannot open the state database: {exc}") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise InputError(f"{self.path}: state database has schema version {version}, "
                                 f"newer than this adloader's {SCHEMA_VERSION}")  # fmt: skip
            with self._lock:
                self._db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            self._db.close()
            raise InputError(f"{self.path}: not a usable adloader state database: {exc}") from None
        except InputError:
            self._db.close()
            raise

    # -- plumbing ----------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: committed, or rolled back on an exception."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(params)).fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- jobs --------------------------------------------------------------------------
    def add_job(self, spec: JobSpec, token: str, origin: str = "rest", state: str = "queued",
                t: float | None = None, job_id: str | None = None) -> str:
        """Store a new job; returns its id (``j-000001``..., or ``job_id`` when given: a job
        started by hand names itself)."""
        _check("state", state, JOB_STATES)
        _check("origin", origin, ORIGINS)
        with self._transaction() as db:
            if job_id is None:
                (last,) = db.execute(
                    "SELECT COALESCE(MAX(CAST(substr(id, 3) AS INTEGER)), 0) FROM jobs "
                    "WHERE id LIKE 'j-%'").fetchone()
                job_id = f"j-{last + 1:06d}"
            db.execute(
                "INSERT INTO jobs (id, name, spec, state, token, submitted_at, origin) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, spec.name, spec.model_dump_json(), state, token,
                 time.time() if t is None else t, origin),
            )  # fmt: skip
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
            with self._transaction() as db:
                db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> JobRecord | None:
        rows = self._query(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _record(rows[0]) if rows else None

    def list_jobs(self, states: Iterable[str] | None = None) -> list[JobRecord]:
        """Jobs in submit order, optionally only those in ``states``."""
        if states is None:
            rows = self._query(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY id")
        else:
            states = list(states)
            marks = ", ".join("?" * len(states))
            rows = self._query(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN ({marks}) ORDER BY id", states)
        return [_record(row) for row in rows]

    # -- events ------------------------------------------------------------------------
    def add_event(self, job: str | None, kind: str, data: dict | None = None,
                  t: float | None = None) -> int:
        """Append an event (``kind`` e.g. 'submitted', 'resize'); returns its id."""
        with self._transaction() as db:
            cur = db.execute("INSERT INTO events (t, job, kind, data) VALUES (?, ?, ?, ?)",
                             (time.time() if t is None else t, job, kind,
                              json.dumps(data or {})))  # fmt: skip
            return int(cur.lastrowid)

    def events(self, since_id: int = 0, limit: int = 500) -> list[dict]:
        """Events with id > ``since_id``, oldest first, at most ``limit``."""
        rows = self._query("SELECT id, t, job, kind, data FROM events WHERE id > ? "
                           "ORDER BY id LIMIT ?", (since_id, max(0, limit)))  # fmt: skip
        return [{"id": i, "t": t, "job": job, "kind": kind, "data": json.loads(data)}
                for i, t, job, kind, data in rows]  # fmt: skip

    # -- samples -----------------------------------------------------------------------
    def add_sample(self, job: str | None, sample: TrainingSample | LoadingSample,
                   t: float | None = None) -> int:
        """Store one TPM sample measured on ``job``; returns its id."""
        return self.add_samples(job, [sample], t)[-1]

    def add_samples(self, job: str | None, samples: Iterable[TrainingSample | LoadingSample],
                    t: float | None = None) -> list[int]:
        """Store several samples in one transaction; returns their ids."""
        t = time.time() if t is None else t
        ids = []
        with self._transaction() as db:
            for s in samples:
                if isinstance(s, TrainingSample):
                    row = (t, job, "training", s.model, s.batch_size, s.gpus, s.flops_g,
                           s.params_m, s.step_s, None, None, None)  # fmt: skip
                elif isinstance(s, LoadingSample):
                    row = (t, job, "loading", None, None, None, None, None, None,
                           s.job_workers, s.node_workers, s.loading_rate)  # fmt: skip
                else:
                    raise TypeError(f"not a sample: {s!r}")
                cur = db.execute(
                    "INSERT INTO samples (t, job, kind, model, batch_size, gpus, flops_g, "
                    "params_m, step_s, job_workers, node_workers, loading_rate) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                ids.append(int(cur.lastrowid))
        return ids

    def samples(self) -> tuple[list[TrainingSample], list[LoadingSample]]:
        """Every stored sample, oldest first: (training samples, loading samples)."""
        training = [
            TrainingSample(batch_size=b, gpus=n, flops_g=f, params_m=m, step_s=s, model=name or "")
            for b, n, f, m, s, name in self._query(
                "SELECT batch_size, gpus, flops_g, params_m, step_s, model FROM samples "
                "WHERE kind = 'training' ORDER BY id")
        ]
        loading = [
            LoadingSample(job_workers=d, node_workers=total, loading_rate=rate)
            for d, total, rate in self._query(
                "SELECT job_workers, node_workers, loading_rate FROM samples "
                "WHERE kind = 'loading' ORDER BY id")
        ]
        return training, loading

    # -- fitted models -----------------------------------------------------------------
    def save_model(self, model_json: dict, t: float | None = None) -> int:
        """Keep a fitted TPM (``ThroughputModel.to_json()``); returns its id."""
        with self._transaction() as db:
            cur = db.execute("INSERT INTO models (t, json) VALUES (?, ?)",
                             (time.time() if t is None else t, json.dumps(model_json)))
            return int(cur.lastrowid)

    def latest_model(self) -> dict | None:
        """The most recently saved model's JSON, or None."""
        rows = self._query("SELECT json FROM models ORDER BY id DESC LIMIT 1")
        return json.loads(rows[0][0]) if rows else None


_JOB_COLUMNS = ("id, name, spec, state, token, workers, pid, exit_code, submitted_at, "
                "started_at, finished_at, log_path, origin")  # fmt: skip


def _record(row: tuple) -> JobRecord:
    values = list(row)
    try:
        values[2] = JobSpec.model_validate_json(values[2])
    except ValidationError as exc:
        raise InputError(f"job {values[0]}: stored spec is no longer valid: "
                         f"{describe_error(exc.errors()[0])}") from None
    return JobRecord(*values)


def _check(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"job {field} {value!r} is not one of {', '.join(allowed)}")
