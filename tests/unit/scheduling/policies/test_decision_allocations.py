"""Memory allocated per planner decision (issue 24 item 7: a budget on a figure noise cannot
move). One decision on a 16-job node — admit, place, the TPM's demands, ``ftf`` with its
three passes — measured with tracemalloc, which counts Python's and numpy's allocations
alike and gives the same figure on every run, unlike time or RSS. The budget sits above
today's figure (printed on failure) with room for a changed numpy, not for a decision that
starts copying tables or keeping history.
"""

from __future__ import annotations

import functools
import tracemalloc

import pytest

from adloader.bench.sim.report import setup
from adloader.models import features
from adloader.scheduling.planner import PlanJob, plan

MODELS = ("Resnet18", "mdResnet12", "smResnet20", "VGG11")
BUDGET_PEAK_KB = 48  # the most a decision may hold at once (23 KB on 2026-11-26)
BUDGET_BLOCKS = 200  # traced blocks still alive after it (42–69 on 2026-11-26)


@functools.cache
def _node():
    profile, model, _ = setup("paper")
    return profile, model, model.loading_table(profile.loading_workers)


def _jobs(n: int = 16) -> list[PlanJob]:
    out = []
    for i in range(n):
        f = features(MODELS[i % len(MODELS)])
        out.append(PlanJob(f"j{i}", 128, 1, f.flops_g, f.params_m, 12_800.0 * (1 + i % 5),
                           running=i < n - 1, workers=1 if i < n - 1 else 0,
                           gpu_ids=(i % 4,) if i < n - 1 else ()))
    return out


def _decide(jobs):
    profile, model, table = _node()
    return plan(jobs, capacity=profile.loading_workers, gpus=profile.gpus, model=model,
                table=table, policy="ftf", now=100.0, max_jobs_per_gpu=4)


def test_one_decision_allocates_within_its_budget():
    jobs = _jobs()
    _decide(jobs)  # warm: imports, the model's cached tables
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        done = _decide(jobs)
        _, peak = tracemalloc.get_traced_memory()
        blocks = sum(s.count for s in tracemalloc.take_snapshot().statistics("filename"))
    finally:
        tracemalloc.stop()
    assert done.workers, "the decision planned nothing: the budget would measure nothing"
    held_kb = (peak - before) / 1024
    assert held_kb <= BUDGET_PEAK_KB, f"one decision held {held_kb:.0f} KB at its peak"
    assert blocks <= BUDGET_BLOCKS, f"{blocks} traced blocks alive after one decision"


@pytest.mark.parametrize("n", [4, 16])
def test_the_decision_is_a_real_ftf_decision(n):
    done = _decide(_jobs(n))
    assert sum(done.workers.values()) <= _node()[0].loading_workers
    assert set(done.workers) | set(done.queued) == {f"j{i}" for i in range(n)}
