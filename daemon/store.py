"""The daemon's state in one SQLite file (WAL): jobs, events, TPM samples and fitted models.

Every write is one transaction under an internal lock, so threads may share a Store; the
file survives a daemon restart. Job ids are ``j-000001``, ``j-000002``, ... in submit order.
Jobs are also kept in memory (written through), so reading them costs no query. Tokens are
never stored, only their keyed digests (``daemon.tokens``). Anything SQLite reports — a
damaged file, a full disk — becomes a StorageError that names the file and what to do.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from adloader import limits
from adloader.errors import StorageError
from adloader.rest import JobSpec, SpecFeatures
from adloader.scheduling.samples import LoadingSample, TrainingSample

JOB_STATES = ("queued", "buffered", "running", "paused", "finished", "failed", "lost",
              "cancelled")  # fmt: skip
FINAL_STATES = ("finished", "failed", "lost", "cancelled")
ORIGINS = ("rest", "attached")
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, spec TEXT NOT NULL, state TEXT NOT NULL,
    token_digest TEXT NOT NULL, workers INTEGER, pid INTEGER, exit_code INTEGER,
    submitted_at REAL NOT NULL, started_at REAL, finished_at REAL, log_path TEXT,
    origin TEXT NOT NULL, supervisor TEXT, reason TEXT);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job TEXT, kind TEXT NOT NULL,
    model TEXT, batch_size INTEGER, gpus INTEGER, flops_g REAL, params_m REAL, step_s REAL,
    job_workers INTEGER, node_workers INTEGER, loading_rate REAL);
CREATE INDEX IF NOT EXISTS samples_job ON samples (job, kind, id);
CREATE TABLE IF NOT EXISTS models (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, json TEXT NOT NULL);
"""
_UPDATABLE = ("name", "state", "workers", "pid", "exit_code", "started_at", "finished_at",
              "log_path", "supervisor", "reason", "token_digest")  # fmt: skip
_DAMAGED = ("move it aside (mv {path} {path}.damaged) and start the daemon again: running "
            "jobs re-attach to the new one, the history in the old file is kept there")


@dataclass(frozen=True)
class JobRecord:
    """One row of ``jobs``: the spec as submitted and what the daemon has made of it."""

    id: str
    name: str
    spec: JobSpec
    state: str
    token_digest: str
    workers: int | None
    pid: int | None
    exit_code: int | None
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    log_path: str | None
    origin: str
    supervisor: str | None = None
    reason: str | None = None


def valid_sample(sample: TrainingSample | LoadingSample) -> bool:
    """Whether a measured sample is one the TPM may learn from: finite, positive, in bounds."""
    if isinstance(sample, TrainingSample):
        numbers = (sample.flops_g, sample.params_m, sample.step_s)
        return (all(math.isfinite(x) and x > 0 for x in numbers)
                and 0 < sample.batch_size <= limits.MAX_BATCH
                and 0 < sample.gpus <= limits.MAX_GPUS and sample.step_s <= limits.MAX_STEP_S)
    if isinstance(sample, LoadingSample):
        return (math.isfinite(sample.loading_rate) and 0 < sample.loading_rate <= limits.MAX_RATE
                and 0 < sample.job_workers <= sample.node_workers <= 64 * limits.MAX_WORKERS)
    return False


