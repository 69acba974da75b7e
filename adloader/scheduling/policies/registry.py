"""Every allocation policy by name: one registry for the daemon, the simulator and the benches.

``get_policy("fair:0.9")`` hands ``"0.9"`` to ``fair``'s own parser and returns a fresh
``Policy`` (its state, if any, is the caller's: one per node or simulation). Adding a policy:
its module (a function, or a ``Policy`` subclass when it keeps state), one line here, its tests.
"""

from __future__ import annotations

from collections.abc import Callable

from adloader.errors import InputError
from adloader.scheduling.policies import allocation
from adloader.scheduling.policies.fair import fair
from adloader.scheduling.policies.ftf import FinishFair
from adloader.scheduling.policies.jct import jct
from adloader.scheduling.policies.policy import Floored, Policy, Rule

DEFAULT_POLICY = "ftf"  # no job ending later than under balance / 0.95, the most Σ within

POLICIES: dict[str, Callable[[str | None], Policy]] = {
    "balance": Rule.factory("balance", allocation.balance),
    "proportion": Rule.factory("proportion", allocation.proportion),
    "inverse": Rule.factory("inverse", allocation.inverse),
    "requested": Rule.factory("requested", allocation.requested),
    "waa": Rule.factory("waa", allocation.waa),
    "optimal": Rule.factory("optimal", allocation.optimal),
    "fair": Floored.factory("fair", fair),  # α = 0.95; ``fair:α`` picks another
    "jct": Floored.factory("jct", jct, uses_lengths=True),  # min Σ predicted JCT, fair's floor
    "ftf": FinishFair.parse,  # least Σ C_i found, no job later than under balance / 0.95,
    # and the last no later than the plan of the most Σ T
    "ftf-turns": FinishFair.parse_turns,  # the same, the last job may end later (turns)
    "ftf-phased": FinishFair.parse_phased,  # ftf, the phase program where no order is on time
}


def get_policy(name: str | Policy) -> Policy:
    """A new policy object by name, ``name:param`` handing ``param`` to the policy's parser
    (``fair:α``, ``jct:α``, ``ftf:α``, ``ftf-turns:α``: the sharing floor α in [0, 1]). A
    policy object is returned as it is."""
    if isinstance(name, Policy):
        return name
    base, sep, param = str(name).partition(":")
    try:
        parse = POLICIES[base]
    except KeyError:
        raise InputError(f"unknown policy {name!r}: choose from {', '.join(POLICIES)} "
                         "(or fair:α, jct:α, ftf:α, ftf-turns:α, ftf-phased:α, "
                         "0 ≤ α ≤ 1)") from None
    return parse(param if sep else None)
