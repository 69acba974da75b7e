"""The job's end of the control channel: one background thread that owns a ZeroMQ DEALER.

The thread creates its own context and socket (linger 0) and is the only code that touches
them, so forked DataLoader workers never do. The socket has no routing id of its own: the
daemon gives each connection one and knows the job by the token its messages carry, so
nobody can take the job's connection by naming it, and a reconnect (a daemon restart) is
recognised by its next message. It sends Register,
waits ``connect_timeout_s`` for the Allocation, hands every command to ``deliver`` (called
in this thread), sends a Heartbeat every ``heartbeat_s`` once allocated, and sends what
other threads ``post``. Without an Allocation in time it logs one line and keeps quiet.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable

import zmq

from adloader.host.threads import FullCollections
from adloader.protocol import (
    MAX_FRAME,
    Allocation,
    ProtocolError,
    Refused,
    Register,
    decode_to_job,
    encode,
)

FINAL_LINGER_MS = 250  # how long the last message (Finish) may take to leave


class Channel(threading.Thread):
    """Register, receive commands, heartbeat; ``stop(final)`` sends ``final`` and closes."""

    def __init__(
        self,
        endpoint: str,
        register: Register,
        deliver: Callable[[object], None],
        heartbeat: Callable[[], object],
        *,
        connect_timeout_s: float = 2.0,
        on_silent: Callable[[], None] | None = None,
        on_refused: Callable[[str], None] | None = None,
        collections: FullCollections | None = None,
    ):
        super().__init__(name=f"adloader-master-{register.job}", daemon=True)
        self.endpoint = endpoint
        self.register = register
        self._deliver = deliver
        self._heartbeat = heartbeat
        self._connect_timeout_s = connect_timeout_s
        self._on_silent = on_silent or (lambda: None)
        self._on_refused = on_refused or (lambda reason: None)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()
        self._wake_closed = False
        self._stopping = False
        self._final = None
        self.allocated = threading.Event()  # an Allocation arrived
        self.settled = threading.Event()  # allocated, refused or timed out
        self.refused: str | None = None
        self.heartbeat_s = 1.0
        self.dropped_frames = 0  # malformed frames from the daemon
        self.cpu_s = 0.0  # this thread's CPU seconds so far (the master's overhead)
        self.gc_s = 0.0  # of its time, what full collections took (the process's: not in cpu_s)
        self._collections = collections or FullCollections()  # unstarted: spent 0

    # -- called from other threads ----------------------------------------------------
    def post(self, message) -> None:
        """Queue a message for the daemon (thread-safe; never blocks)."""
        self._outbox.put(message)
        self._wake()

    def stop(self, final=None, timeout_s: float = 2.0) -> None:
        """Send ``final`` (if any) after everything posted, close the socket, join."""
        self._final = final
        self._stopping = True
        self._wake()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout_s)

    def _wake(self) -> None:
        with self._wake_lock:
            if self._wake_closed:
                return
            with contextlib.suppress(BlockingIOError):  # pipe full: already woken
                os.write(self._wake_w, b"\0")

    # -- the thread ---------------------------------------------------------------------
    def run(self) -> None:
        context = zmq.Context()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        sock.setsockopt(zmq.MAXMSGSIZE, 4 * MAX_FRAME)
        linger = 0
        try:
            sock.connect(self.endpoint)
            self._send(sock, self.register)
            linger = self._loop(sock)
        except zmq.ZMQError:  # a bad endpoint: behave as if no daemon answered
            if not self.settled.is_set():
                self.settled.set()
                self._on_silent()
        finally:
            sock.close(linger=linger)
            context.term()
            with self._wake_lock:
                self._wake_closed = True
                os.close(self._wake_r)
                os.close(self._wake_w)

    def _loop(self, sock) -> int:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        connect_deadline = time.monotonic() + self._connect_timeout_s
        next_beat = None
        while True:
            self.gc_s = self._collections.spent()
            self.cpu_s = time.thread_time() - self.gc_s
            now = time.monotonic()
            waits = []
            if not self.settled.is_set():
                waits.append(connect_deadline - now)
            if next_beat is not None:
                waits.append(next_beat - now)
            timeout = None if not waits else max(0, int(min(waits) * 1000) + 1)
            ready = dict(poller.poll(timeout))
            if self._wake_r in ready:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            if sock in ready:
                for message in self._receive(sock):
                    if isinstance(message, Refused):
                        self.refused = message.reason
                        next_beat = None
                        self.settled.set()
                        self._on_refused(message.reason)
                    elif self.refused is None:
                        if isinstance(message, Allocation):
                            self.heartbeat_s = message.heartbeat_s
                            if next_beat is None:
                                next_beat = time.monotonic() + self.heartbeat_s
                            self.allocated.set()
                            self.settled.set()
                        self._deliver(message)
            while True:
                try:
                    self._send(sock, self._outbox.get_nowait())
                except queue.Empty:
                    break
            if self._stopping:
                if self._final is not None and self.refused is None:
                    self._send(sock, self._final)
                    return FINAL_LINGER_MS
                return 0
            now = time.monotonic()
            if not self.settled.is_set() and now >= connect_deadline:
                self.settled.set()
                self._on_silent()
            if next_beat is not None and now >= next_beat:
                beat = self._heartbeat()
                if beat is not None:
                    self._send(sock, beat)
                next_beat = max(next_beat + self.heartbeat_s, now)

    def _receive(self, sock) -> list:
        out = []
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return out
            if len(frames) != 1:
                self.dropped_frames += 1
                continue
            try:
                out.append(decode_to_job(frames[0]))
            except ProtocolError:
                self.dropped_frames += 1

    @staticmethod
    def _send(sock, message) -> None:
        with contextlib.suppress(zmq.Again):  # queue full while the daemon is away
            sock.send(encode(message), zmq.NOBLOCK)
