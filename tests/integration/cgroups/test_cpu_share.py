"""Each job's CPU share as a cgroup of its own (adloader/host/cpu_share.py), on this machine's
real cgroups: CPU-seconds follow the allocation within 10 %, and a tenant that starts many
busy processes in its own group takes no more than its share. Needs root and a cgroup CPU
controller: skipped without them, except under CI=true, where it must run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from adloader.errors import StorageError
from adloader.host.cpu_share import V1_RANGE, V2_RANGE, CpuShares, weights

BUSY = "import os, sys; os.sched_setaffinity(0, {0})\nwhile True: pass"


def cpu_shares_here(parent: str) -> CpuShares:
    """The CPU groups under ``parent``; a skip where no cgroup CPU controller can be written
    here, a failure under CI=true."""
    try:
        return CpuShares(parent=parent)
    except StorageError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no cgroup CPU controller to write here: {exc}")


@pytest.fixture
def shares():
    groups = cpu_shares_here(f"adloader-test-{uuid.uuid4().hex[:8]}")
    yield groups
    groups.close()


def _burn(n: int, deadline_s: float = 120.0) -> list[subprocess.Popen]:
    """``n`` processes spinning on CPU 0, once each has pinned itself there (its start-up
    runs on any CPU: a window that began before would count it; in a VM without hardware
    virtualization Python takes seconds to start)."""
    from waiting import wait_for

    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(n)]
    try:
        wait_for(lambda: all(os.sched_getaffinity(p.pid) == {0} for p in procs), deadline_s,
                 "the spinning processes to pin themselves to CPU 0", interval=0.02)
    except AssertionError:
        _stop(procs)
        raise
    return procs


def _usage_over(shares: CpuShares, jobs, seconds: float) -> dict[str, float]:
    before = {j: shares.usage_s(j) for j in jobs}
    time.sleep(seconds)  # the measured window itself, not a wait for a condition
    return {j: shares.usage_s(j) - before[j] for j in jobs}


def _share_of(procs_by_job: dict, shares: CpuShares | None, seconds: float) -> dict:
    """Each job's share of one CPU's time while all its processes spin on CPU 0."""
    if shares is not None:
        used = _usage_over(shares, list(procs_by_job), seconds)
    else:  # no groups: the processes' own CPU time
        import psutil

        def cpu(ps):
            return sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in ps)
        before = {j: cpu(ps) for j, ps in procs_by_job.items()}
        time.sleep(seconds)  # the measured window itself, not a wait for a condition
        used = {j: cpu(ps) - before[j] for j, ps in procs_by_job.items()}
    total = sum(used.values())
    return {j: u / total for j, u in used.items()}


def _stop(procs) -> None:
    for p in procs:
        p.kill()
        p.wait()


def test_weights_follow_the_workers_and_keep_the_node_total():
    w = weights({"a": 1, "b": 3}, 1024, (2, 262_144))
    assert w == {"a": 512, "b": 1536} and sum(w.values()) == 2 * 1024
    assert weights({"a": 0, "b": 1}, 100, (1, 10_000)) == {"a": 100, "b": 100}  # ≥ 1 worker
    assert weights({"a": 1, "b": 10**6}, 100, (1, 10_000))["b"] == 200  # within bounds
    assert weights({}, 100, (1, 10_000)) == {}


def test_the_turn_rule_weights_a_held_job_least():
    w = weights({"a": 4, "b": 1, "c": 1}, 1024, (2, 262_144), "turn")
    assert w == {"a": 1024, "b": 2, "c": 2}
    w = weights({"a": 3, "b": 2, "c": 1}, 100, (1, 10_000), "turn")
    assert w == {"a": 120, "b": 80, "c": 1}
    even = {"a": 2, "b": 2}  # no job holds more: nobody is held, the rule `workers` applies
    assert weights(even, 1024, (2, 262_144), "turn") == weights(even, 1024, (2, 262_144))
    assert weights({"a": 1, "b": 1}, 100, (1, 10_000), "turn") == {"a": 100, "b": 100}
    with pytest.raises(ValueError, match="turn"):
        weights(even, 100, (1, 10_000), "fifo")


def test_the_order_rule_ranks_the_jobs_and_keeps_the_node_total():
    w = weights({"a": 1, "b": 1, "c": 1}, 1024, (2, 262_144), "order", ["c", "a", "b"])
    assert w == {"c": 2693, "a": 337, "b": 42}  # 64 : 8 : 1, Σ 3 × 1024 (rounded)
    assert weights({"a": 2, "b": 1, "c": 1}, 100, (1, 10_000), "order", ["b"]) == \
        {"b": 218, "a": 55, "c": 27}  # b ranked: 8 × 1 worker; a, c not ranked: 2 and 1
    assert weights({"a": 1, "b": 1}, 100, (1, 10_000), "order", ["a", "b", "gone"]) == \
        {"a": 178, "b": 22}  # a job no longer running is not counted
    assert weights({"a": 3, "b": 1}, 100, (1, 10_000), "order") == \
        weights({"a": 3, "b": 1}, 100, (1, 10_000))  # no order: by the workers
    many = weights({f"j{i}": 1 for i in range(8)}, 100, (1, 10_000), "order",
                   [f"j{i}" for i in range(8)])
    assert many["j0"] == 700 and many["j7"] == 1  # the total kept; the least the kernel's


def test_under_the_order_rule_the_first_job_takes_the_cpu_and_leaves_it_to_the_next(shares):
    """The rule ``order``: three jobs spinning on one CPU get it 64 : 8 : 1 (the first job
    nearly all of it; a third each under ``workers``); the first job's processes asleep, the
    second takes what it leaves (8 : 1): priority that wastes no CPU."""
    procs = {"first": _burn(1), "second": _burn(1), "third": _burn(1)}
    try:
        for job, ps in procs.items():
            for p in ps:
                shares.add(job, p.pid)
        shares.set_workers(dict.fromkeys(procs, 1), "order", ["first", "second", "third"])
        got = _share_of(procs, shares, 3.0)
        assert got["first"] == pytest.approx(64 / 73, rel=0.10), got
        assert got["third"] < 0.05, got
        for p in procs["first"]:
            p.send_signal(signal.SIGSTOP)  # the first job's queues full: it sleeps
        got = _share_of({k: procs[k] for k in ("second", "third")}, shares, 3.0)
        assert got["second"] == pytest.approx(8 / 9, rel=0.10), got
    finally:
        _stop(p for ps in procs.values() for p in ps)


def test_a_held_job_runs_on_the_cpu_the_served_job_leaves(shares):
    """The rule ``turn``: one spinning process held at one worker beside a served job whose
    two spin on the same CPU gets almost nothing (a share of its own under ``workers``:
    a third); once the served job's processes sleep, it gets the whole CPU."""
    procs = {"served": _burn(2), "held": _burn(1)}
    try:
        for job, ps in procs.items():
            for p in ps:
                shares.add(job, p.pid)
        shares.set_workers({"served": 2, "held": 1})
        assert _share_of(procs, shares, 2.0)["held"] == pytest.approx(1 / 3, rel=0.10)
        least = (V2_RANGE if shares.version == 2 else V1_RANGE)[0]
        assert shares.set_workers({"served": 2, "held": 1}, "turn")["held"] == least
        assert _share_of(procs, shares, 3.0)["held"] < 0.02
        for p in procs["served"]:
            p.send_signal(signal.SIGSTOP)  # a served job whose prefetch queues are full
        used = _usage_over(shares, ["held"], 2.0)["held"]
        assert used > 0.9 * 2.0, used  # work-conserving: the CPU left goes to the held job
    finally:
        _stop(p for ps in procs.values() for p in ps)


