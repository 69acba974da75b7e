"""``adloader.scheduling.planner.plan``: one scheduling decision, plain ``PlanJob`` objects in, a
``Plan`` out (in the style of adaptdl's ``pollux_test.py``).

Most cases use a stand-in TPM whose training ceiling is ``1000 / flops_g`` samples/s and a
hand-made loading table (100 samples/s a worker up to a knee), so every expected number can
be worked out by hand; the random cases also run against the paper's fitted TPM.
"""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from adloader.scheduling.planner import PlanJob, demands, plan
from adloader.scheduling.policies.allocation import oracle, total_throughput
from adloader.scheduling.policies.registry import POLICIES


class RateModel:
    """A stand-in TPM: B·F_μ = 1000 / flops_g samples/s (all ``plan`` asks of a model)."""

    def training_throughput(self, batch_size, gpus, flops_g, params_m):
        return 1000.0 / flops_g


MODEL = RateModel()


def rate(samples_per_s: float) -> float:
    """The ``flops_g`` that gives a job this training ceiling under ``RateModel``."""
    return 1000.0 / samples_per_s


def staged_table(capacity, per_worker=100.0, knee=None, contended=40.0):
    """λ(d; D) = d/D · L(D), L piecewise linear (per_worker a worker up to the knee, then
    ``contended``), zero for d > D — the shape ``ThroughputModel.loading_table`` builds."""
    knee = capacity if knee is None else knee
    node = np.arange(capacity + 1)
    total = per_worker * np.minimum(node, knee) + contended * np.clip(node - knee, 0, None)
    d = node[None, :]
    return np.where(d <= node[:, None], d / np.maximum(node[:, None], 1) * total[:, None], 0.0)


def job(name, samples_per_s=300.0, remaining=1e5, *, gpus=1, running=False, workers=0,
        gpu_ids=(), batch_size=32, requested=None):
    return PlanJob(name, batch_size, gpus, rate(samples_per_s), 10.0, remaining, running,
                   workers, tuple(gpu_ids), requested)


def decide(jobs, *, capacity=8, gpus=2, policy="optimal", model=MODEL, table=None, **kw):
    table = staged_table(capacity) if table is None else table
    return plan(jobs, capacity=capacity, gpus=gpus, model=model, table=table, policy=policy,
                **kw)


# -- admission --------------------------------------------------------------------------

def test_admission_stops_at_gpu_room_in_arrival_order():
    running = [job("r", running=True, workers=4, gpu_ids=(0,))]
    waiting = [job("w1"), job("w2"), job("w3")]
    out = decide(running + waiting, gpus=1, max_jobs_per_gpu=2)
    assert out.launched == ["w1"]  # one place left on the one GPU: the first to arrive
    assert out.queued == ["w2", "w3"]
    assert out.gpu_ids["w1"] == (0,)
    assert "w2" not in out.workers and "w2" not in out.gpu_ids

    out = decide(running + waiting, gpus=1, max_jobs_per_gpu=3)
    assert sorted(out.launched) == ["w1", "w2"] and out.queued == ["w3"]


def test_admission_needs_a_worker_for_every_job():
    running = [job("r1", running=True, workers=2, gpu_ids=(0,)),
               job("r2", running=True, workers=1, gpu_ids=(1,))]
    waiting = [job("w1"), job("w2")]
    out = decide(running + waiting, capacity=3, gpus=4)
    assert out.launched == ["w1"] and out.queued == ["w2"]  # C = 3 ≥ N = 3, no more
    assert out.workers == {"r1": 1, "r2": 1, "w1": 1}


def test_multi_gpu_jobs_go_to_the_least_loaded_gpus():
    running = [job("r", gpus=2, running=True, workers=2, gpu_ids=(0, 1))]
    out = decide(running + [job("w", gpus=2)], gpus=4)
    assert out.gpu_ids["w"] == (2, 3)
    out = decide(running + [job("w", gpus=3)], gpus=4)
    assert out.gpu_ids["w"] == (0, 2, 3)  # two free GPUs only: one shared, the lowest id


