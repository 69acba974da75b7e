"""The daemon's uvicorn ticks once a second (uvicorn's own: ten times), and still ends at
once when told to, from another thread or by a signal."""

from __future__ import annotations

import signal
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from waiting import wait_for

from adloader.daemon.api import http_server
from adloader.daemon.api.http_server import TICK_S, server_class


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _run(server) -> tuple[threading.Thread, str]:
    """``server`` serving a socket of its own, in a thread; its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # read before the thread starts: a server told to stop first closes it at once
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return thread, url


def _serving(server) -> tuple[threading.Thread, str, list[float]]:
    """``_run``, each tick of its loop timed, once it has started."""
    ticks: list[float] = []
    on_tick = server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(time.monotonic())
        return await on_tick(counter)

    server.on_tick = counted
    thread, url = _run(server)
    wait_for(lambda: server.started, 30, "the server to start", interval=0.02)
    return thread, url, ticks


def _server():
    return server_class()(uvicorn.Config(_app, log_level="warning", log_config=None,
                                         lifespan="off"))


def test_the_server_ticks_once_a_second():
    server = _server()
    thread, url, ticks = _serving(server)
    assert httpx.get(url).text == "ok"
    began, first = time.monotonic(), len(ticks)
    time.sleep(2.5 * TICK_S)  # the window the ticks are counted over, not a wait
    seen = len(ticks) - first
    # uvicorn's own loop ticks every 0.1 s: ~25 here; one a second: 2 or 3
    assert seen <= 4, f"{seen} ticks in {time.monotonic() - began:.1f} s"
    server.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.parametrize("how", ["stop", "signal"])
def test_what_ends_the_server_wakes_it_rather_than_waiting_for_its_tick(monkeypatch, how):
    monkeypatch.setattr(http_server, "TICK_S", 600.0)  # a tick it could never wait out here
    server = _server()
    thread, url, ticks = _serving(server)
    assert httpx.get(url).text == "ok"
    # its first tick done, the loop waits for the next (600 s away)
    wait_for(lambda: ticks, 30, "the loop's first tick", interval=0.02)
    if how == "stop":
        server.stop()
    else:  # what a SIGTERM runs
        server.handle_exit(signal.SIGTERM, None)
    thread.join(timeout=60)
    assert not thread.is_alive(), f"{how}: still serving a minute later"


def test_a_stop_before_the_loop_runs_is_not_lost():
    server = _server()
    server.stop()  # before serve(): nothing to wake yet
    thread, _ = _run(server)
    thread.join(timeout=30)
    assert not thread.is_alive()
