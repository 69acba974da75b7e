"""The ``Policy`` protocol: what the planner, the daemon and the simulator ask of a policy.

A policy is an object. It parses its own parameters (``fair:0.9``: the registry hands it
``"0.9"``), owns its state (``ftf``'s shadow run of balance) and says what it needs
(``replans_at_completion``, ``uses_lengths``); nothing outside it tests its name. The one-shot
form ``policy(jobs, capacity, loading) -> {name: workers}`` (A-Dloader eq. 1) is what the
benches and the bounds call; ``decide`` is one decision of a running node, with the time, the
window and the jobs' GPU shares; ``rebase`` and ``forget`` keep its state in step with the node.

A stateless policy is one function wrapped by :class:`Rule` (or :class:`Floored`, a function
with ``fair``'s sharing floor α); a policy with state subclasses :class:`Policy` in its own
module (``adloader.scheduling.policies.ftf.FinishFair``) and registers in ``policies``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adloader.errors import InputError
from adloader.scheduling.policies.allocation import Allocation, JobDemand
from adloader.scheduling.policies.fair import DEFAULT_ALPHA, check_alpha

AllocationFn = Callable[[Sequence[JobDemand], int, np.ndarray], Allocation]


@dataclass(frozen=True)
class Decision:
    """One decision of a running node, as a policy sees it (the planner builds it).

    ``jobs``: the jobs to allocate, in the planner's order, each with its ceiling B·F_μ under
    the GPU shares of the current placement; ``shares(workers)``: the same jobs' demands with
    the GPU shares an allocation would leave them; ``now`` (None: no clock, a one-off plan)
    and ``window``, how long the caller waits to re-plan after a completion; ``started``
    (None: all), whether each job has trained a batch (a start-up is no allocation's doing);
    ``solo`` and ``gpu_ids`` (None: not given): each job's c_i·B·F_μ alone on its GPUs and
    those GPUs, for a policy that predicts another run's GPU sharing (``ftf``'s shadow of
    balance).
    """

    jobs: Sequence[JobDemand]
    capacity: int
    loading: np.ndarray
    length_known: Sequence[bool]
    shares: Callable[[Mapping[str, int]], list[JobDemand]]
    now: float | None = None
    window: float = 0.0
    started: Sequence[bool] | None = None
    solo: Sequence[float] | None = None
    gpu_ids: Sequence[tuple[int, ...]] | None = None


class Policy:
    """An allocation policy (see the module). Subclasses give ``__call__``; the rest is
    optional state."""

    name: str = "?"
    replans_at_completion: bool = False  # plans on freed workers at once (no completion buffer)
    uses_lengths: bool = False  # reads each job's stated length S_i (remaining samples)
    most_jobs: int | None = None  # past this many jobs it is another policy (ftf: fair)

    def __call__(self, jobs: Sequence[JobDemand], capacity: int,
                 loading: np.ndarray) -> Allocation:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} gives no allocation")

    def decide(self, decision: Decision) -> tuple[Allocation, list[JobDemand]]:
        """One decision: the allocation and the demands it was made on."""
        return self(decision.jobs, decision.capacity, decision.loading), list(decision.jobs)

    def rebase(self, capacity: int, loading: np.ndarray) -> None:
        """The node's capacity or loading table changed (a refit, a resized cgroup)."""

    def forget(self, name: str) -> None:
        """Job ``name`` left for good before its end (cancelled, failed)."""

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


class Rule(Policy):
    """A stateless policy that is one function of (jobs, capacity, loading), no parameter."""

    def __init__(self, name: str, fn: AllocationFn, *, uses_lengths: bool = False):
        self.name, self.fn, self.uses_lengths = name, fn, uses_lengths

    def __call__(self, jobs, capacity, loading) -> Allocation:
        return self.fn(jobs, capacity, loading)

    @classmethod
    def factory(cls, name: str, fn: AllocationFn, **kw) -> Callable[[str | None], Policy]:
        def parse(param: str | None) -> Policy:
            if param is not None:
                raise InputError(f"policy {name!r} takes no parameter (got {name}:{param})")
            return cls(name, fn, **kw)
        return parse


class Floored(Policy):
    """A stateless policy with ``fair``'s sharing floor α in [0, 1] (``name:α``)."""

    def __init__(self, name: str, fn: Callable[..., Allocation], alpha: float = DEFAULT_ALPHA,
                 *, uses_lengths: bool = False):
        self.base, self.fn, self.alpha = name, fn, alpha
        self.name = name if alpha == DEFAULT_ALPHA else f"{name}:{alpha:g}"
        self.uses_lengths = uses_lengths

    def __call__(self, jobs, capacity, loading) -> Allocation:
        return self.fn(jobs, capacity, loading, alpha=self.alpha)

    @classmethod
    def factory(cls, name: str, fn: Callable[..., Allocation],
                **kw) -> Callable[[str | None], Policy]:
        def parse(param: str | None) -> Policy:
            return cls(name, fn, DEFAULT_ALPHA if param is None else check_alpha(param), **kw)
        return parse