def test_a_job_too_wide_for_the_node_waits():
    out = decide([job("w", gpus=3)], gpus=2)
    assert out.launched == [] and out.queued == ["w"] and out.workers == {}


def test_pinned_jobs_go_where_they_are_pinned_or_wait():
    running = [job("r1", running=True, workers=2, gpu_ids=(1,)),
               job("r2", running=True, workers=2, gpu_ids=(1,))]
    waiting = [job("on1", gpu_ids=(1,)), job("on0", gpu_ids=(0,)), job("free")]
    out = decide(running + waiting, gpus=2, max_jobs_per_gpu=2)
    assert out.queued == ["on1"]  # GPU 1 is full, although GPU 0 has room
    assert sorted(out.launched) == ["free", "on0"]
    assert out.gpu_ids["on0"] == (0,) and out.gpu_ids["free"] == (0,)


# -- order: shortest predicted remaining time first, except the critical job ------------

def test_shortest_predicted_remaining_time_goes_first():
    """``balance`` gives C // N each and the remainder to the first in the planner's order:
    with C = 4 and three jobs, the one job with two workers is the one the order put first.
    a: 100 samples/s, 300 left → 3 s. b: 400/s (the node's most), 800 left → 2 s. c: 400/s,
    900 left → 2.25 s. b has more samples left than a but finishes first; a is the longest,
    yet not critical: 3 s < the 1700 samples of b and c at the node's 400/s (4.25 s)."""
    jobs = [job("a", 100.0, 300), job("b", 1000.0, 800), job("c", 1000.0, 900)]
    out = decide(jobs, capacity=4, gpus=3, policy="balance")
    assert out.workers == {"a": 1, "b": 2, "c": 1}


def test_the_critical_job_goes_first():
    """The same jobs with a holding 3000 samples: 30 s even at full speed, longer than the
    node needs to load everyone else's (4.25 s) — it bounds the makespan and goes first."""
    jobs = [job("a", 100.0, 3000), job("b", 1000.0, 800), job("c", 1000.0, 900)]
    out = decide(jobs, capacity=4, gpus=3, policy="balance")
    assert out.workers == {"a": 2, "b": 1, "c": 1}


def test_order_uses_the_shared_gpu_rate():
    """The node loads at most 400 samples/s. b and c share GPU 0 (caps 0.8 each: half of it
    each), so each trains at 250 samples/s; a has GPU 1 to itself: 300. Remaining times:
    a 300/300 = 1 s, b 320/250 = 1.28 s, c 350/250 = 1.4 s (not critical: 1.4 s < the 620
    samples of a and b at 400/s, 1.55 s) — a first. Without the shares b would look faster
    than a (320/400 = 0.8 s) and go first."""
    jobs = [job("b", 500.0, 320, gpu_ids=(0,)), job("c", 500.0, 350, gpu_ids=(0,)),
            job("a", 300.0, 300, gpu_ids=(1,))]
    out = decide(jobs, capacity=4, gpus=2, policy="balance")
    assert out.workers == {"a": 2, "b": 1, "c": 1}
    # T = min(ceiling, λ(d; 4)) at 100 samples/s a worker
    assert out.predicted == {"a": pytest.approx(200.0), "b": pytest.approx(100.0),
                             "c": pytest.approx(100.0)}


# -- keeping a running job's workers ----------------------------------------------------

def test_a_running_job_keeps_its_count_when_the_change_is_within_the_threshold():
    """Alone with 3 workers it loads 300 samples/s; a 4th would reach its ceiling of 305:
    +1.7 % is within 2 %, so it keeps 3 (no needless resize)."""
    r = job("r", 305.0, running=True, workers=3, gpu_ids=(0,))
    out = decide([r])
    assert out.workers == {"r": 3} and out.resized == []
    assert out.predicted["r"] == pytest.approx(300.0)


def test_a_running_job_is_resized_when_the_change_exceeds_the_threshold():
    r = job("r", 320.0, running=True, workers=3, gpu_ids=(0,))
    out = decide([r])  # 300 → 320: +6.7 %
    assert out.workers == {"r": 4} and out.resized == ["r"]
    out = decide([r], keep_threshold=0.1)  # within 10 %: kept
    assert out.workers == {"r": 3} and out.resized == []


