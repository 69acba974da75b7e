"""A launcher's stop (Slurm's SIGTERM on ``scancel``: ``JobMaster.stop_requested``) ends the
job at its next batch boundary even when a command the daemon sent is still waiting there:
its Stop is numbered after everything it meets, so the daemon's resize cannot make it stale.
(Before, the Stop took the next number at signal time; a resize the daemon had already
queued under that number was applied first and the Stop dropped as stale: the job trained
on until Slurm's SIGKILL — seen with a real Slurm, ``test_slurm_cpu_share.py``.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from adloader.client.master.master import JobCancelled, JobMaster
from adloader.protocol import Resize

BATCH = SimpleNamespace(step_s=0.01, wait_s=0.0, samples=4, workers=None)


class Loader:
    def __init__(self):
        self.sizes: list[int] = []

    def resize(self, workers: int) -> None:
        self.sizes.append(workers)


def _master() -> tuple[JobMaster, Loader]:
    loader = Loader()
    return JobMaster(loader, job="j", workers=1, log=lambda _line: None), loader


def test_a_stop_asked_while_a_resize_waits_ends_the_job_after_applying_it():
    master, loader = _master()
    master._handler.receive(Resize(seq=0, workers=2))
    master.on_batch(BATCH)
    assert master.applied_seq == 0 and loader.sizes == [2]
    master._handler.receive(Resize(seq=1, workers=3))  # the daemon's, not yet at a boundary
    master.stop_requested("slurm")  # then scancel's SIGTERM
    with pytest.raises(JobCancelled):
        master.on_batch(BATCH)
    assert loader.sizes == [2, 3]  # the resize applied, then the stop
    assert master.applied_seq == 2


def test_a_resize_that_comes_after_the_stop_does_not_undo_it():
    master, loader = _master()
    master.stop_requested("slurm")
    master._handler.receive(Resize(seq=0, workers=4))
    with pytest.raises(JobCancelled):
        master.on_batch(BATCH)
    master.stop_requested("slurm")  # a second SIGTERM: nothing more is queued
    assert master._take() == []
