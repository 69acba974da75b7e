"""The node's capacity from its own cgroup (v2 cpu.max / cpuset, v1 CFS quota / cpuset), on
cgroup trees laid out in a temporary directory."""

import pytest

from adloader.host.cgroup import capacity, cgroup_cpus, cpu_list_count


def v2_tree(root, path="kubepods/pod1/c1", cpu_max=None, cpuset=None, parent_max=None):
    (root / "cgroup.controllers").write_text("cpu cpuset memory\n")
    (root / "proc-self-cgroup").write_text(f"0::/{path}\n")
    leaf = root.joinpath(*path.split("/"))
    leaf.mkdir(parents=True)
    if cpu_max:
        (leaf / "cpu.max").write_text(cpu_max + "\n")
    if cpuset:
        (leaf / "cpuset.cpus.effective").write_text(cpuset + "\n")
    if parent_max:
        (leaf.parent / "cpu.max").write_text(parent_max + "\n")
    return leaf


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("ADLOADER_CGROUP_ROOT", str(tmp_path))
    return tmp_path


def test_cpu_lists_are_counted():
    assert cpu_list_count("0-3,6,8-9") == 7 and cpu_list_count("5") == 1
    assert cpu_list_count("") == 0


def test_v2_quota_is_rounded_down_and_capped_by_the_cores(root):
    leaf = v2_tree(root, cpu_max="250000 100000")
    assert cgroup_cpus() == 2.5 and capacity(8) == 2 and capacity(1) == 1
    (leaf / "cpu.max").write_text("max 100000\n")  # an in-place resize lifts the limit
    assert cgroup_cpus() is None and capacity(8) == 8
    (leaf / "cpu.max").write_text("50000 100000\n")  # half a core still runs one worker
    assert capacity(8) == 1


def test_v2_the_tightest_of_quota_cpuset_and_ancestors_wins(root):
    v2_tree(root, cpu_max="600000 100000", cpuset="0-3", parent_max="300000 100000")
    assert cgroup_cpus() == 3.0 and capacity(16) == 3


def test_v1_cfs_quota_and_cpuset(root):
    (root / "proc-self-cgroup").write_text("7:cpuset:/docker/abc\n5:cpu,cpuacct:/docker/abc\n")
    cpu = root / "cpu,cpuacct" / "docker" / "abc"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpus() is None
    (cpu / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpus() == 3.0
    cpuset = root / "cpuset" / "docker" / "abc"
    cpuset.mkdir(parents=True)
    (cpuset / "cpuset.cpus").write_text("0-1\n")
    assert cgroup_cpus() == 2.0 and capacity(8) == 2


def test_no_cgroup_limits_nothing(root):
    (root / "proc-self-cgroup").write_text("0::/\n")
    (root / "cgroup.controllers").write_text("cpu\n")
    assert cgroup_cpus() is None and capacity(4) == 4