def test_keeping_never_goes_beyond_capacity():
    """r gains nothing from 7 workers over 4 (both reach 305 samples/s), but keeping 7 next
    to the new job's 4 would need 11 of 8 workers: it gives 3 back."""
    r = job("r", 305.0, running=True, workers=7, gpu_ids=(0,))
    out = decide([r, job("w", 400.0)])
    assert out.workers == {"r": 4, "w": 4}
    assert out.resized == ["r"] and out.launched == ["w"]


def test_a_lone_job_with_spare_workers_keeps_them():
    """Alone with 6 workers, r reaches its ceiling of 305 samples/s; 4 reach it too. The
    change moves its predicted throughput by 0 %, within the threshold: it should keep 6."""
    r = job("r", 305.0, running=True, workers=6, gpu_ids=(0,))
    out = decide([r])
    assert out.workers == {"r": 6} and out.resized == []


def test_without_reallocation_running_jobs_keep_their_workers():
    running = [job("r1", 900.0, running=True, workers=2, gpu_ids=(0,)),
               job("r2", 900.0, running=True, workers=3, gpu_ids=(1,))]
    waiting = [job("w1", 900.0), job("w2", 900.0)]
    out = decide(running + waiting, realloc=False)
    assert out.workers["r1"] == 2 and out.workers["r2"] == 3
    assert out.resized == []
    assert sorted(out.launched) == ["w1", "w2"]
    assert out.workers["w1"] + out.workers["w2"] == 3  # what was free
    out = decide(running + waiting, realloc=True)  # the same jobs, reallocated: every
    assert out.resized and sum(out.workers.values()) == 8  # worker adds 100 samples/s


def test_without_reallocation_only_free_workers_admit():
    running = [job("r1", running=True, workers=4, gpu_ids=(0,)),
               job("r2", running=True, workers=3, gpu_ids=(1,))]
    out = decide(running + [job("w1"), job("w2")], realloc=False)
    assert out.launched == ["w1"] and out.queued == ["w2"]
    assert out.workers == {"r1": 4, "r2": 3, "w1": 1}


# -- properties on random cases ---------------------------------------------------------