def test_cpu_seconds_follow_the_allocation(shares):
    procs = {"a": _burn(3), "b": _burn(3)}
    try:
        for job, ps in procs.items():
            for p in ps:
                shares.add(job, p.pid)
        assert shares.set_workers({"a": 1, "b": 3}) == {"a": shares.default // 2,
                                                         "b": shares.default * 3 // 2}
        got = _share_of(procs, shares, 3.0)
        assert got["b"] == pytest.approx(0.75, rel=0.10), got
        shares.set_workers({"a": 2, "b": 2})  # a resize: the shares follow at once
        got = _share_of(procs, shares, 3.0)
        assert got["a"] == pytest.approx(0.5, rel=0.10), got
    finally:
        _stop(p for ps in procs.values() for p in ps)


def test_a_tenant_with_many_processes_takes_no_more_than_its_share(shares):
    procs = {"tenant": _burn(8), "job": _burn(1)}
    try:
        without = _share_of(procs, None, 2.0)  # no groups: the kernel shares by process
        assert without["job"] < 0.3, without
        for job, ps in procs.items():
            for p in ps:
                shares.add(job, p.pid)
        shares.set_workers({"tenant": 2, "job": 2})
        got = _share_of(procs, shares, 3.0)
        assert got["job"] == pytest.approx(0.5, rel=0.10), got
    finally:
        _stop(p for ps in procs.values() for p in ps)


def test_v2_files_are_written_as_the_kernel_reads_them(tmp_path):
    """The v2 path on a hierarchy laid out as cgroup2 lays it (this machine's cpu
    controller is on v1): weights in cpu.weight, processes in cgroup.procs, usage_usec."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    groups = CpuShares(tmp_path, parent="adl")
    assert groups.version == 2 and (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    groups.add("j1", 4242)
    groups.add("j2", 4343)
    assert (tmp_path / "adl" / "j1" / "cgroup.procs").read_text() == "4242"
    assert groups.set_workers({"j1": 3, "j2": 1}) == {"j1": 150, "j2": 50}
    assert (tmp_path / "adl" / "j1" / "cpu.weight").read_text() == "150"
    (tmp_path / "adl" / "j1" / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 1\n")
    assert groups.usage_s("j1") == 2.5


@pytest.fixture
def sharing_daemon(tmp_path, monkeypatch, request):
    """A real daemon with ``--cpu-shares`` (policy ``requested``; the share rule the test
    names as its parameter, else ``workers``), and a view of its groups. A job is lost only
    after 60 s without a heartbeat: a master starved by its own spinning processes on one
    CPU must not end its job (and its group) in the middle of a reading."""
    from daemon_harness import Daemon

    from adloader import env

    monkeypatch.setenv(env.setting("lost_after_s"), "60")

    parent = f"adloader-test-{uuid.uuid4().hex[:8]}"
    probe = cpu_shares_here(parent)
    rule = getattr(request, "param", "workers")
    d = Daemon(tmp_path / "state", capacity=4,
               extra=("--policy", "requested", "--cpu-shares", parent,
                      "--cpu-share-rule", rule, "--open-loop")).start()  # the plan's counts
    try:
        yield d, probe
    finally:
        d.stop()
        probe.close()


def test_the_daemon_puts_each_job_in_a_group_weighted_by_its_workers(sharing_daemon):
    """A real daemon with ``--cpu-shares``: each launched job (its supervisor, the job and
    its loader workers) runs in a group of its own, the weights follow the plan's workers,
    and a finished job's group is gone."""
    from daemon_harness import wait_for

    d, probe = sharing_daemon
    small = d.submit("small", iterations=400, workers=1, step_scale=3.0)
    big = d.submit("big", iterations=400, workers=3, step_scale=3.0)
    wait_for(lambda: {d.state(small), d.state(big)} == {"running"}, 60, "both running")
    wait_for(lambda: d.events("cpu_shares"), 30, "the weights written")
    assert (probe.weight(small), probe.weight(big)) == (probe.default // 2,
                                                        probe.default * 3 // 2)
    for job in (small, big):  # the supervisor joins as it starts; the job, its workers
        def members(job=job):
            procs = probe.base / job / "cgroup.procs"
            assert procs.exists(), (f"{job}'s group gone: {d.job(job)}", d.events()[-8:])
            pids = set(procs.read_text().split())
            return len(pids) >= 3 and str(d.job(job)["pid"]) in pids and pids
        wait_for(members, 60, f"{job}'s supervisor, job and workers in its group")
    wait_for(lambda: probe.usage_s(big) > 0, 30, "the big job's CPU counted in its group")
    d.http.post(f"/v1/jobs/{small}/cancel")
    wait_for(lambda: d.state(small) == "cancelled", 60, "the small job cancelled")
    wait_for(lambda: not (probe.base / small).exists(), 30, "its group dropped")
    d.http.post(f"/v1/jobs/{big}/cancel")
    wait_for(lambda: d.state(big) == "cancelled", 60, "the big job cancelled")


@pytest.mark.parametrize("sharing_daemon", ["turn"], indirect=True)
def test_under_the_turn_rule_the_daemon_weights_a_held_job_least(sharing_daemon):
    """``--cpu-share-rule turn``: the job the plan holds at one worker beside one with 3 is
    written the kernel's least weight, and the event names the rule."""
    from daemon_harness import wait_for

    d, probe = sharing_daemon
    held = d.submit("held", iterations=400, workers=1, step_scale=3.0)
    served = d.submit("served", iterations=400, workers=3, step_scale=3.0)
    wait_for(lambda: {d.state(held), d.state(served)} == {"running"}, 60, "both running")
    wait_for(lambda: any(e["data"]["weights"].get(held) for e in d.events("cpu_shares")),
             30, "both weights written")
    least = 2 if probe.version == 1 else 1
    assert (probe.weight(held), probe.weight(served)) == (least, probe.default)
    assert d.events("cpu_shares")[-1]["data"]["rule"] == "turn"
    for job in (held, served):
        d.http.post(f"/v1/jobs/{job}/cancel")
    wait_for(lambda: {d.state(held), d.state(served)} == {"cancelled"}, 60, "both cancelled")


HAND_STARTED = """
import os, subprocess, sys, time
os.sched_setaffinity(0, {{0}})  # all of the job on the CPU they contend for
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader
loader = ElasticDataLoader(list(range(10**6)), batch_size=4, num_workers=0)
job = attach(loader, model="smResnet20", batch_size=4, iterations=10**6)
deadline = time.monotonic() + 120
while not os.path.exists({go!r}):  # the test's word: the daemon has placed it (moved into
    if time.monotonic() > deadline:  # its group, or weighted where it is); what it starts
        sys.exit("never told it was placed")  # from now on starts there
    time.sleep(0.01)  # the poll's interval, under the deadline above
busy = [subprocess.Popen([sys.executable, "-c", {busy!r}]) for _ in range({n})]
print(" ".join(str(p.pid) for p in busy), flush=True)
for batch in loader:
    time.sleep(0.05)  # pacing: a training step
"""


def placed(daemon, job: str, go: Path) -> None:
    """Wait until the daemon has placed ``job`` in its CPU group — moved it there, or (a Slurm
    step on cgroup v2) weighted it where it is — then tell the job (``HAND_STARTED``'s go
    file)."""
    from daemon_harness import wait_for

    wait_for(lambda: daemon.events("cpu_group_joined", job)
             or daemon.events("cpu_group_kept", job), 120, f"{job} placed in its CPU group")
    go.touch()


def test_jobs_started_by_hand_join_their_groups_and_a_tenant_takes_only_its_share(
        sharing_daemon, tmp_path):
    """Two jobs started by hand (``attach``, from sessions of their own) under a daemon with
    ``--cpu-shares``: each is moved into its group as it registers — the process the kernel
    says connected, not the pid it reports — with the processes it starts after; the one
    that starts 6 busy processes takes no more CPU than the one with 1 (equal weights)."""
    from daemon_harness import script, wait_for

    d, probe = sharing_daemon
    procs: dict[str, subprocess.Popen] = {}
    try:
        for job, n in (("tenant", 6), ("modest", 1)):
            cmd = script(tmp_path, f"{job}.py",
                         HAND_STARTED.format(busy=BUSY, n=n, go=str(tmp_path / f"{job}.go")))
            env = dict(os.environ, ADLOADER_ENDPOINT=d.endpoint, ADLOADER_JOB=job,
                       ADLOADER_JOB_TOKEN=f"{job}-token")
            procs[job] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True,
                                          start_new_session=True)
        for job in procs:
            placed(d, job, tmp_path / f"{job}.go")
        busy = {job: set(p.stdout.readline().split()) for job, p in procs.items()}
        assert [len(b) for b in busy.values()] == [6, 1], busy
        for job, p in procs.items():
            def members(job=job, p=p):
                return set((probe.base / job / "cgroup.procs").read_text().split()) \
                    if (probe.base / job).is_dir() else set()
            wait_for(lambda job=job, p=p: {str(p.pid), *busy[job]} <= members(job), 30,
                     f"{job}'s process and the ones it started in its group")
            assert d.job(job)["pid"] == p.pid  # the kernel's pid
            assert d.events("cpu_group_joined", job)
            assert not d.events("separate_cpu_group", job)  # its session no longer decides
        wait_for(lambda: probe.weight("tenant") == probe.weight("modest")
                 == probe.default, 30, "equal weights written")
        got = _share_of({"tenant": [], "modest": []}, probe, 4.0)
        assert got["modest"] == pytest.approx(0.5, rel=0.10), got
    finally:
        for p in procs.values():
            os.killpg(p.pid, 9)
            p.wait()
