"""Each job's CPU share as a cgroup of its own: what makes an allocation take effect.

On one machine the kernel wastes no CPU (a worker whose prefetch queue is full sleeps), so a
worker count alone only changes *which* job gets the CPU when every job asks for more than
it has. A job in a cgroup of its own, with a weight that follows its allocation, gets at
least its share of the node's CPU when all are busy, whatever its processes do — a tenant
that ignores the daemon and starts many workers cannot take more — and the CPU it leaves
unused goes to the others (weights are work-conserving).

One class for both hierarchies, found at ``root``:

- cgroup v2 (``ROOT/cgroup.controllers`` lists ``cpu``): ``ROOT/PARENT/JOB/cpu.weight``
  (1–10000, 100 the default), the job's processes in ``cgroup.procs``, its CPU time in
  ``cpu.stat`` (``usage_usec``);
- cgroup v1: ``ROOT/cpu/PARENT/JOB/cpu.shares`` (2–262144, 1024 the default) and, where
  ``cpuacct`` is its own hierarchy, ``ROOT/cpuacct/PARENT/JOB`` for ``cpuacct.usage`` (ns).

A job's weight is proportional to its workers (at least one): ``WEIGHT × d_i / mean(d)``
keeps the node's total at the default, so jobs outside adloader's parent keep theirs. That
is the rule ``workers``. The rule ``turn`` makes a plan that runs the jobs in turn take
effect: a job held at one worker while another job holds more gets the kernel's least
weight, so its worker runs on the CPU the served jobs leave (their prefetch queues full)
instead of a share of its own; the served jobs are weighted by their workers as before. The
rule ``order`` gives priority without moving a worker: each job's weight by its workers is
scaled by ``ORDER_RATIO`` for each job ranked after it (the caller's ranking:
``daemon.jobs.job_shares.end_order``), the node's total kept. The job ahead gets the CPU its
workers can use, the next the CPU it leaves, and so on: the jobs end one after another instead
of together, while every worker stays runnable, so the kernel keeps the node busy as before.

A job whose processes already live in a cgroup another manager owns, on v2, is weighted where
it is (``keep``): on a Slurm node on cgroup v2 the step's own folder (``.../job_J/step_S``) —
moving its processes out would take them from Slurm's tracking and cpuset. Its group is
weighted like any job's, and the group's parent (the Slurm job, whose siblings are the node's
other Slurm jobs) gets the sum of its kept groups' weights, so each Slurm job's share at its
own level follows its steps' workers too. The cpu controller is enabled down to that folder
where it is not yet; what adloader wrote is set back to the default when the job leaves, and
the folders are never removed (they are not adloader's).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from adloader.config import CPU_SHARE_RULES
from adloader.errors import StorageError

DEFAULT_ROOT = "/sys/fs/cgroup"
V1_DEFAULT, V1_RANGE = 1024, (2, 262_144)
V2_DEFAULT, V2_RANGE = 100, (1, 10_000)
ORDER_RATIO = 8  # rule ``order``: a job's weight over the next one's in the order (× workers)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:  # one write(2): the kernel takes the value whole
        fh.write(value)


def held(workers: Mapping[str, int]) -> set[str]:
    """The jobs a plan holds at one worker while another job holds more (rule ``turn``)."""
    d = {k: max(1, int(v)) for k, v in workers.items()}
    return {k for k, v in d.items() if v == 1} if d and max(d.values()) > 1 else set()


def weights(workers: Mapping[str, int], default: int, bounds: tuple[int, int],
            rule: str = "workers", order: Sequence[str] = ()) -> dict:
    """Each job's weight: ``default × d_i / mean(d)``, d_i ≥ 1, within the kernel's bounds;
    under the rule ``turn`` a held job (``held``) gets the least, the others as before; under
    ``order``, d_i × ``ORDER_RATIO``^(jobs after it in ``order``) in place of d_i (a job not
    in ``order`` counts as the last)."""
    if rule not in CPU_SHARE_RULES:
        raise ValueError(f"CPU share rule {rule!r}: one of {', '.join(CPU_SHARE_RULES)}")
    if not workers:
        return {}
    d = {k: max(1, int(v)) for k, v in workers.items()}
    lo, hi = bounds
    out = {k: lo for k in (held(d) if rule == "turn" else ())}
    served = {k: v for k, v in d.items() if k not in out}
    scale = dict.fromkeys(served, 1.0)
    if rule == "order":
        ranked = [k for k in dict.fromkeys(order) if k in served]
        scale.update({k: float(ORDER_RATIO) ** (len(ranked) - i) for i, k in enumerate(ranked)})
    mean = sum(v * scale[k] for k, v in served.items()) / len(served)
    return {**out, **{k: min(hi, max(lo, round(default * v * scale[k] / mean)))
                      for k, v in served.items()}}


class CpuShares:
    """The node's jobs as cgroups under ``parent`` (see the module)."""

    def __init__(self, root: str | os.PathLike = DEFAULT_ROOT, parent: str = "adloader"):
        self.root, self.parent = Path(root), parent
        self.kept: dict[str, Path] = {}  # job -> a v2 group another manager owns (``keep``)
        self._kept_weight: dict[str, int] = {}  # a kept job's own weight, as last planned
        controllers = self.root / "cgroup.controllers"
        if controllers.exists() and "cpu" in controllers.read_text().split():
            self.version = 2
            self.base = self.root / parent
            self.acct = self.base
        elif (self.root / "cpu" / "cpu.shares").exists():
            self.version = 1
            self.base = self.root / "cpu" / parent
            acct = self.root / "cpuacct"
            self.acct = acct / parent if (acct / "cpuacct.usage").exists() and \
                acct.resolve() != (self.root / "cpu").resolve() else self.base
        else:
            raise StorageError(f"{self.root}: no cgroup CPU controller (v2 cpu or v1 cpu)")
        try:
            for d in {self.base, self.acct}:
                d.mkdir(exist_ok=True)
            if self.version == 2:  # the parent hands the cpu controller to each job's group
                _write(self.root / "cgroup.subtree_control", "+cpu")
                _write(self.base / "cgroup.subtree_control", "+cpu")
        except OSError as exc:
            raise StorageError(f"{self.base}: cannot make the jobs' cgroups: "
                               f"{exc.strerror}") from None

    @property
    def default(self) -> int:
        return V2_DEFAULT if self.version == 2 else V1_DEFAULT

    @property
    def knob(self) -> str:
        return "cpu.weight" if self.version == 2 else "cpu.shares"

    def group(self, job: str) -> Path:
        """The folder ``job``'s weight is written in: its own, or the one it was kept in."""
        return self.kept.get(job) or self.base / job

    def _dirs(self, job: str) -> list[Path]:
        return list(dict.fromkeys([self.base / job, self.acct / job]))

    def keep(self, job: str, group: str | os.PathLike) -> Path:
        """Weight ``job`` in ``group``, a v2 cgroup its processes already live in (a path
        under the mount, or absolute as ``/proc/PID/cgroup`` writes it), instead of moving
        them; the cpu controller is enabled from the root down to it. Raises StorageError
        where it cannot be (v1, or a level that refuses the controller)."""
        if self.version != 2:
            raise StorageError(f"{job}: a group kept in place needs cgroup v2 (this is v1)")
        path = self.root / str(group).lstrip("/")
        levels = path.relative_to(self.root).parts
        try:
            for i in range(len(levels)):  # the root and every level above ``path``
                above = self.root.joinpath(*levels[:i])
                control = above / "cgroup.subtree_control"
                if "cpu" not in control.read_text().split():
                    _write(control, "+cpu")
        except OSError as exc:
            raise StorageError(f"{path}: the cpu controller cannot be enabled at "
                               f"{above}: {exc.strerror}") from None
        self.kept[job] = path
        return path

    def prepare(self, job: str) -> list[Path]:
        """``job``'s group folders, made: a process joins by writing its pid to
        ``cgroup.procs`` in each (its children then start there)."""
        dirs = self._dirs(job)
        for d in dirs:
            d.mkdir(exist_ok=True)
        return dirs

    def add(self, job: str, pid: int) -> None:
        """Put process ``pid`` (and so every process it starts from now on) in ``job``'s group."""
        for d in self.prepare(job):
            _write(d / "cgroup.procs", str(int(pid)))

    def set_workers(self, workers: Mapping[str, int], rule: str = "workers",
                    order: Sequence[str] = ()) -> dict[str, int]:
        """Weights following each job's workers by ``rule`` (``order``: the jobs' order of
        priority, for the rule ``order``); returns each job's weight (a step kept for two
        jobs is written the sum of theirs)."""
        out = weights({k: v for k, v in workers.items() if self.group(k).is_dir()},
                      self.default, self._bounds, rule, order)
        for job, w in out.items():
            if job not in self.kept:
                _write(self.group(job) / self.knob, str(w))
        self._kept_weight.update({k: w for k, w in out.items() if k in self.kept})
        for path in {self.kept[k] for k in out if k in self.kept}:
            _write(path / self.knob, str(self._kept_total(path)))  # present: is_dir above
        for parent in {p.parent for p in self.kept.values()}:
            self._weigh_parent(parent)
        return out

    @property
    def _bounds(self) -> tuple[int, int]:
        return V2_RANGE if self.version == 2 else V1_RANGE

    def _sum(self, total: int) -> int:
        lo, hi = self._bounds
        return min(hi, max(lo, total or self.default))

    def _kept_total(self, path: Path) -> int:
        """A kept group's weight: the sum of its jobs' (two jobs of one Slurm step share
        it), the default where none is left."""
        return self._sum(sum(self._kept_weight.get(k, self.default)
                             for k, p in self.kept.items() if p == path))

    def _weigh_parent(self, parent: Path) -> None:
        """A kept group's parent (the Slurm job): the sum of the weights of the kept groups
        under it, each counted once; the default where none is."""
        total = 0
        for path in {p for p in self.kept.values() if p.parent == parent}:
            with contextlib.suppress(OSError, ValueError):  # ended: Slurm removed it
                total += int((path / self.knob).read_text())
        with contextlib.suppress(OSError):
            _write(parent / self.knob, str(self._sum(total)))

    def weight(self, job: str) -> int:
        return int((self.group(job) / self.knob).read_text())

    def usage_s(self, job: str) -> float:
        """CPU seconds every process of ``job`` has used while in its group."""
        if self.version == 2:
            for line in (self.group(job) / "cpu.stat").read_text().splitlines():  # acct = base
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
            return 0.0
        return int((self.acct / job / "cpuacct.usage").read_text()) / 1e9

    def remove(self, job: str) -> None:
        """Drop ``job``'s group once its processes are gone (any left move to the parent); a
        kept group is left where it is, its weight (and its parent's) set back."""
        if job in self.kept:
            path = self.kept.pop(job)
            self._kept_weight.pop(job, None)
            with contextlib.suppress(OSError):  # gone with its step
                _write(path / self.knob, str(self._kept_total(path)))  # what is left there
            self._weigh_parent(path.parent)
            return
        for d in self._dirs(job):
            with contextlib.suppress(OSError):
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        _write(d.parent / "cgroup.procs", pid)
                d.rmdir()

    def close(self) -> None:
        """Remove every job group and the parent (what is left of them); kept groups set back."""
        for job in list(self.kept):
            self.remove(job)
        for d in {self.base, self.acct}:
            if d.is_dir():
                for child in d.iterdir():
                    if child.is_dir():
                        self.remove(child.name)
                with contextlib.suppress(OSError):
                    d.rmdir()
