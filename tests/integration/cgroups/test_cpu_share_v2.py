"""The CPU groups on a real cgroup v2 hierarchy: this machine runs v1, so a kernel of its own
boots in QEMU (``tests/kernel_vm.py``) with cgroup2 alone, and runs
every test of ``tests/integration/cgroups/test_cpu_share.py`` there, on this checkout: CPU seconds
follow the weights within 10 %, a tenant with many processes takes only its share, the rules
``turn`` and ``order`` as the kernel applies them (``cpu.weight``, ``cpu.stat``), and a real
daemon putting launched jobs and jobs started by hand in their groups. Needs root, QEMU, a
static busybox and the unpacked kernel (``.ci/run`` sets them up): skipped without them,
except under CI=true, where it must run."""

from __future__ import annotations

import kernel_vm


def test_the_cpu_groups_take_effect_on_cgroup_v2(tmp_path):
    kernel_vm.needs_vm()
    probe = (f'{kernel_vm.python()} -c "from adloader.host.cpu_share import CpuShares; '
             f"s = CpuShares(parent='probe'); print('version', s.version); s.close()\" "
             f"> /mnt/version.txt\n")
    run, outcomes = kernel_vm.pytest_in_guest("tests/integration/cgroups/test_cpu_share.py",
                                              tmp_path / "guest", setup=probe)
    assert run.exit_code is not None, run.console[-3000:]
    assert (tmp_path / "guest" / "version.txt").read_text().split() == ["version", "2"], \
        run.log[-3000:]
    assert outcomes and set(outcomes.values()) == {"passed"}, (outcomes, run.log[-4000:])
    assert set(outcomes) >= {
        "test_cpu_seconds_follow_the_allocation",
        "test_a_tenant_with_many_processes_takes_no_more_than_its_share",
        "test_a_held_job_runs_on_the_cpu_the_served_job_leaves",
        "test_under_the_order_rule_the_first_job_takes_the_cpu_and_leaves_it_to_the_next",
        "test_the_daemon_puts_each_job_in_a_group_weighted_by_its_workers",
        "test_jobs_started_by_hand_join_their_groups_and_a_tenant_takes_only_its_share",
    }, run.log[-3000:]
    assert run.exit_code == 0, run.log[-3000:]
