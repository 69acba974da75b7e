"""Slurm on a real cgroup v2 hierarchy: this machine runs v1, so a kernel of its own boots in
QEMU (``tests/kernel_vm.py``) with cgroup2 alone, and ``tests/integration/slurm/test_slurm.py``'s
test of a Slurm name taken outside that Slurm job runs there — munged, slurmctld and slurmd
(``CgroupPlugin=cgroup/v2``; no systemd in the guest, so slurmd makes its cgroups itself,
``IgnoreSystemdOnFailure``), an sbatch job training under the daemon and verified by its
cgroup, a process outside the job claiming its name refused — and, in the same boot,
``tests/integration/cgroups/test_slurm_cpu_share.py``: two steps sharing a core, weighted by the
daemon in their own Slurm cgroups (never moved out), take their shares, and ``scancel`` still
ends them. Its first run found the daemon
looking for Slurm's v2 tree as ``slurmstepd.scope`` where Debian's build (several slurmd a
host) names it ``NODENAME_slurmstepd.scope``: the squatter was not checked, and kept the name.
Needs root, QEMU, a static busybox, the unpacked kernel and Slurm's packages (``.ci/run``
sets them up): skipped without them, except under CI=true, where it must run."""

from __future__ import annotations

import kernel_vm

TEST = "test_a_slurm_name_taken_outside_that_slurm_job_is_refused"
SHARES = "test_two_steps_sharing_a_core_take_their_shares_and_stay_slurm_s"
# what the guest's read-only root lacks for munged and Slurm: writable state and logs, and the
# slice systemd would have made
SETUP = """for d in /var/log /var/lib/munge /var/spool /var/lib/slurm; do mount -t tmpfs t $d; done
mkdir -p /sys/fs/cgroup/system.slice /var/log/munge /run/munge /var/log/slurm
chown munge:munge /var/log/munge /run/munge /var/lib/munge
"""


def test_slurm_names_and_step_shares_on_cgroup_v2(tmp_path):
    kernel_vm.needs_vm(("slurmctld", "slurmd", "munged", "sbatch", "srun"))
    run, outcomes = kernel_vm.pytest_in_guest(
        f"tests/integration/slurm/test_slurm.py::{TEST} "
        "tests/integration/cgroups/test_slurm_cpu_share.py",
        tmp_path / "guest", setup=SETUP)
    assert run.exit_code is not None, run.console[-3000:]
    assert outcomes == {TEST: "passed", SHARES: "passed"}, (outcomes, run.log[-4000:])
    assert run.exit_code == 0, run.log[-3000:]
