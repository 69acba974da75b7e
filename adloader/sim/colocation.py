"""What sharing a GPU costs in a simulated truth: published pair throughputs, not perfect
time-slicing.

A pair row says that job a (class, per-GPU batch) beside job b on one GPU runs at x_a of its
rate alone, and b at x_b (Gavel's measured V100 pairs, rows cited in
``truths/published-steps.json``). A job's class is the published model nearer to it in
forward FLOPs per sample (``light``: ResNet-18 on CIFAR-10; ``heavy``: ResNet-50 on
ImageNet); its x beside a partner comes from the valid rows nearest in
|log2(batch / row batch)| summed over the two jobs, ties averaged.

In the fluid simulation (``adloader.scheduling.policies.gpushare``) a co-located job's GPU time per
iteration becomes its step × 0.5 / x and its rate never exceeds its rate alone: two GPU-bound
jobs sharing a GPU then each run at exactly x of their solo rate, x = 0.5 is perfect
time-slicing, and a job its loader holds back leaves the GPU to its partner as before. A job
sharing with several partners (its GPUs with different jobs) takes the smallest x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Colocation:
    classes: tuple[tuple[str, float], ...]  # (class, forward GFLOPs per sample)
    pairs: tuple[tuple[str, int, str, int, float, float], ...]  # (a, b_a, b, b_b, x_a, x_b)

    @classmethod
    def from_json(cls, data: dict) -> Colocation:
        classes = tuple((k, float(v["flops_g"])) for k, v in data["classes"].items())
        pairs = tuple((p["a"], int(p["batch_a"]), p["b"], int(p["batch_b"]), float(p["x_a"]),
                       float(p["x_b"])) for p in data["pairs"])
        return cls(classes, pairs)

    def job_class(self, flops_g: float) -> str:
        return min(self.classes, key=lambda c: abs(math.log(flops_g / c[1])))[0]

    def factor(self, flops_g: float, batch: float, partner_flops_g: float,
               partner_batch: float) -> float:
        """x: a job's rate beside the partner over its rate alone (per-GPU batches)."""
        return _factor(self, self.job_class(flops_g), float(batch),
                       self.job_class(partner_flops_g), float(partner_batch))

    def apply(self, jobs, steps: dict[str, float],
              loading: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
        """(GPU seconds per iteration, loading caps) of each job of ``jobs`` (simulator jobs:
        name, gpu_ids, flops_g, spec.batch_size, spec.gpus) with its partners' interference."""
        active = [j for j in jobs if loading[j.name] > 0]
        on_gpu: dict[int, list] = {}
        for j in active:
            for g in j.gpu_ids:
                on_gpu.setdefault(g, []).append(j)
        steps, loading = dict(steps), dict(loading)
        for j in active:
            partners = {k.name: k for g in j.gpu_ids for k in on_gpu[g] if k is not j}
            if not partners:
                continue
            x = min(self.factor(j.flops_g, j.spec.batch_size / j.spec.gpus, k.flops_g,
                                k.spec.batch_size / k.spec.gpus) for k in partners.values())
            solo = steps[j.name]
            steps[j.name] = solo * 0.5 / x
            loading[j.name] = min(loading[j.name], j.spec.batch_size / solo)
        return steps, loading


@lru_cache(maxsize=4096)
def _factor(table: Colocation, cls: str, batch: float, partner: str, partner_batch: float):
    candidates = []  # (distance, x of this job) over both orientations of each row
    for a, ba, b, bb, xa, xb in table.pairs:
        for (c1, b1, x1), (c2, b2) in (((a, ba, xa), (b, bb)), ((b, bb, xb), (a, ba))):
            if (c1, c2) == (cls, partner):
                d = abs(math.log2(batch / b1)) + abs(math.log2(partner_batch / b2))
                candidates.append((round(d, 9), x1))
    if not candidates:
        return 0.5  # no published pair: perfect time-slicing
    best = min(d for d, _ in candidates)
    nearest = [x for d, x in candidates if d == best]
    return sum(nearest) / len(nearest)
