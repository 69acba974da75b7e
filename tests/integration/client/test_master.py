"""The application master against a tiny daemon loop built on the real Broker."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from waiting import wait_for as harness_wait_for

from adloader.client import JobMaster, attach
from adloader.client.master.checkpoint import load_checkpoint, save_checkpoint
from adloader.daemon.control.broker import Broker
from adloader.errors import InputError
from adloader.protocol import (
    Allocation,
    Finish,
    Heartbeat,
    JobFeatures,
    Pause,
    Paused,
    Refused,
    Register,
    Resize,
    Resume,
)

FEATURES = JobFeatures(model="resnet18", batch_size=32, flops_g=1.8, params_m=11.7)
ENV = ("ADLOADER_ENDPOINT", "ADLOADER_JOB", "ADLOADER_TOKEN", "ADLOADER_WORKERS",
       "ADLOADER_MODEL", "ADLOADER_CHECKPOINT_DIR", "ADLOADER_RESUME", "RANK", "WORLD_SIZE")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def wait_for(predicate, deadline_s=5.0, what="condition"):
    """tests/waiting.py's, polled every 2 ms (the fake loops here are quick)."""
    return harness_wait_for(predicate, deadline_s, what, interval=0.002)


class FakeLoader:
    """The ElasticDataLoader surface the master uses; ``step()`` plays one batch boundary."""

    def __init__(self, num_workers=2, batch_size=32):
        self.num_workers = num_workers
        self.batch_size = batch_size
        self.on_batch = None
        self.calls: list[tuple] = []
        self.position = 0
        self._pending = None
        self._lock = threading.Lock()

    def resize(self, n):
        with self._lock:
            self.calls.append(("resize", n, self.position))
            self._pending = n

    def release(self):
        with self._lock:
            self.calls.append(("release", self.position))
            self._pending = 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]

    def step(self, step_s=0.02, wait_s=0.01):
        with self._lock:
            if self._pending is not None:
                self.num_workers, self._pending = self._pending, None
        self.position += 1
        stats = SimpleNamespace(epoch=0, index=self.position, wait_s=wait_s, step_s=step_s,
                                workers=self.num_workers, samples=self.batch_size)
        if self.on_batch is not None:
            self.on_batch(stats)

    def resized_to(self):
        return [c[1] for c in self.calls if c[0] == "resize"]


class Trainer(threading.Thread):
    """The consumer's thread: batch boundaries until stopped (blocks while paused)."""

    def __init__(self, loader):
        super().__init__(daemon=True)
        self.loader, self.stop = loader, threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.loader.step()
            time.sleep(0.001)  # pacing: a training step

    def join_stopped(self):
        self.stop.set()
        self.join(5)
        assert not self.is_alive()


class FakeDaemon(threading.Thread):
    """A daemon loop on Broker: answers Register with an Allocation, records the rest; a
    command for a job goes to the connection its messages last came from (as the daemon's)."""

    def __init__(self, endpoint, workers=3, heartbeat_s=0.05, answer=None):
        super().__init__(daemon=True)
        self.endpoint, self.workers, self.heartbeat_s = endpoint, workers, heartbeat_s
        self.answer = answer
        self.received: list = []
        self.peers: dict[str, bytes] = {}  # job id -> routing id of its connection
        self.outbox: queue.Queue = queue.Queue()
        self.ready, self.done = threading.Event(), threading.Event()
        self.start()
        assert self.ready.wait(5)

    def run(self):
        broker = Broker(self.endpoint)
        self.endpoint = broker.endpoint
        self.ready.set()
        try:
            while not self.done.is_set():
                for ident, msg in broker.poll(5):
                    self.received.append((ident, msg))
                    if hasattr(msg, "job"):
                        self.peers[msg.job] = ident
                    if isinstance(msg, Register):
                        reply = self.answer or Allocation(seq=1, workers=self.workers,
                                                          heartbeat_s=self.heartbeat_s)
                        broker.send(ident, reply)
                while not self.outbox.empty():
                    job, msg, result = self.outbox.get()
                    ident = self.peers.get(job.decode() if isinstance(job, bytes) else job)
                    result.put(ident is not None and broker.send(ident, msg))
        finally:
            broker.close()

    def send(self, job, msg) -> bool:
        """Send ``msg`` to job ``job`` (its id, as bytes or str)."""
        result: queue.Queue = queue.Queue()
        self.outbox.put((job, msg, result))
        return result.get(timeout=5)

    def messages(self, kind):
        return [m for _, m in list(self.received) if isinstance(m, kind)]

    def close(self):
        self.done.set()
        self.join(5)


