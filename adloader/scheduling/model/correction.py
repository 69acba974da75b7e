"""Online correction of one job's predicted training rate B·F_μ from its own steps.

The TPM predicts F_μ from a job's features (§III-B) and is refitted for the whole node, so a
job that runs slower than its features say (another input pipeline, a slow custom op, a
GPU other than the profile's) stays mispredicted. Each heartbeat reports the job's mean GPU
step; when the GPU never waits for data, B / step is its real rate. The correction c_i is a
smoothed ratio of observed to predicted rate, c ← c · (obs/pred)^w in log space (at
w = 0.7 a 2× error is 1.23× after one update and 1.07× after two), and the planner uses
c_i · B·F_μ. A job's first ``WARMUP_S`` of steps (GPU-bound or not) are not used (warm-up
steps are slow for reasons that pass); it is re-planned when c_i moved by more than ``MOVED``
since its last plan.
"""

from __future__ import annotations

import math

WEIGHT = 0.7  # of a new observation against the running correction, in log space
LIMITS = (0.05, 20.0)  # a correction outside this is a broken measurement, not a job
MOVED = 0.15  # |log c − log c_planned| above log(1 + MOVED) asks for a re-plan
WARMUP_S = 10.0  # a job's first steps (compilation, cudnn autotuning, cold caches) are ignored


def update(scale: float, observed: float, predicted: float, weight: float = WEIGHT) -> float:
    """c after one observation: ``observed`` and ``predicted`` are the same rate (samples/s,
    ``predicted`` made with c = ``scale``); a non-positive or non-finite input changes nothing."""
    if not (observed > 0 and predicted > 0 and math.isfinite(observed)
            and math.isfinite(predicted)):
        return scale
    target = scale * observed / predicted  # the c that would have predicted it exactly
    out = math.exp((1 - weight) * math.log(scale) + weight * math.log(target))
    return min(max(out, LIMITS[0]), LIMITS[1])


def moved(scale: float, planned: float, threshold: float = MOVED) -> bool:
    """Whether c moved enough since the plan that used ``planned`` to plan again."""
    return abs(math.log(scale / planned)) > math.log1p(threshold)
