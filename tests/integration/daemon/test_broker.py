"""The daemon's ROUTER broker over real sockets: round trip, bad frames, gone peers, and
no takeover of a connection by its routing id."""

from __future__ import annotations

import os
import stat
import time

import pytest
import zmq

from adloader.daemon.control.broker import MAX_MESSAGE_BYTES, Broker
from adloader.errors import InputError
from adloader.protocol import (
    MAX_FRAME,
    Heartbeat,
    ProtocolError,
    Resize,
    decode_to_job,
    encode,
)


def beat(job="j1", token="t", iteration=1):
    return Heartbeat(job=job, token=token, iteration=iteration, step_s=0.1, data_wait_s=0.01,
                     samples_per_s=100.0, workers=2)


@pytest.fixture
def broker(tmp_path):
    b = Broker(f"ipc://{tmp_path}/run/c.sock")
    yield b
    b.close()


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


def dealer(ctx, endpoint, job=b"j1"):
    s = ctx.socket(zmq.DEALER)
    if job:
        s.setsockopt(zmq.ROUTING_ID, job)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVTIMEO, 2000)
    s.connect(endpoint)
    return s


def poll_until(broker, n, deadline_s=2.0):
    """Everything the broker received until it has at least ``n`` entries (or the deadline)."""
    got, end = [], time.monotonic() + deadline_s
    while len(got) < n and time.monotonic() < end:
        got += broker.poll(50)
    return got


def test_round_trip_and_socket_modes(broker, ctx, tmp_path):
    path = tmp_path / "run" / "c.sock"
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o700
    s = dealer(ctx, broker.endpoint)
    s.send(encode(beat(iteration=7)))
    [(ident, msg)] = poll_until(broker, 1)
    assert ident == b"j1" and msg == beat(iteration=7)
    assert broker.send(b"j1", Resize(seq=3, workers=4))
    assert decode_to_job(s.recv()) == Resize(seq=3, workers=4)
    assert broker.poll(0) == []


def test_bad_frames_are_reported_and_good_peers_still_served(broker, ctx):
    bad, good = dealer(ctx, broker.endpoint, b"bad"), dealer(ctx, broker.endpoint, b"good")
    bad.send(b"\xff\xfe not utf-8")
    bad.send(b"[1, 2]")
    bad.send(b'{"type": "launch", "job": "x"}')
    bad.send(b"x" * (MAX_FRAME + 1))
    bad.send_multipart([encode(beat()), b"extra"])
    bad.send_multipart([b"", encode(beat())])  # a REQ-style delimiter is a wrong frame count
    good.send(encode(beat("good")))
    got = poll_until(broker, 7)
    errors = [m for i, m in got if i == b"bad"]
    assert len(errors) == 6 and all(isinstance(m, ProtocolError) for m in errors)
    assert any("exceeds" in str(m) for m in errors)
    assert [m for i, m in got if i == b"good"] == [beat("good")]
    # a frame beyond MAXMSGSIZE makes libzmq drop that connection; nothing is raised
    bad.send(b"x" * (MAX_MESSAGE_BYTES + 1))
    good.send(encode(beat("good", iteration=2)))
    assert [m for _, m in poll_until(broker, 1)] == [beat("good", iteration=2)]
    assert broker.send(b"good", Resize(seq=1, workers=1))
    assert decode_to_job(good.recv()).workers == 1


def test_send_to_unknown_or_gone_peer_returns_false_without_blocking(broker, ctx):
    started = time.monotonic()
    assert broker.send(b"nobody", Resize(seq=1, workers=1)) is False
    assert time.monotonic() - started < 0.5
    s = dealer(ctx, broker.endpoint)
    s.send(encode(beat()))
    assert poll_until(broker, 1)
    s.close(linger=0)
    deadline, sent = time.monotonic() + 3.0, True
    while sent and time.monotonic() < deadline:
        t0 = time.monotonic()
        sent = broker.send(b"j1", Resize(seq=2, workers=1))
        assert time.monotonic() - t0 < 0.5  # never blocks
    assert sent is False