@pytest.fixture
def daemon(tmp_path):
    d = FakeDaemon(f"ipc://{tmp_path}/d.sock")
    yield d
    d.close()


@pytest.fixture
def lines():
    return []


def attached(daemon, loader, lines, **kw):
    kw.setdefault("features", FEATURES)
    return attach(loader, endpoint=daemon.endpoint, job="j1", token="tok", log=lines.append,
                  **kw)


def test_register_then_allocation_is_applied_at_a_batch_boundary(daemon, lines):
    loader = FakeLoader(num_workers=2)
    with attached(daemon, loader, lines, model=None) as master:
        assert master.wait_connected(5)
        [reg] = wait_for(lambda: daemon.messages(Register), what="Register")
        assert (reg.job, reg.token, reg.workers, reg.requested) == ("j1", "tok", 2, 2)
        assert reg.features == FEATURES and reg.pid == os.getpid() and reg.world_size == 1
        assert loader.calls == []  # nothing applied outside a batch boundary
        loader.step()
        assert loader.resized_to() == [3] and master.applied_seq == 1
        loader.step()
        assert loader.num_workers == 3 and master.workers == 3
    assert lines == []


def test_resize_applied_and_stale_seq_dropped(daemon, lines):
    loader = FakeLoader()
    with attached(daemon, loader, lines) as master:
        assert master.wait_connected(5)
        loader.step()
        assert daemon.send(b"j1", Resize(seq=5, workers=4))
        wait_for(lambda: (loader.step(), master.applied_seq == 5)[1], what="seq 5")
        for stale in (Resize(seq=4, workers=1), Resize(seq=5, workers=7),
                      Allocation(seq=1, workers=9), Resize(seq=6, workers=2)):
            assert daemon.send(b"j1", stale)
        wait_for(lambda: (loader.step(), master.applied_seq == 6)[1], what="seq 6")
        assert loader.resized_to() == [3, 4, 2]
        loader.step()
        assert loader.num_workers == 2


def test_heartbeats_report_the_interval(daemon, lines):
    loader = FakeLoader(batch_size=16)
    trainer = Trainer(loader)
    with attached(daemon, loader, lines) as master:
        assert master.wait_connected(5)
        trainer.start()
        beats = wait_for(lambda: [b for b in daemon.messages(Heartbeat)
                                  if b.iteration > 5 and b.step_s > 0][2:],
                         what="three heartbeats over busy intervals")
        trainer.join_stopped()
    for b in beats:
        assert (b.job, b.token, b.workers, b.applied_seq) == ("j1", "tok", 3, 1)
        assert b.step_s == pytest.approx(0.02) and b.data_wait_s == pytest.approx(0.01)
        # one batch of 16 per loop turn of >= 1 ms: between 0 and 16 000 samples/s
        assert 0 < b.samples_per_s < 16_000
    iterations = [b.iteration for b in daemon.messages(Heartbeat)]
    assert iterations == sorted(iterations)
    [finish] = wait_for(lambda: daemon.messages(Finish), what="Finish")
    assert finish.iterations == master.iteration == loader.position and finish.exit_code == 0