class Store:
    """SQLite-backed state of one daemon (``path`` is created with its parent folders).

    ``digest`` turns a v1 database's clear tokens into digests when it is opened."""

    def __init__(self, path: str | Path, digest: Callable[[str], str] | None = None):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._digest = digest
        self._open()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False,
                                       isolation_level=None, timeout=10.0)  # fmt: skip
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"{self.path}: cannot open the state database: {exc}") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StorageError(f"{self.path}: state database has schema version {version}, "
                                   f"newer than this adloader's {SCHEMA_VERSION}")  # fmt: skip
            check = self._db.execute("PRAGMA quick_check(1)").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            with self._lock:
                if version == 1:
                    self._migrate_v1()
                self._db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._jobs = {row[0]: _record(row) for row in self._db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY id")}
        except sqlite3.Error as exc:
            self._db.close()
            why = " ".join(str(exc).replace("*** in database main ***", "").split())
            raise StorageError(f"{self.path}: not a usable adloader state database ({why}); "
                               + _DAMAGED.format(path=self.path)) from None
        except StorageError:
            self._db.close()
            raise
        self._identity = _file_identity(self.path)

    def _migrate_v1(self) -> None:
        """Schema 1 kept tokens in clear: keep their digests instead."""
        if self._digest is None:
            raise StorageError(f"{self.path}: schema 1 holds clear tokens; open it with the "
                               "daemon's token key to migrate it")
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("ALTER TABLE jobs RENAME COLUMN token TO token_digest")
        self._db.execute("ALTER TABLE jobs ADD COLUMN supervisor TEXT")
        self._db.execute("ALTER TABLE jobs ADD COLUMN reason TEXT")
        for job_id, token in self._db.execute("SELECT id, token_digest FROM jobs").fetchall():
            self._db.execute("UPDATE jobs SET token_digest = ? WHERE id = ?",
                             (self._digest(token), job_id))
        self._db.execute("COMMIT")

    # -- plumbing ----------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: committed, or rolled back on an exception;
        an SQLite failure (a full disk, a damaged file) is a StorageError."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    with suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._failed(exc) from None
                raise

    def _failed(self, exc: sqlite3.Error) -> StorageError:
        text = str(exc)
        if "full" in text or "I/O" in text:
            return StorageError(f"{self.path}: cannot write the state database ({text}): "
                                "free space in the state directory")
        return StorageError(f"{self.path}: the state database failed ({text}); "
                            + _DAMAGED.format(path=self.path))

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise self._failed(exc) from None

    def close(self) -> None:
        """Checkpoint the WAL into the file and close."""
        with self._lock:
            with suppress(sqlite3.Error):
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def restore_if_gone(self) -> str | None:
        """If the file was deleted or replaced under the daemon, write what the open
        connection still holds back to ``path`` and carry on there; says what happened."""
        now = _file_identity(self.path)
        if now == self._identity:
            return None
        with self._lock:
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
                self._db.backup(copy)
            finally:
                copy.close()
            os.replace(tmp, self.path)
            self._db.close()
            self._open()
        return (f"{self.path}: the state database was {what} while the daemon ran; "
                "it was written back from the daemon's open copy")

    # -- jobs --------------------------------------------------------------------------
    def add_job(self, spec: JobSpec, token_digest: str, origin: str = "rest",
                state: str = "queued", t: float | None = None, job_id: str | None = None,
                supervisor: str | None = None) -> str:
        """Store a new job; returns its id (``j-000001``..., or ``job_id`` when given: a job
        started by hand names itself)."""
        _check("state", state, JOB_STATES)
        _check("origin", origin, ORIGINS)
        t = time.time() if t is None else t
        with self._transaction() as db:
            if job_id is None:
                (last,) = db.execute(
                    "SELECT COALESCE(MAX(CAST(substr(id, 3) AS INTEGER)), 0) FROM jobs "
                    "WHERE id GLOB 'j-[0-9]*'").fetchone()
                job_id = f"j-{last + 1:06d}"
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
            with self._transaction() as db:
                db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*fields.values(), job_id))
            if job_id in self._jobs:
                self._jobs[job_id] = replace(self._jobs[job_id], **fields)
        return self._jobs.get(job_id)

    def get_job(self, job_id: str) -> JobRecord | None:
        return self._jobs.get(job_id)

    def list_jobs(self, states: Iterable[str] | None = None) -> list[JobRecord]:
        """Jobs in id order, optionally only those in ``states``."""
        with self._lock:
            jobs = sorted(self._jobs.values(), key=lambda r: r.id)
        if states is None:
            return jobs
        wanted = set(states)
        return [job for job in jobs if job.state in wanted]

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

    def events_json(self, since_id: int = 0, limit: int = 500) -> bytes:
        """``events(since_id, limit)`` as a JSON array, its ``data`` as stored (not parsed)."""
        rows = self._query("SELECT id, t, job, kind, data FROM events WHERE id > ? "
                           "ORDER BY id LIMIT ?", (since_id, max(0, limit)))  # fmt: skip
        return ("[" + ",".join(
            f'{{"id":{i},"t":{t!r},"job":{json.dumps(job)},"kind":{json.dumps(kind)},'
            f'"data":{data}}}' for i, t, job, kind, data in rows) + "]").encode()

    # -- samples -----------------------------------------------------------------------
    def add_sample(self, job: str | None, sample: TrainingSample | LoadingSample,
                   t: float | None = None) -> int:
        """Store one TPM sample measured on ``job``; returns its id."""
        return self.add_samples(job, [sample], t)[-1]

    def add_samples(self, job: str | None, samples: Iterable[TrainingSample | LoadingSample],
                    t: float | None = None) -> list[int]:
        """Store several samples of one job in one transaction; returns their ids."""
        return self.add_job_samples([(job, s) for s in samples], t)

    def add_job_samples(self, samples: Iterable[tuple[str | None, TrainingSample |
                                                        LoadingSample]],
                        t: float | None = None) -> list[int]:
        """Store (job, sample) pairs in one transaction; a sample that is not finite and in
        bounds (``valid_sample``) is a ValueError and nothing is stored."""
        t = time.time() if t is None else t
        ids = []
        with self._transaction() as db:
            for job, s in samples:
                if not isinstance(s, TrainingSample | LoadingSample):
                    raise TypeError(f"not a sample: {s!r}")
                if not valid_sample(s):
                    raise ValueError(f"sample out of bounds: {s!r}")
                if isinstance(s, TrainingSample):
                    row = (t, job, "training", s.model, s.batch_size, s.gpus, s.flops_g,
                           s.params_m, s.step_s, None, None, None)  # fmt: skip
                else:
                    row = (t, job, "loading", None, None, None, None, None, None,
                           s.job_workers, s.node_workers, s.loading_rate)  # fmt: skip
                cur = db.execute(
                    "INSERT INTO samples (t, job, kind, model, batch_size, gpus, flops_g, "
                    "params_m, step_s, job_workers, node_workers, loading_rate) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                ids.append(int(cur.lastrowid))
        return ids

    def samples(self, per_job: int | None = None, newest: int | None = None
                ) -> tuple[list[TrainingSample], list[LoadingSample]]:
        """Stored samples, oldest first: (training, loading); with ``per_job``, only each
        job's newest that many of each kind, so no one job outweighs the node; with
        ``newest``, only the newest that many of each kind (read as such, not cut after)."""
        cut = "" if per_job is None else f"WHERE n <= {int(per_job)}"
        limit = "" if newest is None else f"LIMIT {int(newest)}"
        out = []
        for kind in ("training", "loading"):
            rows = self._query(
                "SELECT model, batch_size, gpus, flops_g, params_m, step_s, job_workers, "
                "node_workers, loading_rate FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
                f"job ORDER BY id DESC) AS n FROM samples WHERE kind = ?) {cut} "
                f"ORDER BY id DESC {limit}", (kind,))
            if kind == "training":
                found = [TrainingSample(batch_size=b, gpus=n, flops_g=f, params_m=m, step_s=s,
                                        model=name or "")
                         for name, b, n, f, m, s, *_ in reversed(rows)]
            else:
                found = [LoadingSample(job_workers=d, node_workers=total, loading_rate=rate)
                         for *_, d, total, rate in reversed(rows)]
            out.append([x for x in found if valid_sample(x)])
        return out[0], out[1]

    def prune_samples(self, per_job: int, per_kind: int) -> int:
        """Forget samples a fit will never read: all but each job's newest ``per_job`` of
        each kind, and all but the newest ``per_kind`` of each kind; returns how many went."""
        with self._transaction() as db:
            cur = db.execute(
                "DELETE FROM samples WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() "
                "OVER (PARTITION BY job, kind ORDER BY id DESC) AS n, ROW_NUMBER() OVER "
                "(PARTITION BY kind ORDER BY id DESC) AS m FROM samples) WHERE n > ? OR m > ?)",
                (int(per_job), int(per_kind)))
            return cur.rowcount

    def sample_counts(self) -> dict[str, int]:
        """How many samples of each kind are stored: {"training": n, "loading": m}."""
        return dict(self._query("SELECT kind, COUNT(*) FROM samples GROUP BY kind"))

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


_JOB_COLUMNS = ("id, name, spec, state, token_digest, workers, pid, exit_code, submitted_at, "
                "started_at, finished_at, log_path, origin, supervisor, reason")  # fmt: skip


def _file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _record(row: tuple) -> JobRecord:
    values = list(row)
    try:
        values[2] = JobSpec.model_validate_json(values[2])
    except ValidationError:  # accepted under older bounds: kept as it was stored
        try:
            raw = json.loads(values[2])
            features = raw.get("features")
            if isinstance(features, dict):
                raw["features"] = SpecFeatures.model_construct(**features)
            values[2] = JobSpec.model_construct(**raw)
        except (ValueError, TypeError, AttributeError):
            raise StorageError(f"job {values[0]}: its stored spec is unreadable") from None
    return JobRecord(*values)


def _check(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"job {field} {value!r} is not one of {', '.join(allowed)}")
