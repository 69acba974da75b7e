"""The daemon's scheduler under ``ftf``: a fake clock, ``LiveJob`` objects, no sockets.

``ftf`` lends most workers to the job it expects to finish first, so the scheduler must
re-plan the moment a job finishes, and look again when a job runs past what it said.
"""

from __future__ import annotations

import pytest
from test_scheduler import Clock  # the hand-moved clock of the scheduler tests

from adloader.daemon.control.live import LiveJob
from adloader.daemon.control.scheduler import REVIEW_MIN_S, Scheduler
from adloader.daemon.control.tokens import TokenDigest
from adloader.protocol import Finish, Heartbeat, JobFeatures, Register

SMALL = {"batch_size": 32, "gpus": 1, "flops_g": 0.3, "params_m": 1.0}  # GPU-light: loading-bound
CAPACITY, GPUS, WINDOW = 12, 4, 5.0


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def sched(paper_model, clock):
    return Scheduler(capacity=CAPACITY, gpus=GPUS, policy="ftf", model=paper_model,
                     tokens=TokenDigest(b"k" * 32), arrival_window_s=WINDOW,
                     completion_window_s=WINDOW, heartbeat_s=1.0, lost_timeout_s=60.0,
                     max_jobs_per_gpu=1, cancel_grace_s=10.0, clock=clock)


def start(s: Scheduler, clock: Clock, iterations: dict[str, int]) -> None:
    for job_id, its in iterations.items():
        s.add(LiveJob(job_id, s.tokens.digest(f"t-{job_id}"), SMALL["batch_size"],
                      SMALL["gpus"], SMALL["flops_g"], SMALL["params_m"], its,
                      submitted=clock.now))
    clock.now += WINDOW
    out = s.tick()
    for job in out.launch:
        job.supervisor = "launcher"
    for job_id, its in iterations.items():
        s.message(f"c-{job_id}".encode(), Register(
            job=job_id, token=f"t-{job_id}", pid=1,
            features=JobFeatures(model="small", iterations=its, **SMALL)))


def beat(s: Scheduler, job_id: str, iteration: int) -> None:
    job = s.jobs[job_id]
    s.message(f"c-{job_id}".encode(), Heartbeat(
        job=job_id, token=f"t-{job_id}", iteration=iteration, step_s=32 / job.ceiling,
        data_wait_s=0.0, samples_per_s=job.ceiling, workers=job.workers))


def test_the_shortest_job_is_served_first_and_its_workers_move_at_its_finish(sched, clock):
    start(sched, clock, {"short": 2_000, "long": 20_000, "longer": 30_000})
    w = {k: j.workers for k, j in sched.jobs.items()}
    assert w["short"] > w["long"] and w["short"] > w["longer"]  # fair would split evenly
    assert sum(w.values()) <= CAPACITY and sched.completion_window_s == 0.0
    sched.message(b"c-short", Finish(job="short", token="t-short", iterations=2_000))
    sched.exited("short", 0)
    out = sched.tick()  # no completion window: the freed workers go out at once
    moved = {jid for jid, _ in out.send}
    assert sched.jobs["short"].state == "finished" and moved
    assert sched.jobs["long"].workers > w["long"]


def test_a_job_running_past_what_it_said_loses_its_lead_at_the_review(sched, clock):
    start(sched, clock, {"liar": 100, "honest": 20_000})
    assert sched.jobs["liar"].workers > sched.jobs["honest"].workers
    assert sched.flush_at is not None and sched.flush_at - clock.now >= REVIEW_MIN_S - 1e-9
    # it said 100 iterations and is at 5,000: its remaining is now estimated to grow
    deadline = clock.now + 120.0
    while clock.now < deadline and sched.jobs["liar"].workers > sched.jobs["honest"].workers:
        clock.now += 1.0
        beat(sched, "liar", 5_000 + int(clock.now))
        beat(sched, "honest", 100)
        sched.tick()
    # past its own deadline it can no longer lead: every job is held to fair's floor
    assert sched.jobs["liar"].workers <= sched.jobs["honest"].workers
    assert clock.now - deadline + 120.0 <= 2 * REVIEW_MIN_S + 2.0  # at the first review


def test_a_job_that_states_no_length_puts_the_node_on_fair(paper_model, sched, clock):
    """Deadlines and shortest-first would rest on a guess of its length: while it is there
    the node plans as ``fair`` does; once it leaves, the short job leads again."""
    other = Clock()
    fair = Scheduler(capacity=CAPACITY, gpus=GPUS, policy="fair", model=paper_model,
                     tokens=TokenDigest(b"k" * 32), arrival_window_s=WINDOW,
                     completion_window_s=WINDOW, heartbeat_s=1.0, lost_timeout_s=60.0,
                     max_jobs_per_gpu=1, cancel_grace_s=10.0, clock=other)
    jobs = {"short": 2_000, "open": None, "long": 20_000}
    start(sched, clock, jobs)
    start(fair, other, jobs)
    assert {k: j.workers for k, j in sched.jobs.items()} == \
        {k: j.workers for k, j in fair.jobs.items()}
    assert sched.jobs["short"].workers <= sched.jobs["long"].workers + 1  # no lead
    sched.message(b"c-open", Finish(job="open", token="t-open", iterations=50))
    sched.exited("open", 0)
    sched.tick()
    assert sched.jobs["short"].workers > sched.jobs["long"].workers  # ftf again


def test_start_up_does_not_spend_a_jobs_deadline(sched, clock):
    """Balance's shadow counts a job's time from its first batch: a start-up (CUDA, the model,
    the first workers: 6-7 s on the H100 node) that no allocation shortens must not use up
    the slack that lets ``ftf`` serve the shortest job first. Before this, the review 5 s
    after the arrival found every deadline spent and re-planned every job to fair's split
    before any had trained a batch (docs/gpu/h100-2026-11-26)."""
    start(sched, clock, {"short": 2_000, "long": 20_000, "longer": 30_000})
    first = {k: j.workers for k, j in sched.jobs.items()}
    assert first["short"] > first["long"]
    sent = []
    until = clock.now + 20 * REVIEW_MIN_S  # far past balance's whole run of the three
    while clock.now < until:
        clock.now += 1.0
        for job_id in first:  # alive, not yet training: iteration 0
            beat(sched, job_id, 0)
        sent += sched.tick().send
    assert sent == [] and {k: j.workers for k, j in sched.jobs.items()} == first
    # training now: the deadlines count from here, and the shortest job keeps its lead
    for _ in range(3):
        clock.now += 1.0
        for job_id in first:
            beat(sched, job_id, 10)
        sched.tick()
    assert sched.jobs["short"].workers > sched.jobs["long"].workers
