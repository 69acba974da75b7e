"""The arrival buffer, shortened (docs/design.md, "The loop"): a job that could start now is
decided after ``arrival_settle_s``, not after the whole arrival window; one with no room
waits the window; ``hold_arrivals`` restores the paper's buffer. The daemon's scheduler on a
fake clock, and the simulator, which runs the same rule.

No sockets, processes or sleeps: time is a clock the tests move by hand."""

from __future__ import annotations

import pytest

from adloader.config import config_from
from adloader.daemon.control.live import LiveJob
from adloader.daemon.control.scheduler import Scheduler
from adloader.daemon.control.tokens import TokenDigest
from adloader.protocol import Resize
from adloader.sim.simulator import SimConfig, simulate
from adloader.sim.trace import Trace, TraceJob

RESNET18 = {"batch_size": 32, "gpus": 1, "flops_g": 3.63, "params_m": 11.7}
WINDOW, SETTLE = 5.0, 0.25


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def scheduler(model, clock, *, capacity=8, gpus=2, hold=False) -> Scheduler:
    return Scheduler(capacity=capacity, gpus=gpus, policy="optimal", model=model,
                     tokens=TokenDigest(b"k" * 32), arrival_window_s=WINDOW,
                     arrival_settle_s=SETTLE, hold_arrivals=hold, completion_window_s=WINDOW,
                     max_jobs_per_gpu=2, clock=clock)


def submit(s: Scheduler, job_id: str) -> LiveJob:
    job = LiveJob(job_id, s.tokens.digest(f"token-{job_id}"), RESNET18["batch_size"],
                  RESNET18["gpus"], RESNET18["flops_g"], RESNET18["params_m"], 200,
                  submitted=s.clock())
    s.add(job)
    assert job.state == "buffered"
    return job


def plans(out) -> list[dict]:
    return [data for _, kind, data in out.events if kind == "plan"]


@pytest.fixture
def clock():
    return Clock()


def test_an_arrival_on_an_idle_node_is_launched_after_the_settle(paper_model, clock):
    s = scheduler(paper_model, clock)
    t0 = clock.now
    submit(s, "j-1")
    assert s.flush_at == pytest.approx(t0 + SETTLE) and SETTLE < WINDOW
    clock.now = t0 + SETTLE - 0.01
    assert s.tick().launch == []
    clock.now = t0 + SETTLE
    out = s.tick()
    assert [j.id for j in out.launch] == ["j-1"] and s.jobs["j-1"].state == "running"


def test_jobs_submitted_together_are_launched_in_one_decision(paper_model, clock):
    s = scheduler(paper_model, clock)
    t0 = clock.now
    for i, dt in enumerate((0.0, 0.05, 0.2)):  # a replay submitting a mix, one by one
        clock.now = t0 + dt
        submit(s, f"j-{i}")
    assert s.flush_at == pytest.approx(t0 + SETTLE)  # the first arrival's settle
    clock.now = t0 + SETTLE
    out = s.tick()
    assert sorted(j.id for j in out.launch) == ["j-0", "j-1", "j-2"]
    assert len(plans(out)) == 1 and sorted(plans(out)[0]["launched"]) == ["j-0", "j-1", "j-2"]


def test_held_arrivals_wait_the_whole_window(paper_model, clock):
    s = scheduler(paper_model, clock, hold=True)
    t0 = clock.now
    submit(s, "j-1")
    clock.now = t0 + SETTLE
    assert s.tick().launch == []
    clock.now = t0 + WINDOW - 0.01
    assert s.tick().launch == []
    clock.now = t0 + WINDOW
    assert [j.id for j in s.tick().launch] == ["j-1"]


def test_an_arrival_beside_running_jobs_resizes_them_after_the_settle(paper_model, clock):
    s = scheduler(paper_model, clock)
    submit(s, "j-1")
    submit(s, "j-2")
    clock.now += SETTLE
    s.tick()
    before = {j.id: j.workers for j in s.jobs.values()}
    assert sum(before.values()) == 8  # two jobs use the whole node
    t1 = clock.now
    submit(s, "j-3")
    clock.now = t1 + SETTLE
    out = s.tick()
    assert [j.id for j in out.launch] == ["j-3"]
    resized = sorted(jid for jid, msg in out.send if isinstance(msg, Resize))
    assert resized and resized == sorted(plans(out)[0]["resized"])  # live, at a batch boundary


