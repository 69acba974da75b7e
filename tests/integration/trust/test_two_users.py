"""The multi-tenant threat model (docs/security.md) with real Unix users: a daemon under its
own user, a tenant's ``adloader run`` job under another, a hostile member of the socket
group under a third, and a user outside that group. Needs root (it starts processes as
other users and mounts in a private mount namespace); ``two_users_scenario.py`` does the
work and reports what every party observed, the tests here judge it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from adloader.daemon.control.broker import Broker

SCENARIO = Path(__file__).parents[2] / "two_users_scenario.py"
GROUP, DAEMON, TENANT, HOSTILE, OUTSIDER = 61000, 61001, 61002, 61003, 61004
SCENARIO_TIMEOUT_S = 100


def _end_leftovers(base: Path) -> None:
    """SIGKILL any process of the scenario's users still in a group it recorded (should it
    have died before its own clean-up)."""
    try:
        groups = {int(line) for line in (base / "pgids").read_text().split()}
    except (OSError, ValueError):
        return
    for proc in psutil.process_iter(["uids"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.info["uids"].real in range(GROUP, OUTSIDER + 1) \
                    and os.getpgid(proc.pid) in groups:
                os.kill(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def observed() -> dict:
    """Run the scenario once, in a mount namespace of its own; what it observed."""
    if os.geteuid() != 0:
        pytest.skip("needs root: it runs processes as other Unix users (uids 61000-61004) "
                    "in a private mount namespace")
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if not unshare or not mount:
        pytest.skip("needs unshare(1) and mount(8) (util-linux)")
    base = Path(tempfile.mkdtemp(prefix="adloader-two-users-", dir="/tmp"))
    base.chmod(0o755)  # other users reach their homes inside it
    proc = subprocess.Popen([unshare, "--mount", "--propagation", "private", sys.executable,
                             str(SCENARIO), "scenario", str(base)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        try:
            out, err = proc.communicate(timeout=SCENARIO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.terminate()  # it ends what it started
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            pytest.fail(f"the scenario took over {SCENARIO_TIMEOUT_S} s")
    finally:
        _end_leftovers(base)
        shutil.rmtree(base, ignore_errors=True)
    lines = out.strip().splitlines()
    if proc.returncode != 0 and "unshare failed" in err:
        pytest.skip(f"cannot make a private mount namespace here: {err.strip()}")
    assert proc.returncode == 0 and lines, f"the scenario exited {proc.returncode}: {err}"
    result = json.loads(lines[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    if "error" in result:
        pytest.fail(f"{result['error']}\n-- daemon log:\n{result['daemon_log']}\n"
                    f"-- tenant log:\n{result['tenant_log']}")
    return result


def test_the_daemons_state_is_its_users_alone(observed):
    assert observed["state_dir"] == {"mode": 0o700, "uid": DAEMON}
    files = observed["files"]
    assert {"adloader.db", "token", "secret", "daemon.lock"} <= set(files)
    for name, f in files.items():
        assert (f["uid"], f["mode"]) == (DAEMON, 0o700 if f["dir"] else 0o600), name
    hostile = observed["hostile"]
    assert hostile["groups"] == [GROUP]  # a member of the socket group ...
    assert hostile["state_listing"] == "EACCES"  # ... reads none of the daemon's state
    assert hostile["state_files"] == {name: "EACCES" for name in files}
    assert hostile["rest_without_token"] == 401


def test_the_socket_group_may_connect_and_register_its_own_jobs(observed):
    assert observed["socket"] == {"mode": 0o660, "uid": DAEMON, "gid": GROUP,
                                  "is_socket": True}
    assert observed["hostile"]["own_register"] == ["allocation"]
    assert observed["tenant"] == {"run_uid": TENANT, "child_uid": TENANT}


def test_a_tenant_cannot_read_another_tenants_job_environment(observed):
    assert set(observed["hostile"]["environ"].values()) == {"EACCES"}
    # where the job's token is: its own user can read it (docs/security.md says so)
    assert observed["same_user"] == {"uid": TENANT, "reads_environ": "ok",
                                     "sees_job_token": True}


def test_forged_messages_for_another_tenants_job_are_refused(observed):
    hostile = observed["hostile"]
    assert hostile["forged_sent"] == 25
    assert hostile["forged_answered"] == hostile["forged_sent"]  # one answer each ...
    assert hostile["forged_answers"] == ["refused"]  # ... and every one a refusal
    assert hostile["refusal_reasons"] == ["the token does not match the job"]
    assert hostile["stolen_routing_id_heard"] == ["refused"]  # its own refusal, no more
    # the job's own token, leaked to another user: refused, the job bound to its own user
    assert hostile["leaked_token_answers"] == ["refused", "refused"]
    assert hostile["leaked_token_reasons"] == ["the job belongs to another user"]
    events = observed["victim_events"]
    # each one logged, the routing-id thief's own guess and the leaked token's two too
    assert events.count("refused") == hostile["forged_sent"] + 1 + 2
    assert not {"paused", "failed", "cancelled"} & set(events), events
    after = observed["views"]["after"]
    assert after["state"] == "running" and after["iteration"] < 10**5  # no forged progress


def test_a_tenant_cannot_signal_another_tenants_job(observed):
    hostile = observed["hostile"]
    assert set(hostile["kill"].values()) == {"EPERM"}
    assert set(hostile["killpg"].values()) == {"EPERM"}
    assert observed["alive_after_attack"] == {"run": True, "child": True}


def test_the_attacked_job_trains_on_and_finishes(observed):
    views = observed["views"]
    assert views["before"]["state"] == views["after"]["state"] == "running"
    assert views["later"]["iteration"] > views["after"]["iteration"] > views["before"][
        "iteration"]
    assert observed["run_exit"] == 0
    final = observed["final"]
    assert (final["state"], final["exit_code"]) == ("finished", 0), final


def test_a_user_outside_the_socket_group_cannot_reach_the_socket(observed):
    outsider = observed["outsider"]
    assert outsider["uid"] == OUTSIDER and outsider["groups"] == []
    assert outsider["stat_socket"] == outsider["list_run_dir"] == "EACCES"
    assert outsider["connect"] == "EACCES"


def test_a_socket_folder_the_broker_makes_lets_its_group_through(tmp_path):
    """With a socket group, a folder the broker creates is 0750 and the group's (the
    daemon's umask 077 notwithstanding); an existing folder is left as it is."""
    gid = os.getgid()
    old = os.umask(0o077)  # as the daemon runs
    try:
        with Broker(f"ipc://{tmp_path}/made/run/c.sock", group=str(gid)) as broker:
            folder = os.stat(tmp_path / "made" / "run")
            assert (stat.S_IMODE(folder.st_mode), folder.st_gid) == (0o750, gid)
            sock = os.stat(broker.path)
            assert (stat.S_IMODE(sock.st_mode), sock.st_gid) == (0o660, gid)
        (tmp_path / "kept").mkdir(mode=0o711)
        (tmp_path / "kept").chmod(0o711)
        with Broker(f"ipc://{tmp_path}/kept/c.sock", group=str(gid)):
            assert stat.S_IMODE(os.stat(tmp_path / "kept").st_mode) == 0o711
        with Broker(f"ipc://{tmp_path}/plain/c.sock") as broker:
            assert stat.S_IMODE(os.stat(tmp_path / "plain").st_mode) == 0o700
            assert stat.S_IMODE(os.stat(broker.path).st_mode) == 0o600
    finally:
        os.umask(old)
