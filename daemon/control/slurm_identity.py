"""A Slurm name checked against the kernel: ``slurm-JOBID[.STEP]`` is only Slurm's to give.

A job started by hand takes its name from its launcher (``client/master/launcher_name.py``): under
Slurm ``slurm-1234.0``, the same on every node, which operators and cluster schedulers group
a job's parts by. Anyone can set ``SLURM_JOB_ID`` or ``ADLOADER_NAME``, so the name alone
proves nothing. With ``TaskPlugin=task/cgroup`` and ``ProctrackType=proctrack/cgroup`` (the
configuration docs/slurm.md supports), every process of a Slurm job lives in that job's
cgroup — ``.../job_1234/step_0`` on cgroup v1 (``/slurm_HOST/uid_U/job_J/step_S``) and v2
(``/system.slice/slurmstepd.scope/job_J/step_S/...``, or ``NODENAME_slurmstepd.scope`` from a
build for several slurmd on one host) alike — which no process can leave
for another user's job. So the daemon reads ``/proc/PID/cgroup`` of the process the kernel
says connected (``SO_PEERCRED``) and refuses a Slurm name whose job that process is not in.

Checked at the job level (a step of job 1234 claiming another step of 1234 is the same job,
the same user). Array names (``slurm-77_3``) are not checked: the task's cgroup carries its
own job id, not the array's. Not checked, and said so in the job's event: a node where Slurm
keeps no cgroups (no Slurm tree under the cgroup mount: no Slurm job can run here under the
supported configuration), and a process whose cgroups cannot be read (gone, or in a PID
namespace the daemon cannot see).
"""

from __future__ import annotations

import re
from pathlib import Path

SLURM_NAME = re.compile(r"^slurm-(\d+)(?:\.[A-Za-z0-9_]+)?$")
# where Slurm's cgroup/v1 plugin (slurm_HOST, or slurm) and cgroup/v2 (slurmstepd.scope; a
# build for several slurmd on one host, Debian's, names it NODENAME_slurmstepd.scope) keep its
# jobs, under the cgroup mount
SLURM_TREES = ("*/slurm*", "slurm*", "system.slice/*slurmstepd.scope",
               "*/system.slice/*slurmstepd.scope")


def slurm_job_of(name: str) -> str | None:
    """The Slurm job id a name claims (``slurm-1234.0`` -> ``1234``), or None."""
    m = SLURM_NAME.match(name)
    return m.group(1) if m else None


def slurm_step_group(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The cgroup v2 path of the Slurm step process ``pid`` is in (``/system.slice/
    n1_slurmstepd.scope/job_12/step_0``: the step's own folder, above Slurm's ``user``/
    ``task_N`` and ``slurm`` folders inside it), or None: not in a Slurm step, not on cgroup v2
    (the unified ``0::`` line names no Slurm tree), or unreadable."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if not line.startswith("0::"):
            continue
        parts = line[3:].split("/")
        for i in range(1, len(parts) - 1):
            if re.fullmatch(r"job_\d+", parts[i]) and parts[i + 1].startswith("step_") \
                    and any("slurm" in part for part in parts[:i]):
                return "/".join(parts[:i + 2])
    return None


def node_runs_slurm_cgroups(cgroup_root: Path = Path("/sys/fs/cgroup")) -> bool:
    """Whether Slurm keeps its jobs' cgroups on this node (a tree of its under the mount)."""
    return any(any(cgroup_root.glob(pattern)) for pattern in SLURM_TREES)


def check_slurm_name(name: str, pid: int, proc: Path = Path("/proc"),
                     cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[bool | None, str]:
    """(verdict, why) for a job named ``name`` whose process is ``pid``: True, the process
    is in that Slurm job's cgroup; False, it is not (refuse the name); None, not checked
    (not a Slurm job name, no Slurm cgroups on this node, or the process's unreadable)."""
    job = slurm_job_of(name)
    if job is None:
        return None, "not a Slurm job name"
    if not pid:
        return None, "the process is not known (no kernel credentials on this connection)"
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError as exc:
        return None, f"its cgroups cannot be read ({exc.strerror or exc})"
    paths = [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]
    if any(f"job_{job}" in path.split("/") for path in paths):
        return True, f"process {pid} is in Slurm job {job}"
    if not node_runs_slurm_cgroups(cgroup_root):
        return None, "Slurm keeps no cgroups on this node"
    shown = sorted(set(paths))[:2]
    return False, (f"name {name!r} is Slurm job {job}'s, and the process that registered it "
                   f"(pid {pid}) is not in that job (its cgroups: {', '.join(shown) or 'none'})")
