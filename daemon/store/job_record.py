"""A job's row as the daemon reads it: ``JobRecord``, the columns it comes from, and how a
row becomes one (``daemon.store.store`` writes them; ``daemon.store.history`` reads pages of
them)."""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass

from pydantic import ValidationError

from adloader.errors import StorageError
from adloader.rest import JobSpec, SpecFeatures


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
    iteration: int | None = None  # written when it ends: its last iteration
    uid: int | None = None  # the user the kernel said registered it (None: not said)


JOB_COLUMNS = ("id, name, spec, state, token_digest, workers, pid, exit_code, submitted_at, "
                "started_at, finished_at, log_path, origin, supervisor, reason, "
                "iteration, uid")  # fmt: skip


def record_of(row: tuple, trusted: bool = False) -> JobRecord:
    """A row of ``jobs`` (``JOB_COLUMNS``) as a record; ``trusted``: its spec is taken as
    stored, unchecked (it was checked when stored: a page of history costs no validation)."""
    values = list(row)
    spec = None
    if not trusted:
        with suppress(ValidationError):  # accepted under older bounds: kept as it was stored
            spec = JobSpec.model_validate_json(values[2])
    values[2] = spec or _as_stored(values[0], values[2])
    return JobRecord(*values)


def _as_stored(job_id: str, text: str) -> JobSpec:
    """A stored spec as it is, unvalidated."""
    try:
        raw = json.loads(text)
        features = raw.get("features")
        if isinstance(features, dict):
            raw["features"] = SpecFeatures.model_construct(**features)
        return JobSpec.model_construct(**raw)
    except (ValueError, TypeError, AttributeError):
        raise StorageError(f"job {job_id}: its stored spec is unreadable") from None


def number_sql(column: str) -> str:
    """SQL writing a REAL column as JSON: 17 significant digits (SQLite's JSON functions keep
    15, which rounds a timestamp), ``null`` for NULL."""
    return f"CASE WHEN {column} IS NULL THEN 'null' ELSE printf('%!.17g', {column}) END"


def _field(name: str, sql: str) -> str:
    return f"'\"{name}\":' || {sql}"


HISTORY_VIEW = " || ',' || ".join([
    "'{' || " + _field("id", "json_quote(id)"), _field("name", "json_quote(name)"),
    _field("state", "json_quote(state)"), _field("workers", "json_quote(workers)"),
    _field("pid", "'null'"), _field("supervisor_pid", "json_quote(pid)"),
    _field("exit_code", "json_quote(exit_code)"), _field("reason", "json_quote(reason)"),
    _field("submitted_at", number_sql("submitted_at")),
    _field("started_at", number_sql("started_at")),
    _field("finished_at", number_sql("finished_at")), _field("throughput", "'null'"),
    _field("iteration", "json_quote(iteration)"), _field("cpu_percent", "'null'"),
    _field("uid", "json_quote(uid)"), _field("spec", "spec") + " || '}'"])
"""A job of the history as ``JobView.from_record`` shows it (nothing live), written by SQLite
from its row, its spec spliced in as stored: a page of 500 is built in C, outside the GIL,
no record made (tests/unit/daemon/test_store_retention.py holds it to ``from_record``'s answer)."""
