"""A heartbeat's interval runs from batch boundary to batch boundary (``ChannelHandler``):
its count is the count when a batch ended, and its rate over whole batches, so the daemon can
rebuild when each count was reached (``ClosedLoop.beat``)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from adloader.client.master.channel_handler import ChannelHandler
from adloader.client.master.master_state import MasterState


@pytest.fixture()
def clock(monkeypatch):
    now = SimpleNamespace(t=100.0)
    monkeypatch.setattr(time, "monotonic", lambda: now.t)
    return now


def batch(samples: int = 32) -> SimpleNamespace:
    return SimpleNamespace(step_s=0.1, wait_s=0.05, samples=samples, workers=2)


def test_a_beat_ends_its_interval_at_the_last_batch_and_the_next_starts_there(clock):
    state = MasterState(2)
    handler = ChannelHandler(state, job="j", endpoint=None, token="t", pid=0, log=print)
    for t in (100.4, 100.8):  # two batches, then the beat at 101.0, mid-batch
        clock.t = t
        state.record(batch())
    clock.t = 101.0
    first = handler.heartbeat()
    assert first.iteration == 2 and first.samples_per_s == pytest.approx(64 / 0.8)
    clock.t = 101.9  # a beat with no batch: rate 0, the interval goes on from 100.8
    idle = handler.heartbeat()
    assert idle.iteration == 2 and idle.samples_per_s == 0.0
    clock.t = 102.3
    state.record(batch())
    clock.t = 103.0
    second = handler.heartbeat()
    # 100.8 → 102.3: the intervals tile the job's clock, one batch over 1.5 s
    assert second.iteration == 3 and second.samples_per_s == pytest.approx(32 / 1.5)


def test_after_a_resume_the_interval_starts_at_the_resume_not_at_the_batch_before_the_pause(
        clock):
    from adloader.client.master.master import JobMaster
    from adloader.protocol import Resume

    class Loader:
        def resize(self, workers: int) -> None:
            self.workers = workers

    master = JobMaster(Loader(), job="j", token="t", workers=1, log=lambda _line: None)
    clock.t = 101.0
    master._state.record(batch())
    master._handler.heartbeat()
    master._state.paused = True  # paused from 101 on (its workers released)
    clock.t = 160.0
    master._handler.receive(Resume(seq=0, workers=2))
    master.apply_pending()
    clock.t = 161.0
    master._state.record(batch())
    beat = master._handler.heartbeat()
    assert beat.samples_per_s == pytest.approx(32 / 1.0)  # not 32 over the pause's 60 s