def test_pause_with_checkpoint_then_resume_and_resume_from(daemon, lines, tmp_path):
    loader = FakeLoader()
    trainer = Trainer(loader)
    weights = {"w": torch.arange(4.0)}
    master = attached(daemon, loader, lines, checkpoint_dir=tmp_path / "ck",
                      state=lambda: {"model": weights})
    assert master.wait_connected(5)
    trainer.start()
    wait_for(lambda: master.applied_seq == 1, what="allocation")
    assert daemon.send(b"j1", Pause(seq=2, checkpoint=True))
    [paused] = wait_for(lambda: daemon.messages(Paused), what="Paused")
    assert paused.seq == 2 and master.paused and master.workers == 0
    assert ("release", master.iteration) in loader.calls
    path = Path(paused.checkpoint)
    assert path.parent == tmp_path / "ck" and [p.name for p in path.parent.iterdir()] == ["j1.pt"]
    saved = load_checkpoint(path)
    assert saved["adloader"] == {"job": "j1", "seq": 2, "iteration": master.iteration,
                                 "workers": 3}
    assert torch.equal(saved["state"]["model"]["w"], weights["w"])
    assert saved["loader"] == {"position": master.iteration}
    frozen = loader.position  # the consumer is blocked inside the batch boundary
    wait_for(lambda: any(b.workers == 0 and b.applied_seq == 2
                         for b in daemon.messages(Heartbeat)), what="paused heartbeat")
    assert loader.position == frozen
    assert daemon.send(b"j1", Resize(seq=3, workers=5))  # while paused: the target only
    assert daemon.send(b"j1", Resume(seq=4, workers=1))
    wait_for(lambda: loader.position > frozen + 2, what="training to go on")
    assert not master.paused and loader.resized_to() == [3, 1] and master.applied_seq == 4
    trainer.join_stopped()
    master.finish()

    relaunched, fresh = FakeLoader(), []
    again = attach(relaunched, features=FEATURES, log=fresh.append)
    os.environ["ADLOADER_RESUME"] = str(path)
    try:
        state = again.resume_from()
    finally:
        del os.environ["ADLOADER_RESUME"]
    assert torch.equal(state["model"]["w"], weights["w"])
    assert relaunched.position == frozen and again.iteration == frozen
    again.finish()
    with pytest.raises(InputError, match="no such file"):
        again.resume_from(tmp_path / "missing.pt")


def test_checkpoint_write_is_atomic(tmp_path):
    target = tmp_path / "j.pt"
    save_checkpoint(target, {"adloader": {"seq": 1}})
    with pytest.raises(Exception):  # noqa: B017 - whatever pickling raises
        save_checkpoint(target, {"adloader": {"seq": 2}, "bad": lambda: None})
    assert load_checkpoint(target)["adloader"] == {"seq": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["j.pt"]
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="cannot load"):
        load_checkpoint(tmp_path / "junk.pt")


def test_refused_is_one_line_and_plain_operation(tmp_path, lines):
    d = FakeDaemon(f"ipc://{tmp_path}/r.sock", answer=Refused(reason="bad token"))
    try:
        loader = FakeLoader(num_workers=2)
        master = attached(d, loader, lines)
        assert master.wait_connected(5) is False
        for _ in range(5):
            loader.step()
        master.finish()
        assert lines == ["adloader: daemon refused job 'j1': bad token; running with 2 workers"]
        assert loader.calls == [] and d.messages(Finish) == []
    finally:
        d.close()


def test_no_endpoint_logs_one_line_and_runs_plain(monkeypatch, lines):
    monkeypatch.setenv("ADLOADER_WORKERS", "3")
    loader = FakeLoader(num_workers=2)
    master = attach(loader, log=lines.append)
    assert master.channel is None and not master.connected
    for _ in range(4):
        loader.step()
    master.finish()
    assert lines == ["adloader: no daemon at (ADLOADER_ENDPOINT unset); running with 3 workers"]
    assert loader.resized_to() == [3] and loader.num_workers == 3
    monkeypatch.setenv("ADLOADER_WORKERS", "many")
    with pytest.raises(InputError, match="ADLOADER_WORKERS"):
        attach(FakeLoader(), log=lines.append)


def test_a_loader_it_cannot_drive_is_refused_in_one_line(lines):
    import torch.utils.data

    plain = torch.utils.data.DataLoader(list(range(8)), batch_size=2, num_workers=0)
    with pytest.raises(InputError) as raised:
        attach(plain, log=lines.append)
    message = str(raised.value)
    assert "\n" not in message and "torch.utils.data.dataloader.DataLoader" in message
    assert "resize, release, on_batch" in message and "ElasticDataLoader" in message
    assert plain.num_workers == 0 and not hasattr(plain, "on_batch") and lines == []


