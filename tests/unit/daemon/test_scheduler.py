"""``adloader.daemon.control.scheduler.Scheduler``: events in, decisions out (in the style of rq's
``handle_command`` tests and adaptdl's ``pollux_test.py``).

No sockets, processes, disk or sleeps: jobs are ``LiveJob`` objects, a master's messages are
``adloader.protocol`` objects handed to ``message(identity, msg)``, the supervisor's word is
``exited(...)``, and time is a fake clock the tests advance. What the node would do with the
returned ``Actions`` (launch, send, reply, kill) is asserted, not done.
"""

from __future__ import annotations

import copy
import signal

import pytest

import adloader.daemon.control.scheduler as scheduler_module
from adloader.daemon.control import endings, registration
from adloader.daemon.control.live import ACTIVE, Actions, LiveJob
from adloader.daemon.control.scheduler import Scheduler
from adloader.daemon.control.tokens import TokenDigest
from adloader.errors import InputError
from adloader.protocol import (
    Allocation,
    Exit,
    Finish,
    Heartbeat,
    JobFeatures,
    Pause,
    Paused,
    Refused,
    Register,
    Resize,
    Resume,
    Stop,
    replaced,
)
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

RESNET18 = {"batch_size": 32, "gpus": 1, "flops_g": 3.63, "params_m": 11.7}
CAPACITY, GPUS = 8, 2
ARRIVAL_S, COMPLETION_S, LOST_S, GRACE_S = 5.0, 5.0, 3.0, 10.0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def sched(paper_model, clock):
    return Scheduler(capacity=CAPACITY, gpus=GPUS, policy="optimal", model=paper_model,
                     tokens=TokenDigest(b"k" * 32), arrival_window_s=ARRIVAL_S,
                     completion_window_s=COMPLETION_S, heartbeat_s=1.0,
                     lost_timeout_s=LOST_S, max_jobs_per_gpu=2, cancel_grace_s=GRACE_S,
                     clock=clock)


# -- helpers: what the REST API, the node and a job's master would do ---------------------

def token(job_id: str) -> str:
    return f"token-of-{job_id}"


def peer(job_id: str) -> bytes:
    return f"conn-{job_id}".encode()


def submit(s: Scheduler, job_id: str, iterations: int = 200, **spec) -> LiveJob:
    """A job submitted over REST enters the arrival buffer."""
    fields = {**RESNET18, **spec}
    job = LiveJob(job_id, s.tokens.digest(token(job_id)), fields.pop("batch_size"),
                  fields.pop("gpus"), fields.pop("flops_g"), fields.pop("params_m"),
                  iterations, submitted=s.clock(), **fields)
    out = s.add(job)
    assert out.events == [(job_id, "buffered", {})] and job.state == "buffered"
    return job


def launched(out: Actions) -> list[str]:
    """What the node does with ``Actions.launch``: start each job under the launcher (in
    the planner's order, not necessarily arrival's); the ids launched, sorted."""
    for job in out.launch:
        job.supervisor = "launcher"
    return sorted(job.id for job in out.launch)


def start(s: Scheduler, clock: Clock, *job_ids: str, register: bool = True) -> Actions:
    """Submit jobs, let the arrival window close, launch them and (by default) let each
    master register from its own connection."""
    for job_id in job_ids:
        submit(s, job_id)
    clock.advance(s.arrival_window_s)
    out = s.tick()
    assert launched(out) == list(job_ids)
    if register:
        for job_id in job_ids:
            out.extend(s.message(peer(job_id), register_msg(job_id)))
    return out


def register_msg(job_id: str, *, tok: str | None = None, workers: int = 0,
                 supervisor: str | None = None, name: str | None = None) -> Register:
    return Register(job=job_id, token=tok or token(job_id), pid=4242,
                    features=JobFeatures(model="Resnet18", iterations=200, **RESNET18),
                    workers=workers, supervisor=supervisor, name=name)


def heartbeat(s: Scheduler, job_id: str, *, tok: str | None = None, step_s: float | None = None,
              data_wait_s: float = 0.0, samples_per_s: float = 300.0,
              workers: int | None = None) -> Heartbeat:
    """By default the job steps exactly as its plan predicted (no correction of c_i)."""
    job = s.jobs.get(job_id)
    if step_s is None:
        step_s = job.batch_size / job.ceiling if job and job.ceiling > 0 else 0.1
    return Heartbeat(job=job_id, token=tok or token(job_id),
                     iteration=(job.iteration if job else 0) + 10, step_s=step_s,
                     data_wait_s=data_wait_s, samples_per_s=samples_per_s,
                     workers=(job.workers if job else 1) if workers is None else workers)


def attach(s: Scheduler, job_id: str, *, workers: int = 2, supervisor: str | None = None,
           name: str | None = None) -> Actions:
    """A job started by hand (``python3 train.py`` or ``adloader run``) registers itself."""
    return s.message(peer(job_id), register_msg(job_id, workers=workers,
                                                supervisor=supervisor, name=name))


def run_for(s: Scheduler, clock: Clock, seconds: float, alive=(), step: float = 1.0) -> Actions:
    """Let time pass in steps, the ``alive`` jobs heartbeating, the node ticking."""
    out = Actions()
    end = clock.now + seconds
    while clock.now < end - 1e-9:
        clock.advance(min(step, end - clock.now))
        for job_id in alive:
            if s.jobs[job_id].state in ACTIVE:
                out.extend(s.message(peer(job_id), heartbeat(s, job_id)))
        out.extend(s.tick())
    return out


def kinds(out: Actions, job_id: str | None = ...) -> list[str]:
    return [kind for jid, kind, _ in out.events if job_id is ... or jid == job_id]


def event(out: Actions, kind: str, job_id: str | None = ...) -> dict:
    found = [data for jid, k, data in out.events if k == kind and (job_id is ... or jid == job_id)]
    assert len(found) == 1, (kind, out.events)
    return found[0]


