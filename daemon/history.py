"""Reading the store a page at a time (``GET /v1/jobs`` and ``GET /v1/events``): the
filters of ``rest.JobQuery`` and ``rest.EventQuery`` as SQL, and the opaque cursors.

A page holds the items after its cursor, in id order, at most ``limit`` of them. A cursor
names the last item a page held, so a page is never shifted by what arrived or was pruned
since the one before: paging from the start reaches every job that was stored all along
exactly once. A jobs page has a next cursor while more jobs match; an events page always
has one (polling with it gets what happened since). Nothing here takes the node's lock: the
held jobs' records come from the store's memory, the history from the file.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from adloader import rest
from adloader.errors import InputError
from adloader.rest import EventQuery, JobQuery

from .job_record import HISTORY_VIEW, number_sql

# an event as GET /v1/events shows it, written by SQLite from its row (each row's JSON built
# in C, outside the GIL), its data spliced in as stored (null where a row has none)
EVENT_VIEW = ("'{\"id\":' || id || ',\"t\":' || " + number_sql("t") +
              " || ',\"job\":' || json_quote(job) || ',\"kind\":' || json_quote(kind) ||"
              " ',\"data\":' || coalesce(data, 'null') || '}'")

JOB_CURSOR, EVENT_CURSOR = "j", "e"


def encode_cursor(kind: str, after: str | int) -> str:
    """The cursor of the page after the item ``after`` (a job id or an event id)."""
    raw = json.dumps([kind, after], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str) -> Any:
    """The item a cursor of ``kind`` names; InputError naming the parameter otherwise."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found, after = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        found = after = None
    valid = str if kind == JOB_CURSOR else int
    if found != kind or not isinstance(after, valid) or isinstance(after, bool):
        which = rest.JOBS if kind == JOB_CURSOR else rest.EVENTS
        raise InputError(f"query parameter 'cursor': {cursor[:40]!r} is not a cursor of "
                         f"GET {which} (pass on its answer's {rest.NEXT_CURSOR} header)")
    return after


def _where(conditions: list[tuple[str, Any]]) -> tuple[list[str], list[Any]]:
    """The SQL conditions whose value is given (a list fills an ``IN (?)``), and their
    parameters."""
    where, params = [], []
    for sql, value in conditions:
        if value is None or value == []:
            continue
        values = value if isinstance(value, list) else [value]
        where.append(sql.replace("(?)", f"({','.join('?' * len(values))})"))
        params += values
    return where, params


def _job_filters(query: JobQuery) -> tuple[list[str], list[Any]]:
    after = None if query.cursor is None else decode_cursor(JOB_CURSOR, query.cursor)
    return _where([("id > ?", after), ("state IN (?)", list(query.state)),
                   ("name = ?", query.name), ("submitted_at >= ?", query.since),
                   ("submitted_at < ?", query.until)])


def _event_filters(query: EventQuery) -> tuple[list[str], list[Any]]:
    after = query.since
    if query.cursor is not None:
        after = max(after, decode_cursor(EVENT_CURSOR, query.cursor))
    return _where([("id > ?", after), ("job = ?", query.job), ("kind IN (?)", list(query.kind)),
                   ("job IN (SELECT id FROM jobs WHERE name = ?)", query.name),
                   ("t >= ?", query.t_since), ("t < ?", query.t_until)])


class HistoryMixin:
    """Pages of jobs and events; the Store provides ``_read``, ``_jobs`` and the rows."""

    def job_page(self, query: JobQuery) -> tuple[list, str | None]:
        """One page of jobs and the next cursor (None on the last page): each an (id, record,
        None) when held in memory (its view has a live part), else (id, None, its view's JSON
        as ``HISTORY_VIEW`` writes it)."""
        where, params = _job_filters(query)
        rows = self._read(f"SELECT id, {HISTORY_VIEW} FROM jobs "
                          f"{'WHERE ' + ' AND '.join(where) if where else ''} "
                          "ORDER BY id LIMIT ?", (*params, query.limit + 1))
        more = len(rows) > query.limit
        rows = rows[:query.limit]
        held = self._jobs
        page = [(i, held[i], None) if i in held else (i, None, view.encode())
                for i, view in rows]
        return page, encode_cursor(JOB_CURSOR, rows[-1][0]) if more else None

    def event_page(self, query: EventQuery) -> tuple[bytes, str]:
        """One page of events as a JSON array (each ``data`` as stored, not parsed) and the
        cursor that follows it (the same one when the page is empty: poll with it)."""
        where, params = _event_filters(query)
        rows = self._read(f"SELECT id, {EVENT_VIEW} FROM events WHERE "
                          f"{' AND '.join(where)} ORDER BY id LIMIT ?",
                          (*params, query.limit))
        body = ("[" + ",".join(view for _, view in rows) + "]").encode()
        return body, encode_cursor(EVENT_CURSOR, rows[-1][0] if rows else params[0])

    def events(self, since_id: int = 0, limit: int = 500) -> list[dict]:
        """Events with id > ``since_id``, oldest first, at most ``limit``."""
        return json.loads(self.events_json(since_id, limit))

    def events_json(self, since_id: int = 0, limit: int = 500) -> bytes:
        """``events(since_id, limit)`` as a JSON array, its ``data`` as stored (not parsed)."""
        if limit <= 0:
            return b"[]"
        return self.event_page(EventQuery.model_construct(since=since_id, limit=limit))[0]
