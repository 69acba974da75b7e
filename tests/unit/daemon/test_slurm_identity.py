"""A Slurm name is checked against the Slurm job the registering process is in
(``daemon.control.slurm_identity``): /proc/PID/cgroup as cgroup v1 and v2 hosts write it, read from
folders the test makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from adloader.daemon.control.slurm_identity import check_slurm_name, slurm_job_of

V1_IN_JOB = ("12:freezer:/slurm_node1/uid_1000/job_1234/step_0\n"
             "5:cpuset:/slurm_node1/uid_1000/job_1234/step_0\n4:memory:/\n0::/\n")
V2_IN_JOB = "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n"
OUTSIDE = "12:freezer:/\n5:cpuset:/\n4:memory:/user.slice\n0::/user.slice/session-3.scope\n"


def _host(tmp_path: Path, cgroup: str, slurm_tree: str | None = "cpuset/slurm_node1"):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "77").mkdir(parents=True)
    (proc / "77" / "cgroup").write_text(cgroup)
    root.mkdir()
    if slurm_tree:
        (root / slurm_tree).mkdir(parents=True)
    return {"proc": proc, "cgroup_root": root}


@pytest.mark.parametrize("name, job", [("slurm-1234.0", "1234"), ("slurm-1234", "1234"),
                                       ("slurm-1234.batch", "1234"), ("slurm-77_3", None),
                                       ("torchrun-abc", None), ("slurm-x", None)])
def test_the_job_a_name_claims(name, job):
    assert slurm_job_of(name) == job


@pytest.mark.parametrize("cgroup, tree", [(V1_IN_JOB, "cpuset/slurm_node1"),
                                          (V2_IN_JOB, "system.slice/slurmstepd.scope")])
def test_a_process_in_the_job_has_its_name(tmp_path, cgroup, tree):
    verdict, why = check_slurm_name("slurm-1234.0", 77, **_host(tmp_path, cgroup, tree))
    assert verdict is True, why


@pytest.mark.parametrize("tree", ["cpuset/slurm_node1", "system.slice/slurmstepd.scope",
                                  "unified/system.slice/slurmstepd.scope",
                                  "system.slice/n1_slurmstepd.scope"])  # several slurmd a host
def test_a_process_outside_the_job_is_refused_the_name_saying_where_it_is(tmp_path, tree):
    verdict, why = check_slurm_name("slurm-1234.0", 77, **_host(tmp_path, OUTSIDE, tree))
    assert verdict is False
    assert "slurm-1234.0" in why and "job 1234" in why and "pid 77" in why
    assert "/user.slice" in why


def test_another_jobs_process_is_refused_the_name(tmp_path):
    other = V1_IN_JOB.replace("job_1234", "job_999")
    verdict, _ = check_slurm_name("slurm-1234.0", 77, **_host(tmp_path, other))
    assert verdict is False
    assert check_slurm_name("slurm-999.3", 77, **_host(tmp_path / "b", other))[0] is True


@pytest.mark.parametrize("name, pid, tree, why", [
    ("train.py", 77, "cpuset/slurm_node1", "not a Slurm job name"),
    ("slurm-77_3", 77, "cpuset/slurm_node1", "not a Slurm job name"),
    ("slurm-1234.0", 0, "cpuset/slurm_node1", "not known"),
    ("slurm-1234.0", 78, "cpuset/slurm_node1", "cannot be read"),
    ("slurm-1234.0", 77, None, "no cgroups on this node"),
])
def test_what_cannot_be_checked_is_not_refused_and_says_why(tmp_path, name, pid, tree, why):
    verdict, said = check_slurm_name(name, pid, **_host(tmp_path, OUTSIDE, tree))
    assert verdict is None and why in said
