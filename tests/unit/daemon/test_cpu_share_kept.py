"""A Slurm step on cgroup v2 is weighted in its own cgroup, never moved out of it
(``CpuShares.keep``, ``daemon.control.slurm_identity.slurm_step_group``): on a cgroup2
hierarchy laid out in a folder as the kernel lays it. The real hierarchy, with a real Slurm, is
``tests/integration/cgroups/test_cgroup_v2.py``'s."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from adloader.daemon.control.slurm_identity import slurm_step_group
from adloader.daemon.jobs import job_shares
from adloader.daemon.jobs.job_shares import JobShares
from adloader.errors import StorageError
from adloader.host.cpu_share import CpuShares

SCOPE = "system.slice/n1_slurmstepd.scope"


def _proc(tmp_path: Path, text: str) -> Path:
    (tmp_path / "proc" / "77").mkdir(parents=True)
    (tmp_path / "proc" / "77" / "cgroup").write_text(text)
    return tmp_path / "proc"


@pytest.mark.parametrize("text, step", [
    (f"0::/{SCOPE}/job_12/step_0/user/task_0\n", f"/{SCOPE}/job_12/step_0"),
    (f"0::/{SCOPE}/job_12/step_batch/user/task_0\n", f"/{SCOPE}/job_12/step_batch"),
    ("0::/system.slice/slurmstepd.scope/job_7/step_3/slurm\n",
     "/system.slice/slurmstepd.scope/job_7/step_3"),
    # v1 (hybrid): Slurm's tree is in the v1 lines; the unified line is systemd's
    ("5:cpuset:/slurm_n1/uid_0/job_12/step_0\n0::/user.slice/session-3.scope\n", None),
    ("0::/user.slice/job_12/step_0\n", None),  # named like Slurm's, in no Slurm tree
    ("0::/\n", None),
])
def test_the_step_a_process_is_in_on_cgroup_v2(tmp_path, text, step):
    assert slurm_step_group(77, _proc(tmp_path, text)) == step


def test_an_unreadable_process_is_in_no_step(tmp_path):
    assert slurm_step_group(78, tmp_path) is None


def _v2(root: Path) -> CpuShares:
    """A cgroup2 root with Slurm's folders for jobs 12 (steps 0, 1) and 13 (step 0)."""
    for d in ("", "system.slice", SCOPE, f"{SCOPE}/job_12", f"{SCOPE}/job_13"):
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "cgroup.subtree_control").write_text("cpuset memory\n")
    (root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    for step in ("job_12/step_0", "job_12/step_1", "job_13/step_0"):
        (root / SCOPE / step).mkdir()
    return CpuShares(root, parent="adl")


def test_kept_groups_are_weighted_where_they_are_and_their_slurm_jobs_by_the_sum(tmp_path):
    shares = _v2(tmp_path)
    for job, step in (("a", "job_12/step_0"), ("b", "job_12/step_1"), ("c", "job_13/step_0")):
        assert shares.keep(job, f"/{SCOPE}/{step}") == tmp_path / SCOPE / step
    for level in ("", "system.slice", SCOPE, f"{SCOPE}/job_12"):  # enabled down to each step
        assert (tmp_path / level / "cgroup.subtree_control").read_text() == "+cpu"
    written = shares.set_workers({"a": 3, "b": 1, "c": 2})
    assert written == {"a": 150, "b": 50, "c": 100}
    weight = {p: int((tmp_path / SCOPE / p / "cpu.weight").read_text())
              for p in ("job_12/step_0", "job_12/step_1", "job_13/step_0", "job_12", "job_13")}
    # steps within job 12 by their workers; the two Slurm jobs by their steps' sums (4 : 2)
    assert weight == {"job_12/step_0": 150, "job_12/step_1": 50, "job_13/step_0": 100,
                      "job_12": 200, "job_13": 100}
    assert not (tmp_path / "adl" / "a").exists()  # nothing made, nothing moved
    assert shares.weight("a") == 150 and shares.group("a") == tmp_path / SCOPE / "job_12/step_0"

    shares.remove("a")  # its job goes: set back, its Slurm job weighed by what is left
    assert (tmp_path / SCOPE / "job_12/step_0/cpu.weight").read_text() == "100"
    assert (tmp_path / SCOPE / "job_12/cpu.weight").read_text() == "50"
    assert (tmp_path / SCOPE / "job_12/step_0").is_dir()  # Slurm's folder, left there
    shares.close()
    assert (tmp_path / SCOPE / "job_12/cpu.weight").read_text() == "100"
    assert (tmp_path / SCOPE / "job_13/cpu.weight").read_text() == "100"
    assert shares.kept == {}


def test_two_jobs_of_one_step_share_its_weight_and_count_once_in_their_slurm_job(tmp_path):
    """Two adloader jobs started in one Slurm step live in one cgroup: it carries the sum of
    their weights, and their Slurm job counts the step once, not the last writer's weight
    twice."""
    shares = _v2(tmp_path)
    for job, step in (("a", "job_12/step_0"), ("b", "job_12/step_0"), ("c", "job_13/step_0")):
        shares.keep(job, f"/{SCOPE}/{step}")
    assert shares.set_workers({"a": 3, "b": 1, "c": 2}) == {"a": 150, "b": 50, "c": 100}
    weight = {p: int((tmp_path / SCOPE / p / "cpu.weight").read_text())
              for p in ("job_12/step_0", "job_12", "job_13/step_0", "job_13")}
    assert weight == {"job_12/step_0": 200, "job_12": 200, "job_13/step_0": 100, "job_13": 100}
    shares.remove("a")  # b is still in the step: the step keeps b's weight
    assert (tmp_path / SCOPE / "job_12/step_0/cpu.weight").read_text() == "50"
    assert (tmp_path / SCOPE / "job_12/cpu.weight").read_text() == "50"
    shares.remove("b")
    assert (tmp_path / SCOPE / "job_12/step_0/cpu.weight").read_text() == "100"
    assert (tmp_path / SCOPE / "job_12/cpu.weight").read_text() == "100"


def test_a_step_gone_with_its_slurm_job_is_set_back_without_an_error(tmp_path):
    shares = _v2(tmp_path)
    shares.keep("c", f"/{SCOPE}/job_13/step_0")
    shares.set_workers({"c": 2})
    for name in ("cpu.weight", "cgroup.subtree_control"):
        (tmp_path / SCOPE / "job_13/step_0" / name).unlink(missing_ok=True)
    (tmp_path / SCOPE / "job_13/step_0").rmdir()
    assert shares.set_workers({"c": 2}) == {}  # no group: nothing written, nothing raised
    shares.remove("c")
    assert shares.kept == {}


def test_keeping_needs_cgroup_v2_and_a_level_that_takes_the_controller(tmp_path):
    (tmp_path / "v1" / "cpu").mkdir(parents=True)
    (tmp_path / "v1" / "cpu" / "cpu.shares").write_text("1024\n")
    with pytest.raises(StorageError, match="needs cgroup v2"):
        CpuShares(tmp_path / "v1", parent="adl").keep("a", f"/{SCOPE}/job_12/step_0")
    shares = _v2(tmp_path / "v2")
    (tmp_path / "v2" / SCOPE / "job_12" / "cgroup.subtree_control").unlink()
    with pytest.raises(StorageError, match="cannot be enabled at .*job_12: "):
        shares.keep("a", f"/{SCOPE}/job_12/step_0")
    assert shares.kept == {}


def test_a_job_in_a_slurm_step_is_kept_there_and_said_so(tmp_path, monkeypatch):
    """``JobShares.adopt`` on v2: a process in a Slurm step is weighted in the step (event
    ``cpu_group_kept``), not moved (no ``cpu_group_joined``, no group of its own)."""
    monkeypatch.setattr(job_shares, "slurm_step_group",
                        lambda pid: f"/{SCOPE}/job_12/step_0" if pid == os.getpid() else None)
    events: list = []
    shares = JobShares("", lambda job, kind, data: events.append((job, kind, data)))
    shares.groups = _v2(tmp_path)
    job = SimpleNamespace(id="a", supervisor="", state="running")
    peer = SimpleNamespace(pid=os.getpid(), uid=os.getuid(), seen=time.monotonic() + 1e9)
    assert shares.adopt(job, peer)
    assert events == [("a", "cpu_group_kept", {"cgroup": f"/{SCOPE}/job_12/step_0"})]
    assert shares.has_group("a") and not (tmp_path / "adl" / "a").exists()
    shares.follow({"a": SimpleNamespace(workers=2, state="running")})
    assert (tmp_path / SCOPE / "job_12/step_0/cpu.weight").read_text() == "100"
    assert (tmp_path / SCOPE / "job_12/cpu.weight").read_text() == "100"
