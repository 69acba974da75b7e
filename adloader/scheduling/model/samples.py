"""Throughput samples: what the TPM is fitted from (A-Dloader §III-B).

A training sample times one step of a model (eq. 6's inputs: per-GPU batch b, forward
FLOPs f, model size M, GPUs n). A loading sample measures a job's loading rate λ with d
workers of its own while the node runs D workers in all (eq. 7, Fig. 5).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainingSample:
    """One measured step: b per-GPU batch, f GFLOPs forward per sample, M million params."""

    batch_size: int
    gpus: int
    flops_g: float
    params_m: float
    step_s: float
    model: str = ""


@dataclass(frozen=True)
class LoadingSample:
    """One measured loading rate λ (samples/s) for d job workers among D node workers."""

    job_workers: int
    node_workers: int
    loading_rate: float


CSV_COLUMNS = (
    "kind",
    "model",
    "batch_size",
    "gpus",
    "flops_g",
    "params_m",
    "step_s",
    "job_workers",
    "node_workers",
    "loading_rate",
)
