"""The daemon's end of the control channel (A-Dloader §III-C): one ZeroMQ ROUTER socket.

Each job's application master connects a DEALER; the ROUTER gives every connection a
routing id of its own (no ``ROUTER_HANDOVER``: a process that connects with a routing id
already in use does not take the connection over). The broker does not authenticate: the
scheduler checks each message's (job id, token) pair and sends a job's commands to the
connection that last proved its token. ``ROUTER_MANDATORY`` with non-blocking sends makes a
message to a gone or stuck peer fail at once instead of vanishing or blocking. Frames are
decoded by ``adloader.protocol``; anything malformed comes back from ``poll`` as a
ProtocolError entry, never as an exception. An ``ipc://`` socket file is 0600, or 0660 with
``group`` (tenants of that group may connect; each still speaks only for its own jobs). A
folder for the socket that the broker creates itself is 0700, or 0750 and owned by ``group``
with one; an existing folder is left as it is (it must let the group through).
Only one thread may use a Broker (ZeroMQ sockets are not thread-safe); any thread may
``wake`` it: a ``poll`` under way returns at once (a pipe in the same poller), so the loop
that owns it can sleep long when nothing is due and still act at once on what another
thread asked for.

On an ``ipc://`` socket the kernel tells who connected (``SO_PEERCRED``, which libzmq puts in
each message's ``Peer-Address`` property as ``ADDRESS:UID:GID:PID``): ``peer(routing id)``
gives that uid, gid and pid, taken when the connection was made — what a job says of itself
is never needed to know which process it is. None over ``tcp://`` (no credentials) or for a
peer in a PID namespace this daemon cannot see (pid 0).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import NamedTuple

import zmq

from adloader.errors import InputError
from adloader.protocol import (
    MAX_FRAME,
    Finish,
    Heartbeat,
    Paused,
    ProtocolError,
    Register,
    decode_from_job,
    encode,
)

FromJobMessage = Register | Heartbeat | Paused | Finish

# A peer that sends a frame beyond this is disconnected by libzmq itself; frames between
# MAX_FRAME and this reach ``decode`` and are reported as ProtocolError entries.
MAX_MESSAGE_BYTES = 4 * MAX_FRAME
MAX_DRAIN = 10_000  # messages one poll() takes at most, so a flood cannot starve the caller
MAX_PEERS = 4096  # connections whose credentials are kept (the oldest are forgotten first)


class Peer(NamedTuple):
    """What the kernel says of a connected process (``SO_PEERCRED`` at connect time), and
    when its first message came, in seconds since boot (the process was running then: a pid
    reused later names a process started after it)."""

    uid: int
    gid: int
    pid: int
    seen: float = 0.0


def peer_of(address: str | None) -> Peer | None:
    """The credentials in a ``Peer-Address`` property (``ADDRESS:UID:GID:PID``), or None."""
    fields = (address or "").rsplit(":", 3)
    if len(fields) != 4 or not all(f.isdigit() for f in fields[1:]):
        return None
    uid, gid, pid = (int(f) for f in fields[1:])
    return Peer(uid, gid, pid, time.clock_gettime(time.CLOCK_BOOTTIME)) if pid > 0 else None


def _ipc_path(endpoint: str) -> Path | None:
    """The socket file of an ``ipc://`` endpoint (None for the abstract namespace ``@``)."""
    rest = endpoint[len("ipc://"):]
    if not rest:
        raise InputError(f"control endpoint {endpoint!r}: ipc:// needs a path")
    return None if rest.startswith("@") else Path(rest)


def _gid(group: str) -> int:
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise InputError(f"socket group {group!r}: no such group") from None


def _give(path: Path, gid: int | None, mode: int, group: str | None) -> None:
    """Set ``path``'s group (when given) and mode; InputError naming what failed."""
    try:
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, mode)
    except OSError as exc:
        raise InputError(f"cannot give {path} to group {group!r} (mode {mode:o}): "
                         f"{exc.strerror}; is the daemon's user in that group?") from None


