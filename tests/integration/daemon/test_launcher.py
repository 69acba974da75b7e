"""The launcher: jobs share the daemon's CPU scheduling group, log to a file, stop as a group,
and their exit status is recorded by a supervisor that outlives the daemon."""

import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
from daemon_harness import REPORT_GROUP, group_of_a_new_session, sessions_split_cpu
from waiting import wait_for

from adloader.daemon.jobs.launcher import ExitStatus, Launcher, LaunchError
from adloader.host.cpu_group import cpu_group, separate_cpu_group

SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def _launch_reading_a_pid(launcher, job_id, cmd):
    """Launch ``cmd``, which prints the pid of a child it started first: (started, that pid)."""
    started = launcher.start(job_id, "tok", cmd, None, {}, 1, (0,))
    log = Path(started.log_path)
    wait_for(lambda: log.read_text().split()[:1] != [], 10, "the child's pid in the log",
             interval=0.02)
    return started, int(log.read_text().split()[0])


@pytest.fixture
def launcher(tmp_path):
    launcher = Launcher(tmp_path / "state", "ipc:///nowhere")
    yield launcher
    launcher.stop_all()


def test_a_job_is_its_own_process_group_in_the_daemons_session(launcher):
    started = launcher.start("j-1", "tok", SLEEPER, None, {}, 2, (0,))
    assert os.getpgid(started.pid) == started.pid  # cancel stops it and its workers
    # not a new session: with autogroup on, a session is one scheduling group and would get
    # a session's share of the CPU whatever its workers
    assert os.getsid(started.pid) == os.getsid(0)
    wait_for(lambda: "up" in Path(started.log_path).read_text(), 10, "the job's first line",
             interval=0.02)


def test_a_launched_job_reports_the_daemons_cpu_group(launcher):
    started = launcher.start("j-0", "tok", REPORT_GROUP, None, {}, 1, (0,))
    wait_for(lambda: launcher.reap() == [("j-0", ExitStatus(0, None))], 60, "j-0 reaped",
             interval=0.02)
    reported = Path(started.log_path).read_text().split()[0]
    assert reported == str(cpu_group())
    assert not separate_cpu_group(None if reported == "None" else reported, cpu_group())


def test_the_environment_carries_what_attach_reads(launcher, tmp_path):
    cmd = [sys.executable, "-c", "import os; print(os.environ['ADLOADER_JOB'], "
           "os.environ['ADLOADER_JOB_TOKEN'], os.environ['ADLOADER_WORKERS'], "
           "os.environ['ADLOADER_GPU_IDS'], os.environ['CUDA_VISIBLE_DEVICES'], "
           "os.environ['ADLOADER_SUPERVISOR'], os.environ['EXTRA'], "
           "os.environ.get('ADLOADER_TOKEN', '-'), oct(os.umask(0)))"]
    os.environ["ADLOADER_TOKEN"] = "the-rest-token"  # the daemon's user exported it
    try:
        started = launcher.start("j-2", "tok", cmd, str(tmp_path), {"EXTRA": "x"}, 3, (1, 2))
    finally:
        del os.environ["ADLOADER_TOKEN"]
    wait_for(lambda: launcher.reap() == [("j-2", ExitStatus(0, None))], 10, "j-2 reaped",
             interval=0.02)
    assert Path(started.log_path).read_text().split() == [
        "j-2", "tok", "3", "1,2", "1,2", "launcher", "x", "-", "0o22"]


def test_stop_ends_the_whole_process_group(launcher):
    cmd = [sys.executable, "-c", "import subprocess, sys, time; "
           "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
           "print(p.pid, flush=True); time.sleep(60)"]
    _, child = _launch_reading_a_pid(launcher, "j-3", cmd)
    assert launcher.signal("j-3", signal.SIGTERM)
    wait_for(lambda: not psutil.pid_exists(child) or
             psutil.Process(child).status() == psutil.STATUS_ZOMBIE, 10, "the child to end",
             interval=0.02)
    wait_for(lambda: launcher.reap() == [("j-3", ExitStatus(None, signal.SIGTERM))], 10,
             "j-3 reaped, ended by SIGTERM", interval=0.02)
    assert not launcher.signal("j-3", signal.SIGTERM)  # gone: nothing is signalled


