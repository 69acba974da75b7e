"""The store's readers: read-only SQLite connections that reads of the history are made on.

In WAL mode a reader sees the last commit without waiting for the lock a write holds. One
reader shared under a lock made reads queue behind each other instead: under
``adloader bench soak`` a client's page of 500 jobs waited up to 41 ms while another
client's page of 5,000 held it (docs/benchmarks.md, "Reads side by side"). Each read takes
a connection of its own, opened when none is idle, at most ``MOST`` of them; SQLite steps
outside the GIL, so two reads run on two cores. A connection whose read failed is closed
(the next read opens another); the store reads on its writer when none can be had.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

MOST = 4  # readers open at once: the REST server's threads, the control loop, /metrics
CLOSE_WAIT_S = 5.0  # how long ``close`` waits for reads under way to end
CACHE_KIB = 256  # each reader's page cache: the OS caches the file


class Readers:
    """A pool of read-only connections to the SQLite file at ``path``; thread-safe."""

    def __init__(self, path: Path, most: int = MOST):
        self._uri = f"{path.absolute().as_uri()}?mode=ro"
        self.most = most
        self._idle: list[sqlite3.Connection] = []
        self._open = 0  # idle and taken
        self._closed = False
        self._changed = threading.Condition()

    @property
    def open(self) -> int:
        return self._open

    def take(self) -> sqlite3.Connection | None:
        """A connection for one read (give it back with ``give_back``); waits while
        ``most`` are taken; None once closed or where none opens."""
        with self._changed:
            while not self._closed and not self._idle and self._open >= self.most:
                self._changed.wait()
            if self._closed:
                return None
            if self._idle:
                return self._idle.pop()
            self._open += 1
        try:
            conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False,
                                   isolation_level=None, timeout=10.0)
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            return conn
        except sqlite3.Error:
            self._let_go(None)
            return None

    def give_back(self, conn: sqlite3.Connection, failed: bool = False) -> None:
        """``conn`` idle again; closed instead after a failed read or once closed."""
        with self._changed:
            if not failed and not self._closed:
                self._idle.append(conn)
                self._changed.notify()
                return
        self._let_go(conn)

    def _let_go(self, conn: sqlite3.Connection | None) -> None:
        if conn is not None:
            conn.close()
        with self._changed:
            self._open -= 1
            self._changed.notify_all()

    def close(self) -> None:
        """Close the idle connections, then wait (at most ``CLOSE_WAIT_S``) for those taken:
        each is closed as it comes back. Reads that come later get None."""
        with self._changed:
            self._closed = True
            idle, self._idle = self._idle, []
            self._changed.notify_all()  # a read waiting for a reader: none comes now
        for conn in idle:
            self._let_go(conn)
        deadline = time.monotonic() + CLOSE_WAIT_S
        with self._changed:
            while self._open > 0 and time.monotonic() < deadline:
                self._changed.wait(deadline - time.monotonic())
