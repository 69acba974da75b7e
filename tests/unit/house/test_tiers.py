"""The test tiers hold together: the markers pyproject.toml registers, the ones
tests/conftest.py knows and the ones `make test-fast` leaves out are the same; every file under
tests/integration and tests/bench says what it needs; and the guard fails a pure test that
starts a process or opens a socket — before anything starts."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import multiprocessing
import re
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _root_conftest():
    """tests/conftest.py as a module: the one pytest loaded, else loaded from its path (in a
    whole run another folder's conftest.py may hold the name ``conftest``)."""
    path = ROOT / "tests" / "conftest.py"
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve() == path:
            return module
    spec = importlib.util.spec_from_file_location("adloader_tests_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = _root_conftest()


def test_the_needs_are_the_markers_registered_and_the_ones_test_fast_leaves_out():
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["markers"]
    registered = {m.split(":")[0] for m in markers} - {"held_out_plumbing"}
    assert registered == {*conftest.TIERS, conftest.SLOW}
    fast = re.search(r"^FAST_TIER = not \((.*)\)$", (ROOT / "Makefile").read_text(), re.M)
    assert fast and set(fast.group(1).split(" or ")) == {*conftest.TIERS, conftest.SLOW}


def test_every_integration_and_bench_file_says_what_it_needs():
    files = {p.relative_to(ROOT / "tests").as_posix()
             for folder in ("integration", "bench")
             for p in (ROOT / "tests" / folder).rglob("test_*.py")}
    assert files - set(conftest.NEEDS) == set()
    assert all((ROOT / "tests" / name).is_file() for name in conftest.NEEDS)
    assert {n for needs in conftest.NEEDS.values() for n in needs} <= {*conftest.TIERS,
                                                                       conftest.SLOW}


ITEM = SimpleNamespace(nodeid="tests/unit/test_x.py::test_y")


@pytest.mark.parametrize(("start", "said"), [
    (lambda: subprocess.run(["true"]), "started a subprocess (true)"),
    (lambda: multiprocessing.get_context("fork").Process(target=print).start(),
     "started a multiprocessing process"),
    (lambda: socket.socket(), "opened a socket"),
    (lambda: socket.create_connection(("127.0.0.1", 9)), "opened a socket"),
], ids=["subprocess", "multiprocessing", "socket", "connection"])
def test_the_guard_fails_a_fast_test_that_starts_a_process_or_opens_a_socket(start, said):
    with pytest.raises(pytest.fail.Exception, match=re.escape(said)) as failed, \
            conftest._pure(ITEM):
        start()
    assert "tests/unit/test_x.py::test_y is marked as needing none of" in str(failed.value)
    assert "test_tiers.py" in str(failed.value)  # where it happened


def test_the_guard_fails_a_zeromq_socket():
    zmq = pytest.importorskip("zmq")
    context = zmq.Context()
    try:
        with pytest.raises(pytest.fail.Exception, match="opened a ZeroMQ socket"), \
                conftest._pure(ITEM):
            context.socket(zmq.DEALER)
    finally:
        context.term()


def test_the_guard_fails_a_start_the_test_swallowed_or_made_in_a_thread():
    # swallowed, as a careless test (or the code under test) might
    with pytest.raises(pytest.fail.Exception, match="started a subprocess"), \
            conftest._pure(ITEM), contextlib.suppress(BaseException):
        subprocess.run(["true"])
    with pytest.raises(pytest.fail.Exception, match="started a subprocess"), \
            conftest._pure(ITEM), pytest.MonkeyPatch.context() as mp:
        mp.setattr(threading, "excepthook", lambda args: None)  # the thread's end, unseen
        thread = threading.Thread(target=subprocess.run, args=(["true"],))
        thread.start()
        thread.join()


def test_the_guard_lets_an_event_loop_and_a_librarys_probe_through():
    started = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(subprocess.Popen, "_execute_child",
                   lambda self, args, *rest, **kwargs: started.append(args))
        with conftest._pure(ITEM):
            asyncio.run(asyncio.sleep(0))  # its wake-up socketpair wraps descriptors it made
            subprocess.Popen._execute_child(None, ["lscpu", "--parse=core"])
            subprocess.Popen._execute_child(None, "/sbin/ldconfig -p")
    assert started == [["lscpu", "--parse=core"], "/sbin/ldconfig -p"]
