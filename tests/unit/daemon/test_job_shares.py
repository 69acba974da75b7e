"""The daemon's side of the CPU groups (daemon/jobs/job_shares.py) on a cgroup2 hierarchy laid out
in a folder as the kernel lays it: weights written by the configured rule, and the loading
samples of a node whose jobs are held under the rule ``turn`` (or ranked under ``order``) kept
out of the TPM's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adloader.config import DaemonConfig, validate
from adloader.daemon.jobs.job_shares import JobShares, end_order
from adloader.errors import InputError
from adloader.host.cpu_share import CpuShares
from adloader.scheduling.model.samples import LoadingSample, TrainingSample
from adloader.scheduling.policies.fluid_order import (
    MAKESPAN_SLACK,
    Lane,
    completions,
    plain_key,
    rank,
)


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


def _table(node_rates: list[float]) -> np.ndarray:
    """A loading table as the staged TPM makes it: L(D) shared in proportion to workers,
    table[D, d] = d/D·L(D)."""
    size = len(node_rates)
    table = np.zeros((size, size))
    for node in range(1, size):
        for d in range(1, node + 1):
            table[node, d] = d / node * node_rates[node]
    return table


# one worker loads 600 samples/s alone; the node 1,034 from two workers on (this machine's
# static mix, a slower sitting)
NODE = _table([0.0, 600.0, 1034.0, 1034.0, 1034.0, 1034.0, 1034.0])
NODE1000 = _table([0.0, 1000.0, 1000.0, 1000.0])  # one worker loads what the node does


def test_the_order_is_the_one_a_fluid_node_ends_best():
    """Strict priority on a fluid node: the job whose GPU binds it first (ranked last it would
    end alone at its GPU's rate: the makespan bound keeps it ahead), then the loading-bound
    jobs by samples left; jobs alike go as the plain rule puts them (the earlier id)."""
    mix = [_Job(1, 12_800, ceiling=480, id="Resnet18"),
           _Job(1, 12_800, ceiling=1500, id="mdResnet12"),
           _Job(1, 12_800, ceiling=2400, id="smResnet20")]
    assert end_order(mix, NODE) == ["Resnet18", "mdResnet12", "smResnet20"]
    mix[0].remaining_samples, mix[2].remaining_samples = 7300, 4000  # 15 s left at 480; 4 s
    assert end_order(mix, NODE) == ["Resnet18", "smResnet20", "mdResnet12"]
    # no ceiling planned: bound by its worker alone (600), so the next job still gets the rest
    assert end_order([_Job(1, 3000, id="a"), _Job(1, 9000, id="b")], NODE) == ["a", "b"]


def test_a_ceiling_under_what_the_job_would_get_does_not_move_it_ahead():
    """The plain rule counted any job whose GPU ceiling was under the node's loading as
    GPU-bound and put it first: smResnet20 (its GPUs shared with both others, ceiling ~1,240
    under L* ~1,500) went ahead of mdResnet12 seconds in, and mdResnet12, with fewer samples
    left, ended last in every pair. The fluid node sees that a ceiling above what is left to
    the job binds nothing."""
    mix = [_Job(1, 11_000, ceiling=516, id="Resnet18"),
           _Job(1, 10_500, ceiling=1400, id="mdResnet12"),
           _Job(1, 12_800, ceiling=1240, id="smResnet20")]
    table = _table([0.0, 885.0, 1361.0, 1356.0, 1356.0, 1356.0, 1356.0])  # as measured
    assert end_order(mix, table) == ["Resnet18", "mdResnet12", "smResnet20"]


def test_the_ranking_in_force_stays_while_it_is_near_the_best():
    """Estimates move between decisions. While no job is new to it (one that ended leaves
    it), the ranking in force stays unless its makespan is ``KEEP_SPAN`` over the least; when
    a job arrives, unless another ranking ends them ``KEEP_GAIN`` sooner in sum (or it leaves
    the makespan bound)."""
    jobs = [_Job(1, 5000, id="a"), _Job(1, 9000, id="b")]
    assert end_order(jobs, NODE1000) == ["a", "b"]
    assert end_order(jobs, NODE1000, current=["b", "a"]) == ["b", "a"]  # same jobs: kept
    new = _Job(1, 500, id="new")  # a job new to the ranking goes where the best puts it...
    assert end_order([*jobs, new], NODE1000, current=["a", "b"]) == ["new", "a", "b"]
    # ...and a change of jobs lets the best ranking in: b's 9,000 before a's 5,000 loses 26 %
    assert end_order([*jobs, new], NODE1000, current=["b", "a"]) == ["new", "a", "b"]
    close = [_Job(1, 5000, id="a"), _Job(1, 5100, id="b"), new]  # 2 % apart: kept
    assert end_order(close, NODE1000, current=["b", "a"]) == ["new", "b", "a"]
    # a job ended: the others keep their order, b's 9,000 before a's 5,000 as before
    assert end_order(jobs, NODE1000, current=["b", "gone", "a"]) == ["b", "a"]
    gpu = [_Job(1, 3000, ceiling=300, id="gpu"), _Job(1, 9000, id="x")]  # 10 s at its GPU
    assert end_order(gpu, NODE1000, current=["x", "gpu"]) == ["gpu", "x"]  # 19 s, not 12


def test_completions_on_a_fluid_node_by_hand():
    """A takes its cap 300 of the node's 1,000; B the 700 left, then all of it once A ends;
    B first, A gets nothing until B ends, then what it takes alone (by default the node)."""
    lanes = [Lane("A", 900, cap=300), Lane("B", 2800)]
    assert completions(lanes, 1000) == pytest.approx([3.0, 3.0 + (2800 - 2100) / 1000])
    assert completions(list(reversed(lanes)), 1000) == pytest.approx([2.8, 2.8 + 900 / 1000])
    capped = [Lane("A", 900, cap=300, alone=300), Lane("B", 2800)]  # its GPU binds it alone
    assert completions(capped[::-1], 1000) == pytest.approx([2.8, 2.8 + 900 / 300])
    assert completions([Lane("stuck", 10, cap=0.0, alone=0.0)], 1000) == [math.inf]
    with pytest.raises(ValueError, match="positive"):
        completions(lanes, 0.0)


def test_many_jobs_are_ranked_by_a_local_search_within_the_makespan_bound():
    """Past ``EXHAUSTIVE`` jobs every ranking is too many: a local search from the plain
    one, no worse than it in sum and within the makespan bound."""
    lanes = [Lane(f"j{i}", 1000.0 * (1 + (7 * i) % 9), cap=150.0 * (1 + i % 4))
             for i in range(9)]
    ranked = rank(lanes, 1000.0)
    by_id = {lane.id: lane for lane in lanes}
    plain = sorted(lanes, key=lambda lane: plain_key(lane, 1000.0))
    spans = {}
    for name, order in (("ranked", [by_id[i] for i in ranked]), ("plain", plain)):
        ends = completions(order, 1000.0)
        spans[name] = (max(ends), sum(ends))
    assert sorted(ranked) == sorted(by_id)
    assert spans["ranked"][1] <= spans["plain"][1]
    assert spans["ranked"][0] <= spans["plain"][0] * (1 + MAKESPAN_SLACK) + 1e-9


def test_the_order_rule_writes_again_when_the_order_changes_and_keeps_loading_out(tmp_path):
    shares, events = _shares(tmp_path, "order")
    jobs = {"a": _Job(1, 5000, 2000, id="a"), "b": _Job(1, 1000, 2000, id="b"),
            "c": _Job(1, 3000, 2000, id="c")}  # every one loading-bound: shortest first
    shares.follow(jobs, NODE1000)
    assert events[-1] == ("cpu_shares", {"weights": {"b": 263, "c": 33, "a": 4},
                                         "rule": "order", "order": ["b", "c", "a"],
                                         "ceilings": {"b": 2000, "c": 2000, "a": 2000}})
    assert shares.for_the_model(SAMPLES) == [SAMPLES[1]]  # rates follow the weights
    # a's GPU found to bind it (300 samples/s: 16.7 s for its 5,000) and c with 9,000 left:
    # ranked last, a would end the node 60 % later than ranked first. The same workers,
    # another order: written again
    jobs["a"].ceiling, jobs["c"].remaining_samples = 300.0, 9000
    shares.follow(jobs, NODE1000)
    assert events[-1][1]["order"] == ["a", "b", "c"] and shares.groups.weight("a") == 263
    written = len(events)
    shares.follow(jobs, NODE1000)
    assert len(events) == written  # nothing moved: nothing written
    del jobs["a"], jobs["b"]
    shares.follow(jobs, NODE1000)  # one job left: its loading is its own again
    assert shares.for_the_model(SAMPLES) == SAMPLES

