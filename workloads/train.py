"""The reference training job: a real PyTorch loop over real JPEGs, under the daemon.

    python -m adloader.workloads.train --model smResnet20 --batch-size 32 --iterations 60

Loading is real CPU work in the ElasticDataLoader's workers (JPEG decode, random resized
crop, flip, normalisation). On CUDA the step is real training of the zoo model. Without a
GPU the step is emulated: the job sleeps for the step time the device profile gives for
its model and batch (eq. 6), holding a lock per emulated GPU, so jobs that share a GPU
take turns — one GPU's steps serialised. The two lines that put it under the daemon are
``ElasticDataLoader(...)`` and ``attach(loader, ...)``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from adloader.client import attach
from adloader.client.loader import ElasticDataLoader
from adloader.errors import InputError
from adloader.models import build, features
from adloader.sim.device_profile import load_profile
from adloader.workloads.dataset import SyntheticJPEGDataset, ensure_images


@contextlib.contextmanager
def gpu_locks(gpu_ids: list[int]):
    """Hold the emulated GPUs (file locks, taken in order so two jobs never deadlock)."""
    base = Path(os.environ.get("ADLOADER_GPU_LOCK_DIR") or tempfile.gettempdir())
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


SLICE_S = 0.01  # a GPU time-slices between processes; so does the emulation


def emulate_step(step_s: float, gpu_ids: list[int]) -> None:
    """Hold the job's GPUs for step_s in all, a slice at a time, so jobs that share a GPU
    interleave their steps as time-slicing would (max-min fair on average)."""
    left = step_s
    while left > 0:
        chunk = min(SLICE_S, left)
        with gpu_locks(gpu_ids):
            time.sleep(chunk)
        left -= chunk


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="adloader-train", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, default=32, help="global batch B")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--workers", type=int, default=1, help="until the daemon says otherwise")
    p.add_argument("--profile", default=os.environ.get("ADLOADER_STEP_PROFILE", "paper"),
                   help="device profile for emulated steps (no GPU)")
    p.add_argument("--step-scale", type=float,
                   default=float(os.environ.get("ADLOADER_STEP_SCALE", "1")),
                   help="multiply emulated step times (to scale a mix to this machine)")
    p.add_argument("--data", default=os.environ.get("ADLOADER_DATA", ""))
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    # the daemon decides the worker count; torch's advice to stay under the core count is
    # exactly what contention-aware allocation is about
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    try:
        feat = features(args.model)
    except InputError as exc:
        print(f"adloader-train: error: {exc}", file=sys.stderr)
        return 2
    data = Path(args.data or Path(tempfile.gettempdir()) / "adloader-jpeg")
    ensure_images(data, args.images, seed=args.seed)
    dataset = SyntheticJPEGDataset(data, size=args.iterations * args.batch_size + args.batch_size,
                                   images=args.images, crop=args.crop, seed=args.seed)
    loader = ElasticDataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                               num_workers=args.workers, seed=args.seed, drop_last=True)
    cuda = torch.cuda.is_available()
    net = optimizer = None
    if cuda:
        net = build(args.model).cuda()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gpu_ids = [int(g) for g in os.environ.get("ADLOADER_GPU_IDS", "0").split(",") if g != ""]
    step_s = 0.0
    if not cuda:
        profile = load_profile(args.profile)
        per_gpu = args.batch_size / args.gpus
        step_s = args.step_scale * profile.step_time(per_gpu, feat.flops_g, feat.params_m,
                                                     args.gpus)
    state = (lambda: {"model": net.state_dict(), "optimizer": optimizer.state_dict(),
                      "loader": loader.state_dict()}) if cuda else (
        lambda: {"loader": loader.state_dict()})
    job = attach(loader, model=args.model, batch_size=args.batch_size, gpus=args.gpus,
                 iterations=args.iterations, state=state)
    done, epoch, start = 0, 0, time.perf_counter()
    while done < args.iterations:
        loader.set_epoch(epoch)
        for images, labels in loader:
            if cuda:
                images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
                loss = torch.nn.functional.cross_entropy(net(images), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                torch.cuda.synchronize()
            else:
                emulate_step(step_s, gpu_ids)
            done += 1
            if done >= args.iterations:
                break
        epoch += 1
    elapsed = time.perf_counter() - start
    print(f"trained {args.model}: {done} iterations of {args.batch_size} in {elapsed:.1f} s "
          f"({done * args.batch_size / elapsed:.1f} samples/s)", flush=True)
    job.finish(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