def test_a_job_s_processes_are_read_from_the_kernel_s_children_lists(launcher):
    """Its supervisor, the job and a worker the job forked from a thread other than its
    main one (a DataLoader's are forked from the main thread, pin-memory and prefetch
    threads run beside it): the kernel's per-thread children lists give the same family as
    a pass over every process on the node, and the job's CPU seconds count the worker's."""
    from adloader.daemon.jobs import launcher as launching

    cmd = [sys.executable, "-c", "import subprocess, sys, threading, time\n"
           "def fork():\n"
           "    p = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
           "    print(p.pid, flush=True)\n"
           "t = threading.Thread(target=fork); t.start(); t.join(); time.sleep(60)"]
    started, worker = _launch_reading_a_pid(launcher, "j-4", cmd)
    assert launching.CHILD_LISTS  # this machine's kernel keeps them (Linux ≥ 3.5)
    by_kernel = launching.family(started.pid)
    by_pass = launching.family(started.pid, launching.psutil_tree())
    assert sorted(by_kernel) == sorted(by_pass) and len(by_kernel) == 3
    assert by_kernel[0] == started.pid and worker in by_kernel
    assert launcher.process_tree() is None  # no pass over the node where the lists exist
    wait_for(lambda: launcher.cpu_usage("j-4")[1] > 0.5, 10, "the busy worker's CPU counted",
             interval=0.02)


def test_the_exit_status_outlives_the_daemon_and_a_job_launches_once(tmp_path):
    first = Launcher(tmp_path / "state", "ipc:///nowhere")
    # pacing: a job that is still running when its daemon goes
    cmd = [sys.executable, "-c", "import time, sys; time.sleep(1); sys.exit(3)"]
    started = first.start("j-4", "tok", cmd, None, {}, 1, (0,))
    del first  # the daemon is gone; its supervisor is not
    second = Launcher(tmp_path / "state", "ipc:///nowhere")
    assert second.find("j-4") == started.pid
    assert second.adopt("j-4", started.pid)
    wait_for(lambda: second.reap() == [("j-4", ExitStatus(3, None))], 10,
             "j-4 reaped by the second launcher", interval=0.02)
    assert second.status("j-4") == ExitStatus(3, None)
    with pytest.raises(LaunchError, match="launched already"):
        second.start("j-4", "tok", cmd, None, {}, 1, (0,))
    assert not second.adopt("j-4", started.pid)  # no supervisor any more


def test_a_command_that_cannot_start_fails_with_the_reason(launcher):
    started = launcher.start("j-5", "tok", ["/no/such/program"], None, {}, 1, (0,))
    wait_for(lambda: launcher.reap() != [], 30, "j-5 reaped", interval=0.02)
    status = launcher.status("j-5")
    assert status.exit_code == 127 and "/no/such/program" in status.error
    assert "cannot start" in Path(started.log_path).read_text()
    with pytest.raises(LaunchError, match="null byte"):
        launcher.start("j-6", "tok", ["python3", "-c", "x\0y"], None, {}, 1, (0,))


@pytest.mark.skipif(not sessions_split_cpu(),
                    reason="the kernel does not share the CPU per session here")
def test_a_job_started_in_another_session_is_flagged():
    assert separate_cpu_group(group_of_a_new_session(), cpu_group())


def _fake_proc(root: Path, enabled="1", cgroup="0::/\n", autogroup="/autogroup-7 nice 0\n",
               controllers=None) -> tuple[Path, Path]:
    proc, cg = root / "proc", root / "cgroup"
    (proc / "sys/kernel").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "sys/kernel/sched_autogroup_enabled").write_text(enabled + "\n")
    (proc / "self/cgroup").write_text(cgroup)
    (proc / "self/autogroup").write_text(autogroup)
    if controllers is not None:
        (cg / "job.slice").mkdir(parents=True)
        (cg / "job.slice/cgroup.controllers").write_text(controllers)
    return proc, cg


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, "/autogroup-7"),
    ({"enabled": "0"}, None),  # autogroup off: CPU per process already
    ({"cgroup": "1:cpu,cpuacct:/\n0::/\n"}, "/autogroup-7"),  # v1, root cpu cgroup
    ({"cgroup": "1:cpu,cpuacct:/job\n0::/\n"}, None),  # v1: a cpu cgroup decides
    ({"cgroup": "0::/job.slice\n", "controllers": "cpu memory"}, None),  # v2 with cpu
    ({"cgroup": "0::/job.slice\n", "controllers": "memory pids"}, "/autogroup-7"),
    ({"autogroup": ""}, "/autogroup-0"),  # never in a session of its own: the root group
])
def test_cpu_group_follows_the_kernel_rules(tmp_path, kwargs, expected):
    proc, cg = _fake_proc(tmp_path, **kwargs)
    assert cpu_group(proc, cg) == expected


def test_separate_only_when_both_groups_are_known_and_differ():
    assert separate_cpu_group("/autogroup-2", mine="/autogroup-1")
    assert not separate_cpu_group("/autogroup-1", mine="/autogroup-1")
    assert not separate_cpu_group(None, mine="/autogroup-1")
    assert not separate_cpu_group("/autogroup-2", mine="")
