"""The locality modes by name: how a job's global mini-batch is split among its ranks.

``regular`` (every rank its ``r::p`` slice), ``locality`` (the Locality paper's balanced
assignment, §V), ``solar`` (SOLAR's uneven local batches) and ``bounded`` (locality with a
bounded imbalance); each is ``mode(global_batch, holder, p, **costs) -> StepPlan``.
"""

from __future__ import annotations

from collections.abc import Callable

from adloader.datapath.bounded_imbalance import bounded_assign
from adloader.datapath.locality_batch import StepPlan, plan_step, regular_assign, uneven_assign
from adloader.errors import InputError

MODES: dict[str, Callable[..., StepPlan]] = {
    "regular": regular_assign,
    "locality": plan_step,
    "solar": uneven_assign,
    "bounded": bounded_assign,
}


def get_mode(name: str) -> Callable[..., StepPlan]:
    """The planner of a mode by name: ``mode(global_batch, holder, p, **costs) -> StepPlan``."""
    try:
        return MODES[name]
    except KeyError:
        raise InputError(f"locality mode {name!r} is unknown; choose one of "
                         f"{', '.join(MODES)}") from None
