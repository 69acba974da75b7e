"""A TPM whose predictions are off by up to ±ε per job, the truth left alone (robustness).

The simulator runs jobs on the profile (the truth) and decides with a fitted TPM; wrapping that
TPM here makes each job's predicted training rate B·F_μ wrong by a fixed factor in
[1 − ε, 1 + ε], drawn once per job from (seed, its features): the scheduler keeps deciding on
the same wrong number, as it would with a model fitted on other hardware.
"""

from __future__ import annotations

import hashlib


class NoisyModel:
    """``model`` with ``training_throughput`` × (1 + ε·u), u ∈ [−1, 1] fixed per job."""

    def __init__(self, model, error: float, seed: int = 0) -> None:
        self._model, self.error, self.seed = model, float(error), int(seed)

    def factor(self, batch_size: int, gpus: int, flops_g: float, params_m: float) -> float:
        key = f"{self.seed}:{batch_size}:{gpus}:{flops_g:.6g}:{params_m:.6g}".encode()
        u = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
        return 1.0 + self.error * (2.0 * u - 1.0)

    def training_throughput(self, batch_size: int, gpus: int, flops_g: float,
                            params_m: float) -> float:
        base = self._model.training_throughput(batch_size, gpus, flops_g, params_m)
        return base * self.factor(batch_size, gpus, flops_g, params_m)

    def __getattr__(self, name: str):
        return getattr(self._model, name)
