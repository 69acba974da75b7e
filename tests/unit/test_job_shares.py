"""The daemon's side of the CPU groups (daemon/job_shares.py) on a cgroup2 hierarchy laid out
in a folder as the kernel lays it: weights written by the configured rule, and the loading
samples of a node whose jobs are held under the rule ``turn`` kept out of the TPM's."""

from __future__ import annotations

import pytest

from adloader.config import DaemonConfig, validate
from adloader.errors import InputError
from adloader.host.cpu_share import CpuShares
from adloader.scheduling.samples import LoadingSample, TrainingSample
from daemon.job_shares import JobShares


class _Job:
    def __init__(self, workers: int):
        self.workers, self.state = workers, "running"


def _shares(tmp_path, rule: str) -> tuple[JobShares, list]:
    (tmp_path / "cgroup.controllers").write_text("cpu\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    events: list = []
    shares = JobShares("", lambda job, kind, data: events.append((kind, data)), rule)
    shares.groups = CpuShares(tmp_path, parent="adl")  # the real one: /sys/fs/cgroup
    for job in ("a", "b", "c"):
        shares.groups.prepare(job)
    return shares, events


SAMPLES = [("a", LoadingSample(4, 6, 900.0)), ("a", TrainingSample(32, 1, 1.0, 1.0, 0.1)),
           ("b", LoadingSample(1, 6, 5.0))]


@pytest.mark.parametrize("rule, held", [("workers", 50), ("turn", 1)])
def test_weights_follow_the_rule_and_held_jobs_loading_stays_out_of_the_model(
        tmp_path, rule, held):
    shares, events = _shares(tmp_path, rule)
    shares.follow({"a": _Job(4), "b": _Job(1), "c": _Job(1)})
    assert shares.groups.weight("b") == held
    assert events[-1] == ("cpu_shares", {"weights": {"a": 200 if rule == "workers" else 100,
                                                     "b": held, "c": held}, "rule": rule})
    kept = shares.for_the_model(SAMPLES)
    assert kept == (SAMPLES if rule == "workers" else [SAMPLES[1]])
    shares.follow({"a": _Job(1), "b": _Job(1), "c": _Job(1)})  # nobody held: all kept again
    assert shares.for_the_model(SAMPLES) == SAMPLES


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(InputError, match="cpu_share_rule.*workers, turn.*'fifo'"):
        validate(DaemonConfig(cpu_share_rule="fifo"))
