"""The GPU node emulated on a CPU box: what a real trainer costs a batch, in the units this
machine can reproduce.

On a GPU node each job's training loop spends time outside ``next()`` on every batch —
receive it whole, copy it from pageable memory to the device, launch the step's kernels,
synchronise — and part of that time is CPU on the node's cores. That time caps what a job
can take in (its intake ceiling C_j = B / time outside ``next()``): workers past it sit
idle with full prefetch queues, and on a node whose loading workers match its cores those
idle workers' cores are lost to every other job. A sleep-only emulated step hides both.

The emulation (``adloader.workloads.emulated_gpu``) rebuilds the node from two parts:

- **virtual cores**: the node's ``cores`` on this machine's fewer real ones. Every CPU
  chunk a loading worker or a trainer spends (c CPU-seconds) is followed by a sleep of
  (k − 1)·c, k = cores ÷ real cores: a process can use at most 1/k of a real core, as on
  the node it can use at most one of its cores, and when more are runnable than the node has
  cores they slow each other by the same factor (the sleeps are fixed, the CPU parts queue).
  The virtual cores share ``share`` of the real ones; the rest runs what is not emulated;
- **the trainer's batch**: read the batch whole and copy it into a preallocated pageable
  buffer (real CPU), sleep what remains of its transfer at the node's pageable bandwidth,
  spend the step's launch CPU outside the GPU, then hold the GPU for the step.

Each cost is set as a fraction of W, one loading worker's decode time for a batch (B / L(1)
on virtual cores, measured where the bench runs), fitted to the one GPU node measured with
the batch's copy in the loop (``FITTED``): its trainers spent 62–78 ms a batch outside
``next()`` under the even split while one worker took 466 ms to decode a batch.
"""

from __future__ import annotations

import dataclasses

NAME = "gpu-node"


@dataclasses.dataclass(frozen=True)
class GpuNode:
    """The emulated node: its cores, GPUs and loading workers, and the trainer's costs a
    batch as fractions of W (one worker's decode time for a batch)."""

    cores: int = 16  # logical cores of the node (the daemon's workers to share)
    gpus: int = 1  # every job of the mix on it (as on the measured node)
    # of this machine's cores, the part its virtual cores share: the rest runs what is not
    # emulated (the batches' collation and hand-over between processes, the daemon)
    share: float = 0.8
    copy: float = 0.04  # host-to-device copy of the batch from pageable memory (CPU)
    launch: float = 0.025  # the step's kernel launches and the optimiser's Python (CPU)
    steps: tuple[tuple[str, float], ...] = (  # the GPU step alone, holding the GPU
        ("Resnet18", 0.06), ("mdResnet12", 0.035), ("smResnet20", 0.035))
    default_step: float = 0.04  # a model not named above

    def core_factor(self, real_cores: int) -> float:
        """k: the node's cores for each real one given to them."""
        return self.cores / max(real_cores * self.share, 1e-9)

    def step(self, model: str) -> float:
        return dict(self.steps).get(model, self.default_step)

    def trainer_env(self, models: list[str], batch_seconds: float) -> dict:
        """The trainer's costs a batch in seconds, W = ``batch_seconds``, for each of
        ``models``: what ``ADLOADER_EMULATED_TRAINER`` carries to the jobs."""
        return {"copy_s": self.copy * batch_seconds, "launch_s": self.launch * batch_seconds,
                "steps": {m: self.step(m) * batch_seconds for m in models}}

    def outside_next(self, model: str) -> float:
        """The time outside ``next()`` a batch, × W, with nothing contended."""
        return self.copy + self.launch + self.step(model)


# What the emulation was fitted to: the one GPU node measured with the batch's copy in the
# trainer's loop (one H100, 16 cores; the static mix at batch 128, crop 224; no daemon,
# 5 workers a job), per job: time outside next() a batch (elapsed − wait, ÷ batches, two
# rounds) against W = 128 / 274.7 s (the staged fit's slope: samples/s a loading worker).
FITTED = {
    "worker_rate": 274.7,  # samples/s
    "batch_size": 128,
    "W_s": 128 / 274.7,
    "outside_next_s": {"Resnet18": (0.0749, 0.0776), "mdResnet12": (0.0658, 0.0620),
                       "smResnet20": (0.0673, 0.0621)},
}


def fitted_ratios() -> dict[str, tuple[float, float]]:
    """The measured node's time outside ``next()`` a batch, × W, per job (two rounds)."""
    w = FITTED["W_s"]
    return {m: (a / w, b / w) for m, (a, b) in FITTED["outside_next_s"].items()}


GPU_NODE = GpuNode()


def intake_ratio(model: str) -> float:
    """r: a job's time outside ``next()`` a batch against one worker's decode time for one,
    as measured on the GPU node (the mean of its two rounds), or for a model it did not run
    the emulated trainer's uncontended costs scaled as the measured models' are."""
    fitted = fitted_ratios()
    if model in fitted:
        return sum(fitted[model]) / 2
    scale = sum(sum(v) / 2 / GPU_NODE.outside_next(m) for m, v in fitted.items()) / len(fitted)
    return GPU_NODE.outside_next(model) * scale
