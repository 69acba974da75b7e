"""The reference training job: a real PyTorch loop over real JPEGs, under the daemon.

    python -m adloader.workloads.train --model smResnet20 --batch-size 32 --iterations 60

Loading is real CPU work in the ElasticDataLoader's workers (JPEG decode, random resized
crop, flip, normalisation). On CUDA the step is real training of the zoo model. Without a
GPU the step is emulated: the job sleeps for the step time the device profile gives for
its model and batch (eq. 6), holding a lock per emulated GPU, so jobs that share a GPU
take turns — one GPU's steps serialised. On the emulated GPU node
(``adloader.workloads.emulated_gpu``, set by the bench through the environment) it also
copies each batch and spends the step's launch CPU, as a real trainer does. The two lines
that put it under the daemon are ``ElasticDataLoader(...)`` and ``attach(loader, ...)``.

The baselines users run without adloader are the same job on torch's own
``torch.utils.data.DataLoader``, not under any daemon: ``--loader torch --workers N`` (a fixed
``num_workers``) or ``--loader torch --autotune`` (``adloader.scheduling.tuners.autotune``: the job
tunes its own count). ``--report FILE`` writes what the job measured of itself as one JSON
object: its training loop's start and end (wall clock), rate, time blocked on the loader,
workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from adloader import env as names
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader
from adloader.device.device_profile import load_profile
from adloader.errors import InputError
from adloader.host.atomic import atomic_path
from adloader.models import build, features
from adloader.scheduling.tuners.autotune import Autotuner
from adloader.scheduling.tuners.climb import ClimbingTuner
from adloader.workloads.dataset import SyntheticJPEGDataset, ensure_images
from adloader.workloads.emulated_gpu import EmulatedTrainer, emulate_step


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="adloader-train", description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--batch-size", type=int, default=32, help="global batch B")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--workers", type=int, default=1, help="until the daemon says otherwise")
    p.add_argument("--profile", default=os.environ.get(names.STEP_PROFILE, "paper"),
                   help="device profile for emulated steps (no GPU)")
    p.add_argument("--step-scale", type=float,
                   default=float(os.environ.get(names.STEP_SCALE, "1")),
                   help="multiply emulated step times (to scale a mix to this machine)")
    p.add_argument("--data", default=os.environ.get(names.DATA, ""))
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loader", choices=("elastic", "torch"), default="elastic",
                   help="torch: torch's own DataLoader, no daemon (a baseline)")
    p.add_argument("--autotune", action="store_true",
                   help="with --loader torch: the job tunes its own num_workers")
    p.add_argument("--climb", type=int, default=0, metavar="BUDGET",
                   help="with --loader elastic and no daemon: the job climbs its own "
                        "num_workers from --workers, in-process, within BUDGET workers "
                        "(adloader.scheduling.tuners.climb)")
    p.add_argument("--report", default="", help="write what the job measured as JSON here")
    return p.parse_args(argv)


class _From(torch.utils.data.Sampler):
    """An epoch's permutation from ``start`` on: torch's DataLoader rebuilt mid-epoch with
    another ``num_workers`` (what a user's own tuner has to do) goes on where it was."""

    def __init__(self, order: list[int], start: int):
        self.order, self.start = order, start

    def __iter__(self):
        return iter(self.order[self.start:])

    def __len__(self) -> int:
        return len(self.order) - self.start


class TorchBaseline:
    """torch's own DataLoader with a fixed ``num_workers``, or tuned by the job itself
    (``Autotuner``): what a user runs without adloader. Iterates batches of one epoch."""

    def __init__(self, dataset, batch_size: int, workers: int, seed: int, autotune: bool):
        self.dataset, self.batch_size, self.seed = dataset, batch_size, seed
        cores = len(os.sched_getaffinity(0))
        self.tuner = Autotuner(most=cores) if autotune else None
        self.workers = self.tuner.workers if self.tuner else workers
        self.history: list[tuple[int, int]] = [(0, self.workers)]  # (batch, workers)
        self.changed_at: list[tuple[float, int]] = [(time.time(), self.workers)]  # wall clock

    def _loader(self, order: list[int], start: int):
        return iter(torch.utils.data.DataLoader(
            self.dataset, batch_size=self.batch_size, sampler=_From(order, start),
            num_workers=self.workers, drop_last=True,
            multiprocessing_context="fork" if self.workers else None))

    def epoch(self, epoch: int):
        """(batch, seconds blocked on the loader) of one epoch; send each step's seconds back."""
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.dataset), generator=g).tolist()
        taken = 0
        while True:  # one pool; another where it stopped when the tuner changes the count
            for batch, wait in _timed(self._loader(order, taken * self.batch_size)):
                taken += 1
                step = yield batch, wait
                want = self.workers if self.tuner is None else \
                    self.tuner.observe(self.batch_size, wait, step or 0.0)
                if want != self.workers:
                    self.workers = want
                    self.history.append((taken, want))
                    self.changed_at.append((time.time(), want))
                    break
            else:
                return


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
    baseline = args.loader == "torch"
    if args.autotune and not baseline:
        print("adloader-train: error: --autotune goes with --loader torch", file=sys.stderr)
        return 2
    if args.climb and baseline:
        print("adloader-train: error: --climb goes with --loader elastic", file=sys.stderr)
        return 2
    if baseline:
        loader = TorchBaseline(dataset, args.batch_size, args.workers, args.seed,
                               args.autotune)
    else:
        loader = ElasticDataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                   num_workers=args.workers, seed=args.seed, drop_last=True)
    cuda = torch.cuda.is_available()
    net = optimizer = None
    if cuda:
        net = build(args.model).cuda()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    gpu_ids = [int(g) for g in os.environ.get(names.GPU_IDS, "0").split(",") if g != ""]
    step_s, trainer = 0.0, None
    if not cuda:  # the faithful GPU node, when the bench asks for it (emulated_gpu)
        trainer = EmulatedTrainer.from_env(gpu_ids, args.model)
    if not cuda and trainer is None:
        profile = load_profile(args.profile)
        per_gpu = args.batch_size / args.gpus
        step_s = args.step_scale * profile.step_time(per_gpu, feat.flops_g, feat.params_m,
                                                     args.gpus)
    state = (lambda: {"model": net.state_dict(), "optimizer": optimizer.state_dict(),
                      "loader": loader.state_dict()}) if cuda else (
        lambda: {"loader": loader.state_dict()})
    climber = ClimbingTuner(start=args.workers, budget=args.climb) if args.climb else None
    if climber is not None and climber.workers != args.workers:
        loader.resize(climber.workers)
    tuned = [(time.time(), args.workers)]  # the climber's counts: (wall clock, workers)
    job = None if baseline or climber is not None else attach(
        loader, model=args.model, batch_size=args.batch_size, gpus=args.gpus,
        iterations=args.iterations, state=state)
    done, epoch, waited = 0, 0, 0.0
    start_wall, start = time.time(), time.perf_counter()
    progress, marked = [], start  # (wall clock, batches trained) every PROGRESS_S
    if baseline:
        loader.changed_at[0] = (start_wall, loader.workers)
    while done < args.iterations:
        if baseline:
            batches = loader.epoch(epoch)
        else:
            loader.set_epoch(epoch)
            batches = _timed(loader)
        step_s_taken = None
        while True:
            try:
                (images, labels), wait = batches.send(step_s_taken)
            except StopIteration:
                break
            waited += wait
            t_step = time.perf_counter()
            if cuda:
                images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
                loss = torch.nn.functional.cross_entropy(net(images), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                torch.cuda.synchronize()
            elif trainer is not None:
                trainer.train((images, labels))
            else:
                emulate_step(step_s, gpu_ids)
            step_s_taken = time.perf_counter() - t_step
            if climber is not None:
                want = climber.observe(args.batch_size, wait, step_s_taken)
                if want != tuned[-1][1]:
                    loader.resize(want)
                    tuned.append((time.time(), want))
            done += 1
            if done == 1 or t_step - marked >= PROGRESS_S:
                marked = t_step
                progress.append((round(start_wall + t_step + step_s_taken - start, 3), done))
            if done >= args.iterations:
                batches.close()
                break
        epoch += 1
    elapsed = time.perf_counter() - start
    print(f"trained {args.model}: {done} iterations of {args.batch_size} in {elapsed:.1f} s "
          f"({done * args.batch_size / elapsed:.1f} samples/s)", flush=True)
    if args.report:
        history = loader.history if baseline else None
        _report(args.report, {"model": args.model, "loader": args.loader,
                              "autotune": args.autotune, "iterations": done,
                              "batch_size": args.batch_size, "start": start_wall,
                              "end": start_wall + elapsed, "elapsed_s": elapsed,
                              "rate": done * args.batch_size / elapsed, "wait_s": waited,
                              "workers": history,
                              "workers_at": loader.changed_at if baseline else (
                                  tuned if climber is not None else None),
                              "master_cpu_s": job.cpu_s() if job is not None else 0.0,
                              "master_gc_s": job.gc_s() if job is not None else 0.0,
                              "master_resize_cpu_s": job.resize_cpu_s() if job else 0.0,
                              "progress": [*progress, (round(start_wall + elapsed, 3), done)]})
    if job is not None:
        job.finish(0)
    return 0


PROGRESS_S = 0.5  # the report's progress: (time, batches trained) this often


def _timed(loader):
    """(batch, seconds blocked on the loader) of one pass over ``loader``."""
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            return
        yield batch, time.perf_counter() - t0


def _report(path: str, data: dict) -> None:
    with atomic_path(Path(path)) as tmp:
        Path(tmp).write_text(json.dumps(data))


if __name__ == "__main__":
    sys.exit(main())