@pytest.mark.parametrize("capacity, gpus", [(8, 2), (4, 4)], ids=["no GPU room", "no worker"])
def test_a_job_that_cannot_start_waits_the_window(paper_model, clock, capacity, gpus):
    """Full GPUs (2 a GPU), or as many jobs as workers (C ≥ N): the fifth arrival could not
    start, so it brings no early decision; the window's decision queues it."""
    s = scheduler(paper_model, clock, capacity=capacity, gpus=gpus)
    for i in range(4):
        submit(s, f"j-{i}")
    clock.now += SETTLE
    assert len(s.tick().launch) == 4
    t1 = clock.now
    submit(s, "j-4")
    assert s.flush_at == pytest.approx(t1 + WINDOW)
    clock.now = t1 + SETTLE
    assert s.tick().events == []
    clock.now = t1 + WINDOW
    out = s.tick()
    assert out.launch == [] and plans(out)[0]["queued"] == ["j-4"]
    assert s.jobs["j-4"].state == "queued"


def test_a_job_over_the_room_of_a_burst_is_queued_in_the_same_decision(paper_model, clock):
    s = scheduler(paper_model, clock, gpus=1)  # room for two
    for i in range(3):
        submit(s, f"j-{i}")
    clock.now += SETTLE
    out = s.tick()
    assert sorted(j.id for j in out.launch) == ["j-0", "j-1"]
    assert plans(out)[0]["queued"] == ["j-2"]


def test_the_settings_and_the_flags():
    cfg = config_from({}, environ={})
    assert (cfg.arrival_settle_s, cfg.hold_arrivals) == (0.05, False)
    cfg = config_from({"arrival_settle_s": 0.5}, environ={"ADLOADER_HOLD_ARRIVALS": "1"})
    assert (cfg.arrival_settle_s, cfg.hold_arrivals) == (0.5, True)
    from adloader.cli import build_parser
    from adloader.cli.daemon import _settings

    args = build_parser("daemon").parse_args(["daemon", "--hold-arrivals",
                                             "--arrival-settle", "0.1"])
    assert (args.hold_arrivals, args.arrival_settle_s) == (True, 0.1)
    args = build_parser("daemon").parse_args(["daemon"])
    assert args.hold_arrivals is None  # unset: the file's or the environment's
    assert _settings(args).hold_arrivals is False


# -- the simulator: the same rule ----------------------------------------------------------

def _trace(arrivals: list[float]) -> Trace:
    return Trace(name="settle", jobs=tuple(
        TraceJob(name=f"j{i}", model="Resnet18", batch_size=128, gpus=1, iterations=200,
                 arrival_s=t) for i, t in enumerate(arrivals)))


@pytest.mark.parametrize("hold, wait", [(False, SETTLE), (True, 30.0)])
def test_simulated_starts_follow_the_rule(paper_profile, paper_model, hold, wait):
    trace = _trace([0.0, 0.1, 500.0])  # an idle node at 500 s: the first two are done
    out = simulate(trace, paper_profile, paper_model,
                   SimConfig(policy="ftf", arrival_window_s=30.0, arrival_settle_s=SETTLE,
                             hold_arrivals=hold)).to_json()
    start = {j["name"]: j["start_s"] for j in out["jobs"]}
    assert start["j0"] == start["j1"] == pytest.approx(wait)  # one decision for both
    assert start["j2"] == pytest.approx(500.0 + wait)
    assert max(j["end_s"] for j in out["jobs"][:2]) < 500.0


def test_a_simulated_job_with_no_gpu_room_waits(paper_profile, paper_model):
    slots = paper_profile.gpus * paper_profile.max_jobs_per_gpu
    trace = _trace([0.0] * slots + [1.0])  # every GPU full when the last arrives
    out = simulate(trace, paper_profile, paper_model,
                   SimConfig(policy="ftf", arrival_window_s=30.0,
                             arrival_settle_s=SETTLE)).to_json()
    jobs = {j["name"]: j for j in out["jobs"]}
    last = jobs[f"j{slots}"]
    assert all(jobs[f"j{i}"]["start_s"] == pytest.approx(SETTLE) for i in range(slots))
    first_end = min(jobs[f"j{i}"]["end_s"] for i in range(slots))
    assert last["start_s"] >= first_end > 1.0 + SETTLE  # queued until a GPU frees