@st.composite
def cases(draw):
    gpus = draw(st.integers(1, 3))
    per_gpu = draw(st.integers(1, 3))
    capacity = draw(st.integers(1, 10))
    load = [0] * gpus
    jobs, used = [], 0
    for i in range(draw(st.integers(0, 4))):  # running jobs, placed within the limits
        g = draw(st.integers(0, gpus - 1))
        if load[g] >= per_gpu or used >= capacity:
            continue
        w = draw(st.integers(1, max(1, (capacity - used) // 2)))
        load[g], used = load[g] + 1, used + w
        jobs.append(job(f"r{i}", draw(st.floats(20.0, 1500.0)),
                        draw(st.floats(10.0, 1e5)), running=True, workers=w, gpu_ids=(g,)))
    for i in range(draw(st.integers(0, 5))):  # waiting jobs, some wide, some pinned
        width = draw(st.integers(1, gpus))
        pinned = draw(st.booleans())
        ids = tuple(sorted(draw(st.lists(st.integers(0, gpus - 1), min_size=width,
                                         max_size=width, unique=True)))) if pinned else ()
        jobs.append(job(f"w{i}", draw(st.floats(20.0, 1500.0)), draw(st.floats(10.0, 1e5)),
                        gpus=width, gpu_ids=ids))
    return jobs, capacity, gpus, per_gpu


@settings(max_examples=150, deadline=None)
@given(cases(), st.sampled_from(sorted(POLICIES)), st.booleans(), st.integers(1, 8),
       st.floats(0.0, 80.0))
def test_every_plan_respects_the_node(case, policy, realloc, knee, contended):
    jobs, capacity, gpus, per_gpu = case
    table = staged_table(capacity, knee=knee, contended=contended)
    out = decide(jobs, capacity=capacity, gpus=gpus, policy=policy, table=table,
                 realloc=realloc, max_jobs_per_gpu=per_gpu)
    running = [j for j in jobs if j.running]
    waiting = [j for j in jobs if not j.running]
    # every waiting job is launched or queued, once; running jobs are neither
    assert sorted(out.launched + out.queued) == sorted(j.name for j in waiting)
    assert set(out.workers) == {j.name for j in running} | set(out.launched)
    assert set(out.predicted) == set(out.workers)
    # capacity, and a worker for every job that runs
    assert sum(out.workers.values()) <= capacity
    assert all(out.workers[name] >= 1 for name in out.launched)
    if realloc:
        assert all(out.workers[j.name] >= 1 for j in running)
    else:
        assert all(out.workers[j.name] == j.workers for j in running)
        assert out.resized == []
    # resized: exactly the running jobs whose count changed
    assert sorted(out.resized) == sorted(j.name for j in running
                                         if out.workers[j.name] != j.workers)
    # GPU room, widths and pins
    per = [0] * gpus
    for name in [j.name for j in running] + out.launched:
        for g in out.gpu_ids[name]:
            per[g] += 1
    assert max(per) <= per_gpu
    for j in waiting:
        if j.name in out.launched:
            assert len(set(out.gpu_ids[j.name])) == j.gpus
            if j.gpu_ids:
                assert out.gpu_ids[j.name] == j.gpu_ids
        else:
            assert j.name not in out.gpu_ids
    # a queued job that could go on any one GPU was refused for want of room: every GPU
    # full, or a worker for each job already spoken for
    room = capacity - (len(running) if realloc else sum(j.workers for j in running))
    for j in waiting:
        if j.name in out.queued and not j.gpu_ids and j.gpus == 1:
            assert min(per) == per_gpu or len(out.launched) >= room


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(20.0, 1500.0), st.integers(1, 2)), min_size=1,
                max_size=4),
       st.integers(1, 9), st.integers(1, 2), st.integers(2, 8), st.floats(0.0, 90.0))
def test_optimal_plans_reach_the_oracle(spec, capacity, gpus, knee, contended):
    """``allocation.optimal`` provably maximises Σ T_i: a plan made with it over waiting
    jobs predicts as much as exhaustive search over the same demands (shares included)."""
    jobs = [job(f"w{i}", mu, 1e4, gpus=min(width, gpus)) for i, (mu, width) in enumerate(spec)]
    table = staged_table(capacity, knee=knee, contended=contended)
    out = decide(jobs, capacity=capacity, gpus=gpus, table=table, max_jobs_per_gpu=2)
    admitted = [j for j in jobs if j.name in out.launched]
    assume(admitted)
    wanted = demands(admitted, out.gpu_ids, MODEL, table)
    best = total_throughput(wanted, oracle(wanted, capacity, table), table)
    assert total_throughput(wanted, out.workers, table) == pytest.approx(best, rel=1e-9)
    assert sum(out.predicted.values()) == pytest.approx(best, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([(32, 3.63, 11.7), (128, 3.63, 11.7),
                                           (32, 0.04, 0.27), (64, 4.1, 25.6)]),
                          st.integers(1, 2)), min_size=1, max_size=3),
       st.integers(3, 12))
def test_optimal_plans_reach_the_oracle_with_the_paper_tpm(paper_model, spec, capacity):
    jobs = [PlanJob(f"w{i}", b, gpus, f, m, 1e4) for i, ((b, f, m), gpus) in enumerate(spec)]
    table = paper_model.loading_table(capacity)
    out = plan(jobs, capacity=capacity, gpus=2, model=paper_model, table=table,
               policy="optimal")
    admitted = [j for j in jobs if j.name in out.launched]
    assume(admitted)
    wanted = demands(admitted, out.gpu_ids, paper_model, table)
    best = total_throughput(wanted, oracle(wanted, capacity, table), table)
    assert sum(out.predicted.values()) == pytest.approx(best, rel=1e-9)