def sent(out: Actions, job_id: str) -> list:
    return [msg for jid, msg in out.send if jid == job_id]


def snapshot(s: Scheduler):
    return ({k: copy.deepcopy(v) for k, v in s.jobs.items()}, s.flush_at, dict(s.ended))


# -- the arrival buffer, plans and resizes ------------------------------------------------

def test_held_arrivals_wait_for_the_window_and_are_planned_together(sched, clock):
    sched.hold_arrivals = True  # the paper's buffer (the settle: test_arrival_settle.py)
    t0 = clock.now
    submit(sched, "j-000001")
    assert sched.tick() == Actions()  # the window is open: nothing happens
    clock.advance(2.0)
    submit(sched, "j-000002")  # within the first job's window: joins its decision
    clock.now = t0 + ARRIVAL_S - 0.1
    out = sched.tick()
    assert out.launch == [] and kinds(out) == []
    assert {j.state for j in sched.jobs.values()} == {"buffered"}

    clock.now = t0 + ARRIVAL_S  # the window closes
    out = sched.tick()
    assert launched(out) == ["j-000001", "j-000002"]
    assert kinds(out) == ["plan"]  # one decision for both
    plan = event(out, "plan")
    assert sorted(plan["launched"]) == ["j-000001", "j-000002"]
    assert plan["resized"] == [] and plan["queued"] == []
    a, b = sched.jobs["j-000001"], sched.jobs["j-000002"]
    assert a.state == b.state == "running"
    assert plan["workers"] == {a.id: a.workers, b.id: b.workers}
    assert a.workers >= 1 and b.workers >= 1 and a.workers + b.workers <= CAPACITY
    assert sorted([a.gpu_ids, b.gpu_ids]) == [(0,), (1,)]  # one a GPU: the least loaded
    assert out.send == []  # launched jobs get their workers from the launcher, not a message
    assert sched.tick() == Actions()  # the buffer is empty again


def test_a_held_job_arriving_after_the_window_waits_for_its_own(sched, clock):
    sched.hold_arrivals = True
    t0 = clock.now
    submit(sched, "j-000001")
    clock.now = t0 + ARRIVAL_S
    assert launched(sched.tick()) == ["j-000001"]
    clock.now = t0 + ARRIVAL_S + 1.0
    submit(sched, "j-000002")
    clock.now = t0 + 2 * ARRIVAL_S  # 4 s into the second window
    assert sched.tick().launch == []
    clock.now = t0 + 2 * ARRIVAL_S + 1.0
    assert launched(sched.tick()) == ["j-000002"]


def test_resizes_go_to_running_jobs_whose_workers_changed_with_increasing_seq(sched, clock):
    out = start(sched, clock, "j-000001", "j-000002")
    seqs = {job_id: [m.seq for m in sent(out, job_id)] for job_id in ("j-000001", "j-000002")}
    assert seqs == {"j-000001": [1], "j-000002": [1]}  # Allocation, answering Register
    assert all(isinstance(m, Allocation) for _, m in out.send)
    before = {j.id: j.workers for j in sched.jobs.values()}
    assert sum(before.values()) == CAPACITY  # two jobs use the whole node

    submit(sched, "j-000003")
    out = run_for(sched, clock, ARRIVAL_S, alive=["j-000001", "j-000002"])
    assert launched(out) == ["j-000003"]
    plan = event(out, "plan")
    changed = [j for j in ("j-000001", "j-000002") if sched.jobs[j].workers != before[j]]
    assert changed and sorted(plan["resized"]) == changed  # a third job needs some
    resizes = [(jid, m) for jid, m in out.send if isinstance(m, Resize)]
    assert sorted(jid for jid, _ in resizes) == changed  # only to those whose count changed
    for job_id, msg in resizes:
        assert msg.workers == sched.jobs[job_id].workers == plan["workers"][job_id]
        assert msg.seq == sched.jobs[job_id].seq == 2
        seqs[job_id].append(msg.seq)
    assert sum(j.workers for j in sched.jobs.values()) <= CAPACITY

    # the third job ends: after the completion window the others get its workers back
    out = sched.exited("j-000003", 0)
    assert sched.jobs["j-000003"].state == "finished"
    out = run_for(sched, clock, COMPLETION_S, alive=["j-000001", "j-000002"])
    resizes = [(jid, m) for jid, m in out.send if isinstance(m, Resize)]
    assert resizes
    for job_id, msg in resizes:
        seqs[job_id].append(msg.seq)
        assert msg.workers == sched.jobs[job_id].workers
    for job_seqs in seqs.values():
        assert job_seqs == sorted(set(job_seqs))  # strictly increasing, per job
    assert {j.id: j.workers for j in sched.jobs.values() if j.state == "running"} == before


# -- trust: a message is judged by (job id, token) alone ----------------------------------

FORGERIES = {
    "wrong token": lambda s: heartbeat(s, "j-000001", tok="guessed"),
    "another job's token": lambda s: heartbeat(s, "j-000001", tok=token("j-000002")),
    "finish with another's token": lambda s: Finish(job="j-000001", token=token("j-000002"),
                                                    iterations=5, exit_code=1),
    "exit with a wrong token": lambda s: Exit(job="j-000001", token="guessed", signal=9),
    "register with a wrong token": lambda s: register_msg("j-000001", tok="guessed",
                                                          workers=8),
    "paused with a wrong token": lambda s: Paused(job="j-000001", token="guessed", seq=9),
    "unknown job": lambda s: heartbeat(s, "j-000099", tok=token("j-000001")),
}
REASONS = {"unknown job": "unknown job"}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_a_message_that_does_not_prove_its_job_changes_nothing(sched, clock, case):
    start(sched, clock, "j-000001", "j-000002")
    clock.advance(0.5)
    before = snapshot(sched)
    out = sched.message(b"intruder", FORGERIES[case](sched))
    why = REASONS.get(case, "the token does not match the job")
    assert out.reply == [(b"intruder", Refused(reason=why))]  # the sender only
    assert len(out.events) == 1
    job_id, kind, data = out.events[0]
    assert kind == "refused" and data["reason"] == why
    assert job_id == (None if case == "unknown job" else "j-000001")
    assert out.send == [] and out.launch == [] and out.kill == []
    assert out.samples == [] and out.changed == []
    assert snapshot(sched) == before  # no job changed: not its peer, state, workers, seq…
    assert sched.jobs["j-000001"].peer == peer("j-000001")


