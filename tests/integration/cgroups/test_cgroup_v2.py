"""The CPU groups and Slurm on a real cgroup v2 hierarchy: this machine runs v1, so a kernel of
its own boots in QEMU (``tests/kernel_vm.py``) with cgroup2 alone — once for this module — and
runs there, on this checkout:

- every test of ``tests/integration/cgroups/test_cpu_share.py``: CPU seconds follow the weights
  within 10 %, a tenant with many processes takes only its share, the rules ``turn`` and
  ``order`` as the kernel applies them (``cpu.weight``, ``cpu.stat``), and a real daemon
  putting launched jobs and jobs started by hand in their groups;
- ``tests/integration/slurm/test_slurm.py``'s test of a Slurm name taken outside that Slurm
  job — munged, slurmctld and slurmd (``CgroupPlugin=cgroup/v2``; no systemd in the guest, so
  slurmd makes its cgroups itself, ``IgnoreSystemdOnFailure``), an sbatch job training under
  the daemon and verified by its cgroup, a process outside the job claiming its name refused
  — and ``tests/integration/cgroups/test_slurm_cpu_share.py``: two steps sharing a core,
  weighted by the daemon in their own Slurm cgroups (never moved out), take their shares, and
  ``scancel`` still ends them. Debian's build (several slurmd a host) names Slurm's v2 tree
  ``NODENAME_slurmstepd.scope``, not ``slurmstepd.scope``: the name check looks for both.

Needs root, QEMU, a static busybox, the unpacked kernel and, for the Slurm half, Slurm's
packages (``.ci/run`` sets them up): skipped without them, except under CI=true, where it must
run."""

from __future__ import annotations

import shutil

import kernel_vm
import pytest
from daemon_harness import fitted_prior

SLURM = ("slurmctld", "slurmd", "munged", "sbatch", "srun")
CPU_SHARE = "tests/integration/cgroups/test_cpu_share.py"
NAME_TAKEN = "test_a_slurm_name_taken_outside_that_slurm_job_is_refused"
SHARES = "test_two_steps_sharing_a_core_take_their_shares_and_stay_slurm_s"
# the version the guest's CPU groups find, and what its read-only root lacks for munged and
# Slurm: writable state and logs, and the slice systemd would have made
SETUP = """{python} -c "from adloader.host.cpu_share import CpuShares; \
s = CpuShares(parent='probe'); print('version', s.version); s.close()" > /mnt/version.txt
for d in /var/log /var/lib/munge /var/spool /var/lib/slurm; do mount -t tmpfs t $d; done
mkdir -p /sys/fs/cgroup/system.slice /var/log/munge /run/munge /var/log/slurm
chown munge:munge /var/log/munge /run/munge /var/lib/munge
export ADLOADER_TEST_PRIOR=/mnt/prior-model.json
"""


@pytest.fixture(scope="module")
def guest(tmp_path_factory):
    """One boot: the CPU groups' tests, and the Slurm ones where this machine has Slurm."""
    kernel_vm.needs_vm()
    slurm = all(shutil.which(t) for t in SLURM)
    args = CPU_SHARE + (f" tests/integration/slurm/test_slurm.py::{NAME_TAKEN} "
                        "tests/integration/cgroups/test_slurm_cpu_share.py" if slurm else "")
    out = tmp_path_factory.mktemp("guest")
    shutil.copyfile(fitted_prior(), out / "prior-model.json")  # fitted here, not in TCG
    run, outcomes = kernel_vm.pytest_in_guest(args, out,
                                              setup=SETUP.format(python=kernel_vm.python()))
    assert run.exit_code is not None, run.console[-3000:]
    return run, outcomes, out


def test_the_cpu_groups_take_effect_on_cgroup_v2(guest):
    run, outcomes, out = guest
    assert (out / "version.txt").read_text().split() == ["version", "2"], run.log[-3000:]
    mine = {name: o for name, o in outcomes.items() if name not in (NAME_TAKEN, SHARES)}
    assert mine and set(mine.values()) == {"passed"}, (outcomes, run.log[-4000:])
    assert set(mine) >= {
        "test_cpu_seconds_follow_the_allocation",
        "test_a_tenant_with_many_processes_takes_no_more_than_its_share",
        "test_a_held_job_runs_on_the_cpu_the_served_job_leaves",
        "test_under_the_order_rule_the_first_job_takes_the_cpu_and_leaves_it_to_the_next",
        "test_the_daemon_puts_each_job_in_a_group_weighted_by_its_workers",
        "test_jobs_started_by_hand_join_their_groups_and_a_tenant_takes_only_its_share",
    }, run.log[-3000:]


def test_slurm_names_and_step_shares_on_cgroup_v2(guest):
    kernel_vm.needs_vm(SLURM)
    run, outcomes, _ = guest
    assert {n: outcomes.get(n) for n in (NAME_TAKEN, SHARES)} == \
        {NAME_TAKEN: "passed", SHARES: "passed"}, (outcomes, run.log[-4000:])
    assert run.exit_code == 0, run.log[-3000:]
