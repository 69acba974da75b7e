"""A real Slurm cluster for a test: munge, slurmctld and slurmd from Debian's packages
(``slurm-wlm``, ``munge``), started as root with a slurm.conf written for the test, the
configuration docs/slurm.md supports (``ProctrackType=proctrack/cgroup``,
``TaskPlugin=task/cgroup``, cgroup v1 or v2). One node, this host; or ``nodes`` of them, all
on this host — one slurmd each (``slurmd -N n1``), its own port, spool, pid and log file
(``%n``), as Slurm runs several slurmd on one host (Debian's 22.05 build runs them). Needs
root and the packages: ``cannot`` (skip, or fail under CI=true) otherwise.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import psutil
from ci_rules import cannot, run
from daemon_harness import wait_for

from adloader.remote.process import free_port

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
    """slurmctld and one slurmd (this host; with ``nodes``, one each for n1, n2, …) under
    ``work``; ``env`` is what srun/sbatch/scancel need (``SLURM_CONF``)."""

    def __init__(self, work: Path, kill_wait_s: int = 30, oversubscribe: int = 0,
                 nodes: int = 0) -> None:
        if os.geteuid() != 0:
            cannot("Slurm's daemons run as root here")
        for tool in ("slurmctld", "slurmd", "srun", "sbatch", "scancel", "munged", "sinfo"):
            if shutil.which(tool) is None:
                cannot(f"no {tool} (apt-get install slurm-wlm munge)")
        self.work = Path(work)
        self.host = socket.gethostname()
        self.nodes = [f"n{i + 1}" for i in range(nodes)]
        for sub in ("state", "spool", "log", *(f"spool-{n}" for n in self.nodes)):
            (self.work / sub).mkdir(parents=True, exist_ok=True)
        self.conf = self.work / "slurm.conf"
        self.conf.write_text(self._conf(kill_wait_s, oversubscribe))
        plugin = _cgroup_plugin()
        # on v2 slurmd asks systemd (over D-Bus) for its stepds' scope; where no systemd
        # answers (a container, tests/kernel_vm.py's guest) it makes the cgroups itself
        fallback = "IgnoreSystemdOnFailure=yes\n" if plugin == "cgroup/v2" else ""
        (self.work / "cgroup.conf").write_text(
            f"CgroupPlugin={plugin}\nConstrainCores=yes\nCgroupAutomount=yes\n{fallback}")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def _conf(self, kill_wait_s: int, oversubscribe: int) -> str:
        shared = f" OverSubscribe=FORCE:{oversubscribe}" if oversubscribe else ""
        w = self.work
        if self.nodes:  # several slurmd on this host: each its own port and files (%n)
            cpus = max(1, (os.cpu_count() or 1) // len(self.nodes))
            node_lines = [f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 "
                          f"Port={free_port()} CPUs={cpus} RealMemory=500 State=UNKNOWN"
                          for n in self.nodes]
            slurmd = [f"SlurmdSpoolDir={w}/spool-%n", f"SlurmdPidFile={w}/slurmd-%n.pid",
                      f"SlurmdLogFile={w}/log/slurmd-%n.log"]
        else:
            node_lines = [f"NodeName={self.host} CPUs={os.cpu_count()} RealMemory=1000 "
                          "State=UNKNOWN"]
            slurmd = [f"SlurmdSpoolDir={w}/spool", f"SlurmdPidFile={w}/slurmd.pid",
                      f"SlurmdLogFile={w}/log/slurmd.log", f"SlurmdPort={free_port()}"]
        return "\n".join([
            "ClusterName=adloader-test", f"SlurmctldHost={self.host}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"StateSaveLocation={w}/state", *slurmd,
            f"SlurmctldPidFile={w}/slurmctld.pid",
            f"SlurmctldLogFile={w}/log/slurmctld.log", f"SlurmctldPort={free_port()}",
            "ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup",
            "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core", "ReturnToService=2", "MpiDefault=none",
            f"KillWait={kill_wait_s}", "JobAcctGatherType=jobacct_gather/none",
            *node_lines,
            f"PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP{shared}",
            ""])

    def start(self) -> SlurmCluster:
        start_munge()
        daemons = [("slurmctld", []), *([("slurmd", ["-N", n]) for n in self.nodes]
                                          or [("slurmd", [])])]
        for daemon, args in daemons:  # -D: in the foreground, ours to stop
            log = open(self.work / "log" / f"{daemon}{''.join(args[1:])}.out", "wb")  # noqa: SIM115
            self.procs.append(subprocess.Popen([daemon, "-D", *args, "-f", str(self.conf)],
                                               env=self.env, stdout=log, stderr=log))
        want = max(1, len(self.nodes))
        try:
            wait_for(lambda: run(["sinfo", "-h", "-N", "-o", "%t"],
                                 env=self.env).stdout.split().count("idle") == want,
                     90, "every node to be idle in Slurm")
        except AssertionError:
            self.stop()
            raise AssertionError("Slurm did not come up: " + self.logs()) from None
        return self

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-2000:]
                         for p in sorted((self.work / "log").glob("*")))

    def stepds(self) -> list[psutil.Process]:
        """This cluster's ``slurmstepd`` processes: each holds its slurmd's log open (their
        environment, cleared, does not name the slurm.conf)."""
        logs = str(self.work / "log") + os.sep
        mine = []
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] == "slurmstepd":
                with contextlib.suppress(psutil.Error):
                    if any(f.path.startswith(logs) for f in proc.open_files()):
                        mine.append(proc)
        return mine

    def stop(self) -> None:
        run(["scancel", "--full", "--user", "root"], env=self.env)
        # a step's slurmstepd reports to slurmd as it ends: stopped before it, slurmd waits
        # on SIGTERM and the stepd lives on, orphaned, in a freezer group (``job_1``) the
        # next cluster's first job shares
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not self.stepds(), 20, "the steps' slurmstepd to end")
        # each slurmd before slurmctld: stopping, slurmd tells the controller its epilog is
        # done, and retries for ~10 s where none answers
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for stepd in self.stepds():
            stepd.kill()