def test_a_reconnect_takes_over_only_by_proof(sched, clock):
    start(sched, clock, "j-000001")
    job = sched.jobs["j-000001"]
    assert job.peer == peer("j-000001")
    out = sched.message(b"new-connection", heartbeat(sched, "j-000001"))
    assert out.reply == [] and job.peer == b"new-connection"
    out = sched.message(b"third", heartbeat(sched, "j-000001", tok="guessed"))
    assert out.reply == [(b"third", Refused(reason="the token does not match the job"))]
    assert job.peer == b"new-connection"


# -- jobs started by hand -----------------------------------------------------------------

def test_a_job_started_by_hand_registers_on_first_use_of_its_token(sched, clock):
    out = attach(sched, "mine.1", workers=3, name="my run")
    job = sched.jobs["mine.1"]
    assert (job.origin, job.state, job.registered) == ("attached", "running", True)
    assert (job.workers, job.gpu_ids, job.peer, job.name) == (3, (0,), peer("mine.1"), "my run")
    assert sched.tokens.verify(token("mine.1"), job.token_digest)
    assert out.send == [("mine.1", Allocation(seq=1, workers=3, heartbeat_s=1.0))]
    assert kinds(out) == ["attached"] and out.changed == [job]
    assert sched.flush_at == clock.now + ARRIVAL_S  # the next decision takes it in
    # the first token is the job's: another one for the same id is refused
    before = snapshot(sched)
    out = sched.message(b"other", register_msg("mine.1", tok="another-token", workers=8))
    assert out.reply == [(b"other", Refused(reason="the token does not match the job"))]
    assert snapshot(sched) == before


def test_a_job_answers_only_to_the_user_the_kernel_said_registered_it(sched, clock):
    """A job is bound to the uid that first registered it (``SO_PEERCRED``, as the node
    passes it): its token alone does not let another user's process speak for it — a leaked
    token, a shared file — on any connection; the same user's new connection takes over as
    before. Over ``tcp://`` (no uid) nothing is bound and nothing checked."""
    sched.message(peer("mine.1"), register_msg("mine.1"), uid=1000)
    job = sched.jobs["mine.1"]
    assert job.uid == 1000
    before = snapshot(sched)
    for msg in (heartbeat(sched, "mine.1"), register_msg("mine.1", workers=8),
                Finish(job="mine.1", token=token("mine.1"), iterations=10**6)):
        out = sched.message(b"other", msg, uid=1001)  # the right token, another user
        assert out.reply == [(b"other", Refused(reason="the job belongs to another user"))]
        assert out.send == [] and out.changed == []
    assert snapshot(sched) == before and job.peer == peer("mine.1")
    out = sched.message(b"again", heartbeat(sched, "mine.1"), uid=1000)  # its own user
    assert out.reply == [] and job.peer == b"again"
    out = sched.message(b"tcp", heartbeat(sched, "mine.1"), uid=None)  # no credentials
    assert out.reply == [] and job.peer == b"tcp"
    sched.message(b"x", register_msg("over.tcp"), uid=None)
    assert sched.jobs["over.tcp"].uid is None


def test_a_launched_job_is_bound_to_the_user_whose_master_registered_it(sched, clock):
    start(sched, clock, "j-000001", register=False)
    out = sched.message(peer("j-000001"), register_msg("j-000001"), uid=0)
    assert kinds(out) == ["registered"] and sched.jobs["j-000001"].uid == 0
    out = sched.message(b"other", register_msg("j-000001"), uid=1001)
    assert out.reply == [(b"other", Refused(reason="the job belongs to another user"))]