class Broker:
    """A bound ROUTER socket: ``poll`` what jobs sent, ``send`` them commands."""

    def __init__(self, endpoint: str, group: str | None = None):
        if not isinstance(endpoint, str) or not endpoint.startswith(("ipc://", "tcp://")):
            raise InputError(f"control endpoint {endpoint!r}: must be ipc://PATH or tcp://HOST:PORT")
        path = _ipc_path(endpoint) if endpoint.startswith("ipc://") else None
        gid = _gid(group) if group else None
        if path is not None:
            try:
                path.parent.mkdir(mode=0o700, parents=True)
            except FileExistsError:
                pass  # an existing folder keeps its owner and mode
            except OSError as exc:
                raise InputError(
                    f"control endpoint {endpoint!r}: cannot create {path.parent}: {exc.strerror}"
                ) from None
            else:
                if gid is not None:  # the group's members must reach the socket
                    _give(path.parent, gid, 0o750, group)
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        try:
            self._socket.bind(endpoint)
        except zmq.ZMQError as exc:
            self._socket.close(linger=0)
            self._context.term()
            raise InputError(f"control endpoint {endpoint!r}: cannot bind: {exc}") from None
        self._inode = None
        if path is not None:
            try:
                _give(path, gid, 0o660 if gid is not None else 0o600, group)
            except InputError:
                self._socket.close(linger=0)
                self._context.term()
                raise
            self._inode = os.stat(path).st_ino
        self.path = path
        self.endpoint: str = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._poller = zmq.Poller()
        self._poller.register(self._socket, zmq.POLLIN)
        self._peers: OrderedDict[bytes, Peer | None] = OrderedDict()
        self._addresses: dict[bytes, str | None] = {}  # what each Peer was parsed from
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poller.register(self._wake_r, zmq.POLLIN)
        self._wake_lock = threading.Lock()  # no write to a pipe end that close() let go
        self._closed = False

    def wake(self) -> None:
        """Cut short a ``poll`` under way (or the next one); from any thread."""
        with self._wake_lock:
            if not self._closed:
                with contextlib.suppress(BlockingIOError):  # full: it wakes already
                    os.write(self._wake_w, b"\0")

    def peer(self, identity: bytes) -> Peer | None:
        """The kernel's credentials of the process on connection ``identity`` (see above)."""
        return self._peers.get(identity)

    def _receive(self) -> list[bytes]:
        """One message's frames; the first (the routing id) read as a frame to learn its
        connection's credentials (at every message: a routing id a client chose can be
        reused by another process once the first has gone)."""
        first = self._socket.recv(zmq.NOBLOCK, copy=False)
        identity = first.bytes
        try:
            address = first.get("Peer-Address")
        except zmq.ZMQError:
            address = None
        if self._addresses.get(identity) != address:  # parsed once a connection, not a beat
            self._addresses[identity] = address
            self._peers[identity] = peer_of(address)
        self._peers.move_to_end(identity)
        while len(self._peers) > MAX_PEERS:
            self._addresses.pop(self._peers.popitem(last=False)[0], None)
        frames = [identity]
        while self._socket.getsockopt(zmq.RCVMORE):
            frames.append(self._socket.recv(zmq.NOBLOCK))
        return frames

    def poll(self, timeout_ms: int = 0) -> list[tuple[bytes, FromJobMessage | ProtocolError]]:
        """Wait up to ``timeout_ms`` for traffic, then take everything available.

        Returns ``(routing id, message or ProtocolError)`` pairs in arrival order; a
        ProtocolError is for the caller to log and drop.
        """
        if self._closed:
            return []
        ready = dict(self._poller.poll(max(0, int(timeout_ms))))
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
        if self._socket not in ready:
            return []
        out: list[tuple[bytes, FromJobMessage | ProtocolError]] = []
        while len(out) < MAX_DRAIN:
            try:
                frames = self._receive()
            except zmq.Again:
                break
            identity, parts = frames[0], frames[1:]
            if len(parts) != 1:
                out.append((identity, ProtocolError(
                    f"expected one frame after the routing id, got {len(parts)}")))
                continue
            try:
                out.append((identity, decode_from_job(parts[0])))
            except ProtocolError as exc:
                out.append((identity, exc))
        return out

    def send(self, identity: bytes, message) -> bool:
        """Send a command to one job without blocking; False if it is gone or not reading."""
        if self._closed:
            return False
        try:
            self._socket.send_multipart([identity, encode(message)], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno in (errno.EHOSTUNREACH, errno.EAGAIN):
                return False
            raise
        return True

    def close(self) -> None:
        """Close the socket (linger 0) and its context; remove the ipc socket file we made."""
        with self._wake_lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
        self._socket.close(linger=0)
        self._context.term()
        if self.path is not None:  # libzmq 4.3 leaves it; remove it unless someone rebound it
            try:
                if os.stat(self.path).st_ino == self._inode:
                    self.path.unlink()
            except OSError:
                pass

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
