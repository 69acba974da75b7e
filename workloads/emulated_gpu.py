"""The GPU node emulated on a CPU box (``adloader.sim.gpu_node`` says what and why): the
GPU step held under a lock per emulated GPU, virtual cores, and a trainer that does to each
batch what a real one does before its step.

Two variables switch the faithful node on (``adloader bench live --member gpu-node`` sets
both; a job started without them emulates a sleep-only step, as before):

- ``ADLOADER_CORE_FACTOR``: k, the node's cores for each real core given to them
  (``GpuNode.core_factor``). Every CPU chunk measured here (a sample's decode in a loading
  worker, the trainer's copy and launch) is followed by a sleep of (k − 1) × its CPU time.
- ``ADLOADER_EMULATED_TRAINER``: JSON ``{"copy_s", "launch_s", "steps": {model: s}}``,
  the trainer's costs a batch in seconds (``GpuNode.trainer_env``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

from adloader import env as names

SLICE_S = 0.01  # a GPU time-slices between processes; so does the emulation


@contextlib.contextmanager
def gpu_locks(gpu_ids: list[int]):
    """Hold the emulated GPUs (file locks, taken in order so two jobs never deadlock)."""
    base = Path(os.environ.get(names.GPU_LOCK_DIR) or tempfile.gettempdir())
    handles = []
    try:
        for g in sorted(set(gpu_ids)):
            fh = open(base / f"adloader-gpu-{g}.lock", "a+")  # noqa: SIM115
            fcntl.flock(fh, fcntl.LOCK_EX)
            handles.append(fh)
        yield
    finally:
        for fh in reversed(handles):
            fcntl.flock(fh, fcntl.LOCK_UN)
            fh.close()


def emulate_step(step_s: float, gpu_ids: list[int]) -> None:
    """Hold the job's GPUs for step_s in all, a slice at a time, so jobs that share a GPU
    interleave their steps as time-slicing would (max-min fair on average)."""
    left = step_s
    while left > 0:
        chunk = min(SLICE_S, left)
        with gpu_locks(gpu_ids):
            time.sleep(chunk)
        left -= chunk


def core_factor() -> float:
    """k: the emulated node's cores for each real one (1: no emulated node)."""
    try:
        return max(1.0, float(os.environ.get(names.CORE_FACTOR) or 1.0))
    except ValueError:
        return 1.0


@contextlib.contextmanager
def virtual_core(factor: float | None = None):
    """Run the block on a virtual core: its CPU time c, then a sleep of (k − 1)·c."""
    k = core_factor() if factor is None else factor
    if k <= 1.0:
        yield
        return
    began = time.thread_time()
    try:
        yield
    finally:
        spent = time.thread_time() - began
        if spent > 0:
            time.sleep((k - 1.0) * spent)


def _spin(cpu_s: float) -> None:
    """Spend ``cpu_s`` of this thread's CPU (the Python of a step's launches)."""
    end = time.thread_time() + cpu_s
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x ^= i
    return None


class EmulatedTrainer:
    """What a real trainer does to a batch before and during its step: read it whole and
    copy it into a preallocated pageable buffer (then wait out the rest of the transfer),
    launch the step on the CPU outside the GPU, and hold the GPU for the step.

    ``copy_s``, ``launch_s`` and ``step_s`` are seconds a batch on the emulated node (the
    CPU parts on virtual cores: their real CPU is 1/k of them)."""

    def __init__(self, copy_s: float, launch_s: float, step_s: float, gpu_ids: list[int],
                 factor: float | None = None):
        self.copy_s, self.launch_s, self.step_s = copy_s, launch_s, step_s
        self.gpu_ids = gpu_ids
        self.factor = core_factor() if factor is None else factor
        self._buffer = None  # the device's copy of the batch, grown to the largest seen
        self.copy_cpu_s = 0.0  # real CPU the copies took (what the job reports)

    @classmethod
    def from_env(cls, gpu_ids: list[int], model: str) -> EmulatedTrainer | None:
        """The trainer ``ADLOADER_EMULATED_TRAINER`` describes for ``model`` (None: unset)."""
        raw = os.environ.get(names.EMULATED_TRAINER, "")
        if not raw:
            return None
        spec = json.loads(raw)
        steps = spec.get("steps", {})
        step = steps.get(model, spec.get("step_s", 0.0))
        return cls(float(spec.get("copy_s", 0.0)), float(spec.get("launch_s", 0.0)),
                   float(step), gpu_ids)

    def train(self, batch) -> None:
        """One step on ``batch`` (a tensor, or a tuple or list of them)."""
        import torch

        t0 = time.perf_counter()
        c0 = time.thread_time()
        with virtual_core(self.factor):
            tensors = [t for t in (batch if isinstance(batch, list | tuple) else (batch,))
                       if isinstance(t, torch.Tensor)]
            size = sum(t.numel() * t.element_size() for t in tensors)
            if self._buffer is None or self._buffer.numel() < size:
                self._buffer = torch.empty(size, dtype=torch.uint8)
            at = 0
            for t in tensors:
                n = t.numel() * t.element_size()
                self._buffer[at:at + n].copy_(t.contiguous().view(-1).view(torch.uint8))
                at += n
        self.copy_cpu_s += time.thread_time() - c0
        rest = self.copy_s - (time.perf_counter() - t0)
        if rest > 0:  # the transfer's DMA part: no CPU
            time.sleep(rest)
        if self.launch_s > 0:
            with virtual_core(self.factor):
                _spin(self.launch_s / self.factor)
        emulate_step(self.step_s, self.gpu_ids)