def test_unreachable_daemon_logs_one_line_after_the_timeout(tmp_path, lines, monkeypatch):
    monkeypatch.setenv("ADLOADER_ENDPOINT", f"ipc://{tmp_path}/nobody.sock")
    loader = FakeLoader(num_workers=2)
    master = attach(loader, model="resnet18", log=lines.append, connect_timeout_s=0.2)
    feats = master.channel.register.features
    assert feats.model.lower() == "resnet18" and feats.batch_size == 32
    assert feats.flops_g == pytest.approx(3.63, rel=0.01)
    assert feats.params_m == pytest.approx(11.69, rel=0.01)
    assert master.wait_connected(5) is False
    for _ in range(3):
        loader.step()
    started = time.monotonic()
    master.finish()
    assert time.monotonic() - started < 1.0 and not master.channel.is_alive()
    assert lines == [f"adloader: no daemon at ipc://{tmp_path}/nobody.sock; running with 2 workers"]
    assert loader.calls == []
    with pytest.raises(InputError, match="give model= .* or features="):
        attach(FakeLoader(), log=lines.append)


def test_finish_on_error_and_chained_hook(daemon, lines):
    loader, seen = FakeLoader(), []
    loader.on_batch = seen.append
    with pytest.raises(RuntimeError), attached(daemon, loader, lines) as master:
        assert master.wait_connected(5)
        loader.step()
        raise RuntimeError("boom")
    [finish] = wait_for(lambda: daemon.messages(Finish), what="Finish")
    assert finish.exit_code == 1 and finish.iterations == 1 and len(seen) == 1
    master.finish()  # idempotent
    assert len(daemon.messages(Finish)) == 1


CHILD = textwrap.dedent("""
    import sys, time
    from types import SimpleNamespace
    from adloader.client import attach
    from adloader.protocol import JobFeatures

    class Loader:
        num_workers, batch_size, on_batch = 1, 8, None
        def resize(self, n): self.num_workers = n
        def release(self): pass

    loader = Loader()
    attach(loader, endpoint=sys.argv[1], job="victim", features=JobFeatures(
        batch_size=8, flops_g=1.0, params_m=1.0), log=lambda line: None)
    while True:
        loader.on_batch(SimpleNamespace(epoch=0, index=0, wait_s=0.0, step_s=0.001,
                                        workers=loader.num_workers, samples=8))
        time.sleep(0.001)  # pacing: a training step
""")


def test_sigkilled_job_just_stops_heartbeating(daemon):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, daemon.endpoint])
    try:
        wait_for(lambda: any(m.job == "victim" for m in daemon.messages(Heartbeat)), 20,
                 what="the child's heartbeats")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(5) == -signal.SIGKILL
        wait_for(lambda: daemon.send(b"victim", Resize(seq=9, workers=1)) is False,
                 what="the dead peer to be gone")
        count = len(daemon.messages(Heartbeat))
        time.sleep(3 * daemon.heartbeat_s)  # a window in which a live job would beat
        assert len(daemon.messages(Heartbeat)) == count
    finally:
        proc.kill()
        proc.wait()


def _rank(rank, endpoint, store, results):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    loader = FakeLoader(num_workers=2)
    master = attach(loader, endpoint=endpoint, job="mr", features=FEATURES,
                    log=lambda line: None, connect_timeout_s=10,
                    miss_load=lambda: (3.0, 1.0)[rank])  # rank 0 misses three times as much
    for _ in range(20_000):  # the same bound on every rank, so none waits on a gone peer
        loader.step()
        if master.applied_seq >= 4:  # the Resume: both ranks stop after the same command
            break
        time.sleep(0.0005)  # pacing: a training step
    results.put((rank, master.channel is not None, loader.calls))
    master.finish()
    dist.destroy_process_group()


