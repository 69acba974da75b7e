"""The one way a test waits for something to happen: a condition polled until a deadline
(never a sleep that hopes it has happened by then)."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll until predicate() is truthy and return its value; fail naming `what` after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)  # the poll's interval
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
