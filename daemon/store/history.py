"""Reading the store a page at a time (``GET /v1/jobs`` and ``GET /v1/events``): the
filters of ``rest.JobQuery`` and ``rest.EventQuery`` as SQL, and the cursors.

A page holds the items after its cursor, in id order, at most ``limit`` of them. A cursor
names the last item a page held, so a page is never shifted by what arrived or was pruned
since the one before: paging from the start reaches every job that was stored all along
exactly once. A jobs page has a next cursor while more jobs match; an events page always
has one (polling with it gets what happened since). Nothing here takes the node's lock: the
held jobs' records come from the store's memory, the history from the file.
"""

from __future__ import annotations

import json
import re
from typing import Any

from adloader import rest
from adloader.errors import InputError
from adloader.rest import EventQuery, JobQuery

from .database import Database
from .job_record import HISTORY_VIEW, JobRecord, number_sql

# an event as GET /v1/events shows it, written by SQLite from its row (each row's JSON built
# in C, outside the GIL), its data spliced in as stored (null where a row has none)
EVENT_VIEW = ("'{\"id\":' || id || ',\"t\":' || " + number_sql("t") +
              " || ',\"job\":' || json_quote(job) || ',\"kind\":' || json_quote(kind) ||"
              " ',\"data\":' || coalesce(data, 'null') || '}'")

JOB_CURSOR, EVENT_CURSOR = rest.JOB_CURSOR, rest.EVENT_CURSOR
_PATTERNS = {JOB_CURSOR: re.compile(rest.JOB_CURSOR_PATTERN),
             EVENT_CURSOR: re.compile(rest.EVENT_CURSOR_PATTERN)}
LAST_ID = 2**63 - 1  # SQLite's largest: no event id is past it


def encode_cursor(kind: str, after: str | int) -> str:
    """The cursor of the page after the item ``after`` (a job id or an event id): ``kind``
    and the id (``rest.JOB_CURSOR_PATTERN``, ``rest.EVENT_CURSOR_PATTERN``)."""
    return f"{kind}{after}"


def decode_cursor(kind: str, cursor: str) -> Any:
    """The item a cursor of ``kind`` names (an event id past SQLite's largest as the largest);
    InputError naming the parameter for a string that is not one (the API's schema refuses
    those first)."""
    if not isinstance(cursor, str) or not _PATTERNS[kind].fullmatch(cursor):
        which = rest.JOBS if kind == JOB_CURSOR else rest.EVENTS
        raise InputError(f"query parameter 'cursor': {str(cursor)[:40]!r} is not a cursor of "
                         f"GET {which} (pass on its answer's {rest.NEXT_CURSOR} header)")
    after = cursor[len(kind):]
    return after if kind == JOB_CURSOR else min(int(after), LAST_ID)


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


class History:
    """Pages of jobs and events read from ``database`` (on its readers); ``held`` is the
    store's jobs held in memory, by id (read, never changed here)."""

    def __init__(self, database: Database, held: dict[str, JobRecord]):
        self._database = database
        self._held = held

    def job_page(self, query: JobQuery) -> tuple[list, str | None]:
        """One page of jobs and the next cursor (None on the last page): each an (id, record,
        None) when held in memory (its view has a live part), else (id, None, its view's JSON
        as ``HISTORY_VIEW`` writes it)."""
        where, params = _job_filters(query)
        ids, views = self._in_one_step(
            HISTORY_VIEW, f"jobs {'WHERE ' + ' AND '.join(where) if where else ''}",
            (*params, query.limit + 1))
        more = len(ids) > query.limit
        held = self._held
        page = [(i, held[i], None) if i in held else (i, None, view.encode())
                for i, view in zip(ids[:query.limit], views[:query.limit], strict=True)]
        return page, encode_cursor(JOB_CURSOR, page[-1][0]) if more else None

    def event_page(self, query: EventQuery) -> tuple[bytes, str]:
        """One page of events as a JSON array (each ``data`` as stored, not parsed) and the
        cursor that follows it (the same one when the page is empty: poll with it)."""
        where, params = _event_filters(query)
        ids, views = self._in_one_step(EVENT_VIEW, f"events WHERE {' AND '.join(where)}",
                                       (*params, query.limit), numeric=True)
        body = ("[" + ",".join(views) + "]").encode()
        return body, encode_cursor(EVENT_CURSOR, int(ids[-1]) if ids else params[0])

    def _in_one_step(self, view: str, source: str, params: tuple,
                     numeric: bool = False) -> tuple[list[str], list[str]]:
        """The ids and views of ``SELECT id, view FROM source ORDER BY id LIMIT ?``, in id
        order (``numeric``: ids are numbers), read as one row: SQLite joins them
        (``group_concat``) in one step of the statement. Python's sqlite3 lets the GIL go
        around every step and takes it back only once the thread holding it lets it go (up
        to ``sys.getswitchinterval()``: 1 ms in the daemon, Python's default 5 ms): a page of
        500 rows read row by row beside a busy control loop waited up to 500 times (2.4 s at
        5 ms beside a Python thread that never waits; 14 ms joined; docs/benchmarks.md, "A
        page read in one step"). A view is JSON, whose strings escape the separator; an id
        matches ``limits.JOB_ID_PATTERN`` or is a number."""
        ((ids, views),) = self._database.read(
            "SELECT group_concat(id, char(30)), group_concat(coalesce(v, 'null'), char(30)) "
            f"FROM (SELECT id, {view} AS v FROM {source} ORDER BY id LIMIT ?)", params)
        if ids is None:
            return [], []
        ids, views = ids.split("\x1e"), views.split("\x1e")
        if ids != sorted(ids, key=int if numeric else None):  # the subquery's order: SQLite
            pairs = sorted(zip(ids, views, strict=True),  # keeps it, without promising to
                           key=lambda pair: int(pair[0]) if numeric else pair[0])
            ids, views = [i for i, _ in pairs], [v for _, v in pairs]
        return ids, views

    def events(self, since_id: int = 0, limit: int = 500) -> list[dict]:
        """Events with id > ``since_id``, oldest first, at most ``limit``."""
        return json.loads(self.events_json(since_id, limit))

    def events_json(self, since_id: int = 0, limit: int = 500) -> bytes:
        """``events(since_id, limit)`` as a JSON array, its ``data`` as stored (not parsed)."""
        if limit <= 0:
            return b"[]"
        return self.event_page(EventQuery.model_construct(since=since_id, limit=limit))[0]
