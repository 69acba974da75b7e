"""The state database's connections: the writer under one lock, the readers beside it, and
the fault while writes fail.

Every write is one transaction under ``lock`` (an RLock: a caller may hold it across a
transaction and what it does once that commits). Reads of the history are made on a reader
(``daemon.store.readers``), which in WAL mode sees the last commit without waiting for a
write; a read that cannot be made there is made on the writer, which says why. Anything
SQLite reports becomes a StorageError that names the file and what to do, its cause read
from the file system (``daemon.store.fault``); the first failure of a run of them is kept in
``fault`` until a write commits again, then moved to ``recovered``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from adloader.errors import StorageError

from .fault import CAUSES, StoreFault, diagnose
from .readers import Readers

DAMAGED = ("move it aside (mv {path} {path}.damaged) and start the daemon again: running "
           "jobs re-attach to the new one, the history in the old file is kept there")


class Database:
    """The SQLite file at ``path``: ``connect`` opens the writer (again, after the file was
    written back), ``open_readers`` the readers; thread-safe once open."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.RLock()
        self.conn: sqlite3.Connection | None = None  # the writer, once connected
        self.readers: Readers | None = None  # read-only connections (``read``)
        self.fault: StoreFault | None = None  # failing writes since, and why
        self.recovered: list[StoreFault] = []  # faults that ended: their owner records them
        self._diagnosed = 0.0  # when the last failure's cause was read from the file system

    def connect(self) -> sqlite3.Connection:
        """The writer, opened in place of any before it (autocommit: ``transaction`` begins
        and ends each write); a StorageError when the file cannot be opened."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(self.path), check_same_thread=False,
                                        isolation_level=None, timeout=10.0)  # fmt: skip
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"{self.path}: cannot open the state database: {exc}") from None
        return self.conn

    def open_readers(self) -> None:
        """Readers for pages of history (``read``): in WAL mode they read the last commit
        without waiting for the lock a write holds, side by side; those open before are
        closed."""
        old, self.readers = self.readers, Readers(self.path)
        if old is not None:
            old.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock: committed, or rolled back on an exception;
        an SQLite failure (a full disk, a damaged file) is a StorageError."""
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self.failed(exc) from None
            try:
                yield self.conn
                self.conn.execute("COMMIT")
                if self.fault is not None:  # writes go through again
                    self.recovered.append(self.fault)
                    self.fault = None
            except BaseException as exc:
                if self.conn.in_transaction:
                    with suppress(sqlite3.Error):
                        self.conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self.failed(exc) from None
                raise

    def failed(self, exc: sqlite3.Error) -> StorageError:
        """The error to raise for an SQLite failure, its cause read from the file system
        (``daemon.store.fault.diagnose``); kept in ``fault`` until a write succeeds."""
        text = str(exc)
        now = time.monotonic()
        if self.fault is not None and now - self._diagnosed < 1.0:  # a run of failures:
            cause = "" if self.fault.cause == "damaged" else self.fault.cause  # once a second
        else:
            cause, self._diagnosed = diagnose(self.path, text), now
        if cause:
            message = (f"{self.path}: cannot write the state database ({text}): "
                       f"{CAUSES[cause]}")
        else:
            message = (f"{self.path}: the state database failed ({text}); "
                       + DAMAGED.format(path=self.path))
        if self.fault is None or self.fault.cause != (cause or "damaged"):  # since the first
            since = self.fault.since if self.fault is not None else time.time()
            self.fault = StoreFault(cause or "damaged", message, since)
        return StorageError(message)

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        """The rows of one statement on the writer, under the lock."""
        with self.lock:
            try:
                return self.conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise self.failed(exc) from None

    def read(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        """``query`` on a reader of its own (``daemon.store.readers``), where one can be had
        and the read succeeds there (a read that fails is made again as ``query``, which
        says why)."""
        readers = self.readers
        conn = readers.take() if readers is not None else None
        if conn is not None:
            failed = True
            try:
                rows = conn.execute(sql, tuple(params)).fetchall()
                failed = False
            except sqlite3.Error:
                pass  # made again on the writer, which says why
            finally:
                readers.give_back(conn, failed=failed)
            if not failed:
                return rows
        return self.query(sql, params)

    def close(self) -> None:
        """Close the readers, checkpoint the WAL into the file and close the writer."""
        if self.readers is not None:
            self.readers.close()
        with self.lock:
            with suppress(sqlite3.Error):
                self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self.conn.close()