def test_two_ranks_apply_the_same_command_at_the_same_iteration(daemon, tmp_path):
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, daemon.endpoint, tmp_path / "pg", results))
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        wait_for(lambda: any(b.applied_seq == 1 for b in daemon.messages(Heartbeat)), 20,
                 what="allocation applied")
        assert daemon.send(b"mr", Resize(seq=2, workers=4))
        assert daemon.send(b"mr", Pause(seq=3))
        wait_for(lambda: daemon.messages(Paused), what="Paused")
        assert daemon.send(b"mr", Resume(seq=4, workers=1))
        got = sorted(results.get(timeout=20) for _ in procs)
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    assert [r[1] for r in got] == [True, False]  # only rank 0 talks to the daemon
    # the same commands at the same positions on both ranks; each resize splits the job's
    # workers between the ranks in proportion to their miss loads, 3 : 1 (Lobster §4.2)
    kinds = [[c[0] for c in r[2]] for r in got]
    assert kinds[0] == kinds[1] == ["resize", "resize", "release", "resize"]
    shares = [[c[1] for c in r[2] if c[0] == "resize"] for r in got]
    assert [a + b for a, b in zip(*shares, strict=True)] == [3, 4, 1]
    assert shares[0] == [2, 3, 1] and shares[1] == [1, 1, 0]
    assert [r.world_size for r in daemon.messages(Register)] == [2]


def test_jobmaster_is_exported():
    assert JobMaster.__module__ == "adloader.client.master.master"


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_real_elastic_loader_resized_paused_and_resumed_loses_nothing(daemon, lines, tmp_path):
    from torch.utils.data import TensorDataset

    from adloader.client.loader.loader import ElasticDataLoader

    loader = ElasticDataLoader(TensorDataset(torch.arange(120)), batch_size=4, shuffle=True,
                               num_workers=0, seed=3)
    expected = [i for batch in loader.plan(0) for i in batch]
    master = attached(daemon, loader, lines, checkpoint_dir=tmp_path)
    assert master.wait_connected(5)
    seen, at_gate, gate = [], threading.Event(), threading.Event()

    def consume():
        for i, (batch,) in enumerate(loader):
            seen.extend(batch.tolist())
            if i == 3:
                at_gate.set()
                gate.wait(10)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert at_gate.wait(10) and master.applied_seq == 1 and loader.num_workers == 3
    assert daemon.send(b"j1", Pause(seq=2, checkpoint=True))
    wait_for(lambda: not master._state.commands.empty(), what="Pause to reach the master")
    gate.set()
    [paused] = wait_for(lambda: daemon.messages(Paused), what="Paused")
    assert master.paused and load_checkpoint(paused.checkpoint)["loader"]["consumed"] == 5
    assert daemon.send(b"j1", Resume(seq=3, workers=1))
    consumer.join(20)
    assert not consumer.is_alive()
    assert seen == expected and loader.num_workers == 1 and master.applied_seq == 3
    master.finish()
    loader.close()


def test_a_pod_whose_node_has_no_daemon_trains_as_a_plain_loader(tmp_path):
    """deploy/training-job.yaml's contract, daemon absent: the socket folder is empty."""
    import subprocess
    import sys

    body = ("from adloader.client import attach\n"
            "from adloader.client.loader.loader import ElasticDataLoader\n"
            "loader = ElasticDataLoader(list(range(64)), batch_size=8)\n"
            "job = attach(loader, model='Resnet18')\n"
            "assert not job.wait_connected()  # the connect timeout passes: no daemon\n"
            "print(sum(len(b) for b in loader), loader.num_workers, flush=True)\n")
    env = dict(os.environ, ADLOADER_ENDPOINT=f"ipc://{tmp_path}/control.sock",
               ADLOADER_JOB="resnet-sweep-x7k2p@node-a", ADLOADER_WORKERS="2")
    env.pop("ADLOADER_SUPERVISOR", None)
    proc = subprocess.run([sys.executable, "-c", body], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["64", "2"]  # every sample, with its own workers
    assert proc.stderr.count("adloader: no daemon at") == 1