def test_a_job_started_by_hand_gets_only_what_is_free(sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    assert sched.node_workers() == CAPACITY
    out = attach(sched, "mine", workers=6)
    assert sched.jobs["mine"].workers == 1  # nothing free: one to start with
    assert sent(out, "mine") == [Allocation(seq=1, workers=1, heartbeat_s=1.0)]


def test_daemon_ids_are_not_for_jobs_started_by_hand(sched):
    out = sched.message(b"x", register_msg("j-000042"))
    assert len(out.reply) == 1 and out.reply[0][0] == b"x"
    assert isinstance(out.reply[0][1], Refused) and "j-" in out.reply[0][1].reason
    assert "j-000042" not in sched.jobs and out.send == [] and out.changed == []


@pytest.mark.parametrize("state", ["finished", "failed", "cancelled"])
def test_a_job_that_ended_before_a_restart_stays_ended(sched, state):
    sched.ended["mine"] = state
    for msg in (register_msg("mine"), heartbeat(sched, "mine")):
        out = sched.message(b"x", msg)
        assert out.reply == [(b"x", Refused(reason=f"job has ended ({state})"))]
        assert "mine" not in sched.jobs and out.send == []


# -- heartbeats, samples, lost and revived ------------------------------------------------

def test_the_loop_times_a_beat_by_its_jobs_clock_rebuilt_from_the_beats_rates(paper_model,
                                                                               clock):
    """The master measures each beat's rate over its own interval; the closed loop rebuilds
    the job's clock from those rates and times each count by it, shifted by the least delay
    seen: the third beat, 0.8 s late, is timed 1 s after the second, as it was read."""
    sched = Scheduler(capacity=CAPACITY, gpus=GPUS, policy="ftf", model=paper_model,
                      tokens=TokenDigest(b"k" * 32), arrival_window_s=ARRIVAL_S,
                      completion_window_s=COMPLETION_S, heartbeat_s=1.0,
                      lost_timeout_s=LOST_S, max_jobs_per_gpu=2, cancel_grace_s=GRACE_S,
                      clock=clock, closed_loop=True)
    start(sched, clock, "j-000001")
    job = sched.jobs["j-000001"]
    for iteration, read, late in ((10, 100.0, 0.1), (20, 101.0, 0.1), (30, 102.0, 0.8),
                                  (40, 103.0, 0.1)):
        clock.now = read + late
        sched.message(peer(job.id), Heartbeat(job=job.id, token=token(job.id),
                                              iteration=iteration, step_s=0.096,
                                              data_wait_s=0.004,
                                              samples_per_s=10.0 * job.batch_size, workers=4))
    times = [t for t, _ in sched.loop.jobs[job.id].beats][-4:]
    assert times == pytest.approx([100.1, 101.1, 102.1, 103.1])


def test_heartbeats_report_progress_and_yield_samples(sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    job = sched.jobs["j-000001"]
    node = sched.node_workers()
    # the GPU waits 4 % of the iteration: a training sample (μ)
    out = sched.message(peer(job.id), Heartbeat(job=job.id, token=token(job.id), iteration=10,
                                                step_s=0.096, data_wait_s=0.004,
                                                samples_per_s=320.0, workers=4))
    assert (job.iteration, job.throughput, job.step_s, job.data_wait_s) == (
        10, 320.0, 0.096, 0.004)
    assert job.busy_s == pytest.approx(0.96) and job.wait_s == pytest.approx(0.04)
    assert out.samples == [(job.id, TrainingSample(32, 1, 3.63, 11.7, 0.096))]
    assert out.send == [] and out.reply == []
    # it waits 6 %: its trainer still binds it most of the time, and its rate is not what
    # its workers load: no sample at all
    out = sched.message(peer(job.id), Heartbeat(job=job.id, token=token(job.id), iteration=30,
                                                step_s=0.094, data_wait_s=0.006,
                                                samples_per_s=250.0, workers=4))
    assert job.iteration == 30 and job.throughput == 250.0
    assert job.busy_s == pytest.approx(0.96 + 20 * 0.094)
    assert out.samples == []
    # it waits 30 %: the loader binds it, a loading sample (λ with d of the node's D workers)
    out = sched.message(peer(job.id), Heartbeat(job=job.id, token=token(job.id), iteration=30,
                                                step_s=0.07, data_wait_s=0.03,
                                                samples_per_s=250.0, workers=4))
    assert out.samples == [(job.id, LoadingSample(4, node, 250.0))]
    # exactly 5 % (1 s of a 20 s iteration, exact in binary) still counts as training
    out = sched.message(peer(job.id), Heartbeat(job=job.id, token=token(job.id), iteration=31,
                                                step_s=19.0, data_wait_s=1.0,
                                                samples_per_s=1.6, workers=4))
    assert out.samples == [(job.id, TrainingSample(32, 1, 3.63, 11.7, 19.0))]
    # no step measured yet: nothing to learn from
    out = sched.message(peer(job.id), Heartbeat(job=job.id, token=token(job.id), iteration=31,
                                                step_s=0.0, data_wait_s=0.0,
                                                samples_per_s=0.0, workers=4))
    assert out.samples == []


def test_a_training_sample_is_per_gpu(sched, clock):
    submit(sched, "j-000001", batch_size=64, gpus=2)
    clock.advance(ARRIVAL_S)
    launched(sched.tick())
    out = sched.message(peer("j-000001"), heartbeat(sched, "j-000001", step_s=0.2))
    assert out.samples == [("j-000001", TrainingSample(32, 2, 3.63, 11.7, 0.2))]


def test_a_silent_job_is_lost_and_its_workers_replanned_at_once(sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    a, b = sched.jobs["j-000001"], sched.jobs["j-000002"]
    had = b.workers
    out = run_for(sched, clock, LOST_S, alive=[b.id])  # a silent for exactly the timeout
    assert a.state == "running" and "lost" not in kinds(out)
    out = run_for(sched, clock, 0.5, alive=[b.id])
    assert a.state == "lost" and a.workers == 0 and a.gpu_ids == ()
    assert event(out, "lost", a.id)["exit"] == "no heartbeat for 3 s"
    assert a.reason == "no heartbeat for 3 s" and a.exit_code is None
    # the same step plans again: b gets a's workers, with no window to wait for
    assert kinds(out).count("plan") == 1
    assert b.workers > had
    assert sent(out, b.id) == [Resize(seq=b.seq, workers=b.workers)]
    assert sent(out, a.id) == []
    # a lost job is not lost twice
    assert "lost" not in kinds(run_for(sched, clock, 5.0, alive=[b.id]))


def test_an_unregistered_launched_job_is_never_lost(sched, clock):
    start(sched, clock, "j-000001", register=False)
    run_for(sched, clock, 10 * LOST_S)
    assert sched.jobs["j-000001"].state == "running"


def test_a_lost_job_that_proves_itself_is_revived(sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    a, b = sched.jobs["j-000001"], sched.jobs["j-000002"]
    run_for(sched, clock, LOST_S + 0.5, alive=[b.id])
    assert a.state == "lost"
    before = snapshot(sched)
    out = sched.message(b"intruder", heartbeat(sched, a.id, tok="guessed", workers=4))
    assert out.reply and snapshot(sched) == before  # a forgery does not revive it
    out = sched.message(b"back", heartbeat(sched, a.id, workers=4))
    assert a.state == "running" and a.registered and a.peer == b"back"
    assert kinds(out, a.id) == ["revived"]
    free = CAPACITY - b.workers
    assert a.workers == min(4, free) >= 1
    assert sent(out, a.id) == [Resize(seq=a.seq, workers=a.workers)]
    assert sched.flush_at == clock.now + ARRIVAL_S  # the next decision gives it its share
    assert sched.node_workers() <= CAPACITY


def test_a_lost_job_takes_its_final_state_from_its_exit_status(sched, clock):
    start(sched, clock, "j-000001")
    run_for(sched, clock, LOST_S + 0.5)
    assert sched.jobs["j-000001"].state == "lost"
    sched.exited("j-000001", 0)
    assert sched.jobs["j-000001"].state == "finished"


@pytest.mark.parametrize("terminal", ["finished", "failed", "cancelled"])
def test_a_terminal_job_is_never_brought_back(sched, clock, terminal):
    attach(sched, "mine")
    job = sched.jobs["mine"]
    if terminal == "finished":
        sched.message(peer("mine"), Finish(job="mine", token=token("mine"), iterations=9))
    elif terminal == "failed":
        sched.exited("mine", 1)
    else:
        sched.cancel("mine")
        run_for(sched, clock, LOST_S + 1.0)
    assert job.state == terminal
    run_for(sched, clock, COMPLETION_S)  # the freed workers' decision is made
    before = snapshot(sched)
    for msg in (heartbeat(sched, "mine", workers=4), register_msg("mine", workers=4),
                Finish(job="mine", token=token("mine"), iterations=99),
                Exit(job="mine", token=token("mine"), exit_code=0)):
        out = sched.message(b"again", msg)  # with its own, correct token
        assert out.reply == [(b"again", Refused(reason=f"job has ended ({terminal})"))]
        assert out.send == [] and out.changed == []
    assert sched.exited("mine", 0) == Actions()
    assert sched.cancel("mine") == Actions()
    assert sched.finished("mine", "lost") == Actions()
    run_for(sched, clock, 10.0)
    assert snapshot(sched) == before


# -- endings ------------------------------------------------------------------------------

@pytest.mark.parametrize(("exit_code", "state", "reason"), [
    (0, "finished", "exit code 0"),
    (1, "failed", "exit code 1"),
    (-2, "failed", "killed by SIGINT"),
])
def test_finish_from_an_unsupervised_job_is_final(sched, clock, exit_code, state, reason):
    attach(sched, "mine", workers=3)  # `python3 train.py`: no one else will report
    job = sched.jobs["mine"]
    out = sched.message(peer("mine"), Finish(job="mine", token=token("mine"), iterations=150,
                                             exit_code=exit_code, error="ValueError: boom"))
    assert (job.state, job.exit_code, job.reason) == (state, exit_code, reason)
    assert job.workers == 0 and job.iteration == 150
    data = event(out, state, "mine")
    assert data["exit"] == reason and data["exit_code"] == exit_code
    assert data["tail"] == "ValueError: boom"
    # its workers go back: the freed pool is planned after the completion window (or at once)
    assert sched.flush_at == clock.now + (COMPLETION_S if state == "finished" else 0.0)


def test_finish_from_a_supervised_job_waits_for_the_supervisor(sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    a, b = sched.jobs["j-000001"], sched.jobs["j-000002"]
    had = b.workers
    out = sched.message(peer(a.id), Finish(job=a.id, token=token(a.id), iterations=200))
    assert a.state == "running" and a.workers == 0  # workers back now, state later
    assert kinds(out) == ["finishing"] and a.ending_since == clock.now
    # silence while it exits is not loss; its workers go to b after the completion window
    out = run_for(sched, clock, COMPLETION_S + 0.5, alive=[b.id])
    assert a.state == "running" and "lost" not in kinds(out)
    assert b.workers > had and sent(out, b.id) == [Resize(seq=b.seq, workers=b.workers)]
    out = sched.exited(a.id, 0)  # the supervisor's word
    assert (a.state, a.exit_code, a.reason) == ("finished", 0, "exit code 0")
    assert "exit_unconfirmed" not in kinds(out)


@pytest.mark.parametrize(("exit_code", "state", "code", "reason"), [
    (0, "finished", 0, "exit code 0"),
    (3, "failed", 3, "exit code 3"),
    (-2, "failed", -2, "killed by SIGINT"),
])
def test_without_the_supervisors_word_the_masters_stands(sched, clock, exit_code, state, code,
                                                         reason):
    start(sched, clock, "j-000001")
    job = sched.jobs["j-000001"]
    sched.message(peer(job.id), Finish(job=job.id, token=token(job.id), iterations=120,
                                       exit_code=exit_code))
    since = clock.now
    clock.now = since + sched.exit_wait_s
    out = sched.tick()
    assert job.state == "running" and kinds(out, job.id) == []
    clock.now = since + sched.exit_wait_s + 0.1
    out = sched.tick()
    assert (job.state, job.exit_code, job.reason) == (state, code, reason)
    assert kinds(out, job.id) == [state, "exit_unconfirmed"]


def test_exit_by_signal_fails_the_job(sched, clock):
    start(sched, clock, "j-000001")
    out = sched.exited("j-000001", None, signal.SIGKILL)
    job = sched.jobs["j-000001"]
    assert (job.state, job.exit_code, job.reason) == ("failed", -9, "killed by SIGKILL")
    assert event(out, "failed", job.id)["exit_code"] == -9


def test_the_run_supervisor_reports_the_exit_with_the_jobs_token(sched):
    attach(sched, "mine", supervisor="run")
    job = sched.jobs["mine"]
    sched.message(peer("mine"), Finish(job="mine", token=token("mine"), iterations=7))
    assert job.state == "running" and job.workers == 0  # `adloader run` will say how it ended
    sched.message(b"run", Exit(job="mine", token=token("mine"), signal=signal.SIGKILL))
    assert (job.state, job.exit_code, job.reason) == ("failed", -9, "killed by SIGKILL")


def test_exit_status_of_an_unknown_job_changes_nothing(sched):
    assert sched.exited("nobody", 0) == Actions()
    assert sched.jobs == {}


def test_an_ending_is_a_function_of_the_job_and_says_what_the_job_set_is_to_do():
    """``endings`` changes the job alone and says what follows for the others: a supervised
    master's Finish frees its workers into the completion buffer; a running job that fails
    frees them at once and leaves the policy; a waiting job's cancel frees none."""
    job = LiveJob("a", "t", 32, 1, 3.63, 11.7, 200, state="running", workers=4,
                  supervisor="launcher")
    ending = endings.finish(job, Finish(job="a", token="x", iterations=200), now=5.0)
    assert (ending.freed, ending.left) == (True, False)
    assert (job.state, job.workers, job.ending_since) == ("running", 0, 5.0)
    job = LiveJob("b", "t", 32, 1, 3.63, 11.7, 200, state="running", workers=4)
    ending = endings.exited(job, 1)
    assert (ending.freed, ending.left, job.state) == (True, True, "failed")
    assert endings.exited(job, 0) == endings.Ending()  # terminal: left as it is
    job = LiveJob("c", "t", 32, 1, 3.63, 11.7, 200, state="queued")
    ending = endings.cancel(job, now=1.0, grace_s=10.0)
    assert (ending.freed, ending.left, job.state) == (False, True, "cancelled")


def test_a_refused_attach_files_no_job():
    """``registration.attach`` returns the job for its caller to file, or none with the
    refusal: an id that has ended is not taken again."""
    job, out = registration.attach(
        b"p", register_msg("old"), uid=None, ended={"old": "finished"},
        tokens=TokenDigest(b"k" * 32), name_check=lambda name, pid: (None, ""),
        cpus_of=lambda pid: None, free=CAPACITY, capacity=CAPACITY, gpus=GPUS,
        heartbeat_s=1.0, now=0.0)
    assert job is None and out.reply == [(b"p", Refused(reason="job has ended (finished)"))]


# -- cancel -------------------------------------------------------------------------------

def test_cancelling_a_waiting_job_ends_it_at_once(sched, clock):
    submit(sched, "j-000001")
    out = sched.cancel("j-000001")
    job = sched.jobs["j-000001"]
    assert (job.state, job.reason) == ("cancelled", "never started")
    assert out.kill == [] and out.send == []
    clock.advance(ARRIVAL_S)
    assert sched.tick().launch == []


def test_cancelling_a_running_job_asks_it_to_stop(sched, clock):
    start(sched, clock, "j-000001")
    job = sched.jobs["j-000001"]
    out = sched.cancel(job.id)
    assert out.send == [(job.id, Stop(seq=2, grace_s=GRACE_S))] and out.kill == []
    assert kinds(out) == ["cancel"] and job.state == "running"
    assert sched.cancel(job.id) == Actions()  # asked once
    # it stops at its next batch boundary, its master says Finish, its supervisor the exit
    sched.message(peer(job.id), Finish(job=job.id, token=token(job.id), iterations=50))
    assert job.state == "running" and job.workers == 0
    sched.exited(job.id, 0)
    assert job.state == "cancelled" and job.exit_code == 0


def test_a_launched_job_that_does_not_stop_is_signalled(sched, clock):
    start(sched, clock, "j-000001")
    job = sched.jobs["j-000001"]
    t0 = clock.now
    sched.cancel(job.id)
    kills = []
    for t in (1.0, 5.0, GRACE_S):
        clock.now = t0 + t
        kills += sched.tick().kill
    assert kills == []
    clock.now = t0 + GRACE_S + 0.1
    assert sched.tick().kill == [(job.id, signal.SIGTERM)]
    for t in (GRACE_S + 1, 1.5 * GRACE_S, 2 * GRACE_S):
        clock.now = t0 + t
        kills += sched.tick().kill
    assert kills == []  # SIGTERM once, and it is not lost meanwhile
    assert job.state == "running"
    clock.now = t0 + 2 * GRACE_S + 0.1
    assert sched.tick().kill == [(job.id, signal.SIGKILL)]
    clock.now = t0 + 5 * GRACE_S
    assert sched.tick().kill == []
    sched.exited(job.id, None, signal.SIGKILL)
    assert job.state == "cancelled" and job.exit_code == -9


def test_a_launched_job_without_a_master_yet_is_signalled_at_once(sched, clock):
    start(sched, clock, "j-000001", register=False)
    job = sched.jobs["j-000001"]
    t0 = clock.now
    out = sched.cancel(job.id)
    assert out.kill == [(job.id, signal.SIGTERM)] and out.send == []
    clock.now = t0 + GRACE_S + 0.1
    assert sched.tick().kill == []  # SIGTERM was sent already
    clock.now = t0 + 2 * GRACE_S + 0.1
    assert sched.tick().kill == [(job.id, signal.SIGKILL)]


def test_a_job_started_by_hand_that_goes_silent_after_cancel_is_cancelled(sched, clock):
    attach(sched, "mine")
    job = sched.jobs["mine"]
    out = sched.cancel("mine")
    assert out.send == [("mine", Stop(seq=2, grace_s=GRACE_S))]
    out = run_for(sched, clock, LOST_S)
    assert job.state == "running"
    out.extend(run_for(sched, clock, 1.0))
    assert (job.state, job.reason) == ("cancelled", "no longer heard after cancel")
    assert "lost" not in kinds(out) and out.kill == []  # no process of it to signal


def test_cancel_with_a_signal_sends_it_now_and_sigkill_after_twice_the_grace(sched, clock):
    start(sched, clock, "j-000001")
    job = sched.jobs["j-000001"]
    t0 = clock.now
    out = sched.cancel(job.id, signal.SIGINT)
    assert out.kill == [(job.id, signal.SIGINT)] and out.send == []  # not asked: signalled
    assert out.events[0][1:] == ("cancel", {"signal": "SIGINT", "grace_s": GRACE_S})
    clock.now = t0 + GRACE_S + 0.1
    assert sched.tick().kill == []  # no SIGTERM on top of the operator's signal
    clock.now = t0 + 2 * GRACE_S + 0.1
    assert sched.tick().kill == [(job.id, signal.SIGKILL)]
    assert sched.cancel(job.id, signal.SIGKILL).kill == [(job.id, signal.SIGKILL)]  # again
    sched.exited(job.id, None, signal.SIGINT)
    assert (job.state, job.exit_code, job.reason) == ("cancelled", -2, "killed by SIGINT")


def test_an_exit_the_daemon_settled_keeps_its_note(sched, clock):
    start(sched, clock, "j-000001")
    out = sched.exited("j-000001", None, signal.SIGKILL, note="its supervisor was killed")
    [(_, kind, data)] = [e for e in out.events if e[1] == "failed"]
    assert data["note"] == "its supervisor was killed" and data["exit"] == "killed by SIGKILL"


def test_cancelling_a_lost_launched_job_kills_what_is_left(sched, clock):
    start(sched, clock, "j-000001")
    run_for(sched, clock, LOST_S + 0.5)
    job = sched.jobs["j-000001"]
    assert job.state == "lost"
    out = sched.cancel(job.id)
    assert out.kill == [(job.id, signal.SIGKILL)]
    assert (job.state, job.reason) == ("cancelled", "cancelled while lost")


# -- pause and resume ---------------------------------------------------------------------

def test_pause_and_resume(sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    a, b = sched.jobs["j-000001"], sched.jobs["j-000002"]
    had = b.workers
    with pytest.raises(InputError):
        sched.resume(a.id)  # not paused
    out = sched.pause(a.id, checkpoint=True)
    assert out.send == [(a.id, Pause(seq=2, checkpoint=True))] and a.state == "running"
    out = sched.message(peer(a.id), Paused(job=a.id, token=token(a.id), seq=2,
                                           checkpoint="/ckpt/a"))
    assert (a.state, a.workers) == ("paused", 0)
    assert event(out, "paused", a.id) == {"seq": 2, "checkpoint": "/ckpt/a"}
    out = sched.tick()  # its workers go to the others now
    assert b.workers > had and sent(out, b.id) == [Resize(seq=2, workers=b.workers)]
    with pytest.raises(InputError):
        sched.pause(a.id)  # already paused
    out = sched.resume(a.id)
    assert out.send == [(a.id, Resume(seq=3, workers=1))]
    assert (a.state, a.workers) == ("running", 1)


# -- planning failures stay with the job that causes them ---------------------------------

def test_a_job_the_planner_cannot_take_fails_alone(sched, clock, monkeypatch):
    real = scheduler_module.plan

    def plan(jobs, **kw):
        if any(j.name == "j-000002" for j in jobs):
            raise RuntimeError("boom")
        return real(jobs, **kw)

    monkeypatch.setattr(scheduler_module, "plan", plan)
    for job_id in ("j-000001", "j-000002", "j-000003"):
        submit(sched, job_id)
    clock.advance(ARRIVAL_S)
    out = sched.tick()
    assert launched(out) == ["j-000001", "j-000003"]
    bad = sched.jobs["j-000002"]
    assert bad.state == "failed" and bad.workers == 0
    assert bad.reason == "the scheduler could not plan it: RuntimeError: boom"
    assert kinds(out).count("plan") == 1
    assert sorted(event(out, "plan")["launched"]) == ["j-000001", "j-000003"]
    assert event(out, "failed", "j-000002")["exit"] == bad.reason


def test_a_job_pinned_to_a_gpu_the_node_lacks_fails_alone(sched, clock):
    submit(sched, "j-000001")
    submit(sched, "j-000002", gpu_ids=(7,))  # the real planner raises on it
    submit(sched, "j-000003")
    clock.advance(ARRIVAL_S)
    out = sched.tick()
    assert launched(out) == ["j-000001", "j-000003"]
    bad = sched.jobs["j-000002"]
    assert bad.state == "failed"
    assert bad.reason.startswith("the scheduler could not plan it: IndexError")
    assert sched.jobs["j-000001"].state == sched.jobs["j-000003"].state == "running"


def test_a_job_slower_than_predicted_is_corrected_and_replanned(sched, clock):
    """Its steps take 2× the plan's prediction: c_i follows within a few updates, a
    ``corrected`` event asks for a plan at once, and the plan prices it at c_i · B·F_μ."""
    start(sched, clock, "j-000001", "j-000002")
    slow = sched.jobs["j-000001"]
    predicted = slow.ceiling
    assert predicted > 0 and slow.rate_scale == 1.0
    seen = []
    for _ in range(8):
        clock.advance(2.0)
        out = sched.message(peer(slow.id), heartbeat(sched, slow.id,
                                                     step_s=2 * slow.batch_size / predicted))
        out.extend(sched.message(peer("j-000002"), heartbeat(sched, "j-000002")))
        seen += [kind for _, kind, _ in out.events]
        out.extend(sched.tick())
        seen += [kind for _, kind, _ in out.events]
    assert slow.rate_scale == pytest.approx(0.5, rel=0.02)
    assert "corrected" in seen and "plan" in seen[seen.index("corrected"):]
    assert slow.planned_scale == pytest.approx(slow.rate_scale, rel=0.16)
    assert sched.jobs["j-000002"].rate_scale == pytest.approx(1.0)  # the other is untouched


def test_a_job_fed_too_little_then_enough_is_corrected_at_its_first_gpu_bound_beat(sched,
                                                                                    clock):
    """Warm-up is a job's first seconds of steps, not its first GPU-bound ones: a job that
    ran waiting on its loader for longer than WARMUP_S (its workers went to another job
    first, as ``ftf`` does) is corrected as soon as its GPU stops waiting."""
    from adloader.scheduling.model.correction import WARMUP_S

    start(sched, clock, "j-000001", "j-000002")
    job = sched.jobs["j-000001"]
    step = 2 * job.batch_size / job.ceiling  # its steps take 2× the prediction
    while job.busy_s + job.wait_s < WARMUP_S:  # loading-bound: nothing to learn μ from
        clock.advance(2.0)
        sched.message(peer(job.id), heartbeat(sched, job.id, step_s=step,
                                              data_wait_s=4 * step))
        sched.tick()
    assert job.rate_scale == 1.0
    clock.advance(2.0)
    out = sched.message(peer(job.id), heartbeat(sched, job.id, step_s=step))
    assert job.rate_scale < 0.8 and "corrected" in kinds(out)


def test_a_heartbeat_lying_about_its_steps_moves_its_own_correction_only_within_limits(
        sched, clock):
    start(sched, clock, "j-000001", "j-000002")
    liar = sched.jobs["j-000001"]
    for _ in range(40):
        clock.advance(2.0)
        sched.message(peer(liar.id), heartbeat(sched, liar.id, step_s=1e-9))
        sched.tick()
    from adloader.scheduling.model.correction import LIMITS

    assert liar.rate_scale == LIMITS[1] and sched.jobs["j-000002"].rate_scale == 1.0


def _attached_pair(paper_model, clock, cpus: dict[int, tuple[int, float]]) -> Scheduler:
    s = Scheduler(capacity=CAPACITY, gpus=GPUS, policy="optimal", model=paper_model,
                  tokens=TokenDigest(b"k" * 32), arrival_window_s=ARRIVAL_S,
                  completion_window_s=COMPLETION_S, heartbeat_s=1.0, lost_timeout_s=LOST_S,
                  clock=clock, cpus_of=cpus.get)
    for job_id, pid in (("pinned", 1001), ("free", 1002)):
        msg = replaced(register_msg(job_id, workers=CAPACITY), pid=pid)
        s.message(peer(job_id), msg)
    _beat_through(s, clock, ARRIVAL_S)
    return s


def _beat_through(s: Scheduler, clock: Clock, seconds: float) -> None:
    """Each job heartbeats every second while ``seconds`` pass; the scheduler ticks."""
    for _ in range(int(seconds)):
        clock.advance(1.0)
        for job_id in list(s.jobs):
            s.message(peer(job_id), heartbeat(s, job_id))
        s.tick()


def test_a_job_confined_to_fewer_cpus_is_never_given_more_workers(paper_model, clock):
    """A Slurm step (or a ``taskset``) on 1 of the node's 8 CPUs gets at most 1/8 of its 8
    workers: the kernel's affinity of its master caps it, at attach and at every plan; the
    other job (running wherever the daemon does) is planned as before."""
    uncapped = _attached_pair(paper_model, Clock(), {})
    assert uncapped.jobs["pinned"].workers > 1  # what the plan gives it without the cap
    s = _attached_pair(paper_model, clock, {1001: (1, 1 / 8)})
    assert s.jobs["pinned"].cpus == 1 and s.jobs["free"].cpus is None
    assert s.jobs["pinned"].max_workers(s.capacity) == 1
    assert s.jobs["free"].max_workers(s.capacity) is None
    assert s.jobs["pinned"].workers == 1
    assert s.jobs["free"].workers == uncapped.jobs["free"].workers
    for _ in range(3):  # heartbeats and later decisions keep it
        _beat_through(s, clock, COMPLETION_S)
        assert s.jobs["pinned"].state == "running" and s.jobs["pinned"].workers == 1


@pytest.mark.parametrize("share, capacity, most", [(0.5, 6, 3), (1 / 8, 24, 3), (1 / 3, 4, 2),
                                                    (1 / 64, 8, 1)])
def test_a_confined_job_gets_its_part_of_the_workers(share, capacity, most):
    """Its share of the node's CPUs × the node's workers, rounded up, at least 1: a node run
    with more workers than cores (loaders that wait on I/O) keeps that ratio for it."""
    job = LiveJob("j", "t", 32, 1, 3.63, 11.7, 200, cpus=1, cpu_share=share)
    assert job.max_workers(capacity) == most


def test_a_name_the_kernel_contradicts_is_refused_and_a_verified_one_is_said(paper_model, clock):
    """The node's name check (``daemon.control.slurm_identity``) decides: False refuses the Register
    (nothing is attached, the sender alone is answered); True or None attaches, said in the
    event."""
    verdicts = {"slurm-5.0": (False, "not in Slurm job 5"), "slurm-6.0": (True, "in job 6")}
    s = Scheduler(capacity=CAPACITY, gpus=GPUS, policy="optimal", model=paper_model,
                  tokens=TokenDigest(b"k" * 32), clock=clock,
                  name_check=lambda name, pid: verdicts.get(name, (None, "not checked")))
    out = s.message(peer("squatter"), register_msg("squatter", name="slurm-5.0"))
    assert "squatter" not in s.jobs and out.send == [] and not out.changed
    assert [m.reason for _, m in out.reply] == ["not in Slurm job 5"]
    for job_id, name, verdict in (("real", "slurm-6.0", True), ("plain", "train.py", None)):
        out = s.message(peer(job_id), register_msg(job_id, name=name))
        assert s.jobs[job_id].state == "running"
        assert out.events[0][1] == "attached" and out.events[0][2]["name_verified"] is verdict