def test_a_second_connection_with_a_routing_id_in_use_takes_nothing_over(broker, ctx):
    first = dealer(ctx, broker.endpoint)
    first.send(encode(beat(iteration=1)))
    [(ident, _)] = poll_until(broker, 1)
    assert ident == b"j1"
    thief = dealer(ctx, broker.endpoint)  # the same routing id, from another process
    thief.send(encode(beat(iteration=2)))
    assert poll_until(broker, 1, deadline_s=0.5) == []  # the broker never hears it
    assert broker.send(b"j1", Resize(seq=5, workers=3))
    assert decode_to_job(first.recv()).seq == 5  # the command went to the first connection
    thief.setsockopt(zmq.RCVTIMEO, 300)
    with pytest.raises(zmq.Again):
        thief.recv()
    first.close(linger=0)
    thief.close(linger=0)


def test_connections_without_a_routing_id_get_one_of_their_own(broker, ctx):
    a, b = dealer(ctx, broker.endpoint, job=b""), dealer(ctx, broker.endpoint, job=b"")
    a.send(encode(beat(job="ja")))
    b.send(encode(beat(job="jb")))
    got = dict((msg.job, ident) for ident, msg in poll_until(broker, 2))
    assert set(got) == {"ja", "jb"} and got["ja"] != got["jb"]
    assert broker.send(got["jb"], Resize(seq=1, workers=1))
    assert decode_to_job(b.recv()).seq == 1
    a.close(linger=0)
    b.close(linger=0)


def test_tcp_endpoint_close_and_bad_endpoints(tmp_path):
    b = Broker("tcp://127.0.0.1:*")
    assert b.endpoint.startswith("tcp://127.0.0.1:") and not b.endpoint.endswith("*")
    b.close()
    b.close()  # idempotent
    assert b.poll(10) == [] and b.send(b"x", Resize(seq=1, workers=1)) is False
    with pytest.raises(InputError, match="must be ipc"):
        Broker("http://127.0.0.1:1")
    with Broker(f"ipc://{tmp_path}/a.sock") as first:
        assert (tmp_path / "a.sock").exists()
        other = Broker("tcp://127.0.0.1:*")
        port = other.endpoint
        with pytest.raises(InputError, match="cannot bind"):
            Broker(port)
        other.close()
        assert first.poll(0) == []
    assert not (tmp_path / "a.sock").exists()


def test_a_wake_from_another_thread_cuts_a_long_poll_short(broker, ctx):
    """The control loop sleeps up to its idle tick; a REST request's sends must not wait
    for it: ``wake`` (any thread) ends a poll under way, and the messages still come."""
    import threading

    threading.Timer(0.2, broker.wake).start()
    t0 = time.monotonic()
    assert broker.poll(30_000) == []  # woken: nothing to read, long before 30 s
    assert time.monotonic() - t0 < 15
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(broker.endpoint)
    dealer.send(encode(beat()))
    broker.wake()  # a wake and a message together: the message is read
    deadline = time.monotonic() + 10
    got = []
    while not got and time.monotonic() < deadline:
        got = broker.poll(1000)
    assert [m.type for _, m in got] == ["heartbeat"]
    for _ in range(100_000):  # a full pipe is not an error
        broker.wake()
    assert broker.poll(0) == []
    dealer.close(0)


def test_the_kernels_credentials_of_each_connection(broker, ctx):
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(broker.endpoint)
    dealer.send(encode(beat()))
    deadline, got = time.monotonic() + 10, []
    while not got and time.monotonic() < deadline:
        got = broker.poll(1000)
    peer = broker.peer(got[0][0])
    assert (peer.uid, peer.gid, peer.pid) == (os.getuid(), os.getgid(), os.getpid())
    dealer.close(0)
