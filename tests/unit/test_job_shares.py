"""The daemon's side of the CPU groups (daemon/job_shares.py) on a cgroup2 hierarchy laid out
in a folder as the kernel lays it: weights written by the configured rule, and the loading
samples of a node whose jobs are held under the rule ``turn`` (or ranked under ``order``) kept
out of the TPM's."""

from __future__ import annotations

import pytest

from adloader.config import DaemonConfig, validate
from adloader.errors import InputError
from adloader.host.cpu_share import CpuShares
from adloader.scheduling.samples import LoadingSample, TrainingSample
from daemon.job_shares import JobShares, end_order


class _Job:
    def __init__(self, workers: int, remaining: float = 1000.0, ceiling: float = 0.0,
                 submitted: float = 0.0, id: str = ""):
        self.workers, self.state = workers, "running"
        self.remaining_samples, self.ceiling, self.submitted, self.id = \
            remaining, ceiling, submitted, id


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
    with pytest.raises(InputError, match="cpu_share_rule.*workers, turn, order.*'fifo'"):
        validate(DaemonConfig(cpu_share_rule="fifo"))


def test_the_order_ranks_jobs_their_gpu_binds_first_then_the_fewest_samples_left():
    """Jobs whose GPU trains slower than the node loads first, the longest at its GPU's rate
    first; then the loading-bound ones by samples left; of those alike the slowest GPU, then
    the earliest submitted; a job with no ceiling planned counts as loading-bound."""
    jobs = [_Job(1, 6000, ceiling=2000, id="fast-gpu"), _Job(1, 6000, ceiling=1500, id="slow"),
            _Job(1, 1000, ceiling=900, id="gpu-short"), _Job(1, 3000, ceiling=0, id="unplanned"),
            _Job(1, 6000, ceiling=1500, submitted=-1.0, id="slow-earlier"),
            _Job(1, 9000, ceiling=500, id="gpu-long")]
    assert end_order(jobs, peak=1000.0) == ["gpu-long", "gpu-short", "unplanned",
                                            "slow-earlier", "slow", "fast-gpu"]
    assert end_order(jobs)[:3] == ["gpu-long", "slow-earlier", "slow"]  # every GPU binds: longest


def test_a_gpu_bound_job_keeps_its_place_as_the_others_near_their_end():
    """The static mix as this machine ran it (the node loading 1,034 samples/s, Resnet18's GPU
    training 480): Resnet18 stays first while it runs, whatever the others have left —
    ranked by time alone, it fell behind the loading-bound jobs as they progressed, trained on
    what they left and ended the mix alone at its GPU's rate (1.07× the best fixed makespan)."""
    mix = [_Job(1, 12_800, ceiling=480, id="Resnet18"),
           _Job(1, 12_800, ceiling=1500, id="mdResnet12"),
           _Job(1, 12_800, ceiling=2400, id="smResnet20")]
    assert end_order(mix, peak=1034.0) == ["Resnet18", "mdResnet12", "smResnet20"]
    mix[0].remaining_samples, mix[2].remaining_samples = 7300, 4000  # 15 s left at 480; 4 s
    assert end_order(mix, peak=1034.0) == ["Resnet18", "smResnet20", "mdResnet12"]


def test_the_order_rule_writes_again_when_the_order_changes_and_keeps_loading_out(tmp_path):
    shares, events = _shares(tmp_path, "order")
    jobs = {"a": _Job(1, 5000, 2000, id="a"), "b": _Job(1, 1000, 2000, id="b"),
            "c": _Job(1, 3000, 2000, id="c")}  # every one loading-bound: shortest first
    shares.follow(jobs, peak=1000.0)
    assert events[-1] == ("cpu_shares", {"weights": {"b": 263, "c": 33, "a": 4},
                                         "rule": "order", "order": ["b", "c", "a"],
                                         "ceilings": {"b": 2000, "c": 2000, "a": 2000}})
    assert shares.for_the_model(SAMPLES) == [SAMPLES[1]]  # rates follow the weights
    jobs["b"].remaining_samples = 9000  # the same workers, another order: written again
    shares.follow(jobs, peak=1000.0)
    assert events[-1][1]["order"] == ["c", "a", "b"] and shares.groups.weight("c") == 263
    written = len(events)
    shares.follow(jobs, peak=1000.0)
    assert len(events) == written  # nothing moved: nothing written
    del jobs["a"], jobs["b"]
    shares.follow(jobs, peak=1000.0)  # one job left: its loading is its own again
    assert shares.for_the_model(SAMPLES) == SAMPLES
