"""A real one-node Slurm cluster for a test: munge, slurmctld and slurmd from Debian's packages
(``slurm-wlm``, ``munge``), started as root with a slurm.conf written for the test, the
configuration docs/slurm.md supports (``ProctrackType=proctrack/cgroup``,
``TaskPlugin=task/cgroup``, cgroup v1 or v2). Needs root and the packages: ``cannot`` (skip,
or fail under CI=true) otherwise.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from ci_rules import cannot, run
from daemon_harness import wait_for

from adloader.daemon.process import free_port

MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def _cgroup_plugin() -> str:
    return "cgroup/v2" if Path("/sys/fs/cgroup/cgroup.controllers").exists() \
        and not Path("/sys/fs/cgroup/cpuset").exists() else "cgroup/v1"


def start_munge() -> None:
    """munged as the munge user, on its default socket (where Slurm's auth/munge looks)."""
    if run(["munge", "-n"]).returncode == 0:
        return  # one is serving already
    try:
        user = pwd.getpwnam("munge")
    except KeyError:
        cannot("no munge user (apt-get install munge)")
    folder = MUNGE_SOCKET.parent
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, user.pw_uid, user.pw_gid)
    folder.chmod(0o755)
    started = run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"])
    if started.returncode != 0:
        cannot(f"munged did not start: {started.stderr.strip()[-300:]}")
    wait_for(lambda: run(["munge", "-n"]).returncode == 0, 30, "munged to answer")


class SlurmCluster:
    """slurmctld and one slurmd (this host) under ``work``; ``env`` is what srun/sbatch/scancel
    need (``SLURM_CONF``)."""

    def __init__(self, work: Path, kill_wait_s: int = 30, oversubscribe: int = 0) -> None:
        if os.geteuid() != 0:
            cannot("Slurm's daemons run as root here")
        for tool in ("slurmctld", "slurmd", "srun", "sbatch", "scancel", "munged", "sinfo"):
            if shutil.which(tool) is None:
                cannot(f"no {tool} (apt-get install slurm-wlm munge)")
        self.work = Path(work)
        self.host = socket.gethostname()
        for sub in ("state", "spool", "log"):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        self.conf = self.work / "slurm.conf"
        self.conf.write_text(self._conf(kill_wait_s, oversubscribe))
        (self.work / "cgroup.conf").write_text(
            f"CgroupPlugin={_cgroup_plugin()}\nConstrainCores=yes\nCgroupAutomount=yes\n")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def _conf(self, kill_wait_s: int, oversubscribe: int) -> str:
        shared = f" OverSubscribe=FORCE:{oversubscribe}" if oversubscribe else ""
        w = self.work
        return "\n".join([
            "ClusterName=adloader-test", f"SlurmctldHost={self.host}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"StateSaveLocation={w}/state", f"SlurmdSpoolDir={w}/spool",
            f"SlurmctldPidFile={w}/slurmctld.pid", f"SlurmdPidFile={w}/slurmd.pid",
            f"SlurmctldLogFile={w}/log/slurmctld.log", f"SlurmdLogFile={w}/log/slurmd.log",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            "ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup",
            "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
            f"KillWait={kill_wait_s}", "JobAcctGatherType=jobacct_gather/none",
            f"NodeName={self.host} CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN",
            f"PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP{shared}",
            ""])

    def start(self) -> SlurmCluster:
        start_munge()
        for daemon in ("slurmctld", "slurmd"):  # -D: in the foreground, ours to stop
            log = open(self.work / "log" / f"{daemon}.out", "wb")  # noqa: SIM115
            self.procs.append(subprocess.Popen([daemon, "-D", "-f", str(self.conf)],
                                               env=self.env, stdout=log, stderr=log))
        try:
            wait_for(lambda: "idle" in run(["sinfo", "-h", "-o", "%t"], env=self.env).stdout,
                  90, "the node to be idle in Slurm")
        except AssertionError:
            self.stop()
            raise AssertionError("Slurm did not come up: " + self.logs()) from None
        return self

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:]
                         for p in sorted((self.work / "log").glob("*")))

    def stop(self) -> None:
        run(["scancel", "--full", "--user", "root"], env=self.env)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
