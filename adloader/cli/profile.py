"""``adloader profile``: measure this machine's L(d) and step times, write samples and a profile.

Writes ``OUTDIR/samples.csv`` (both kinds of samples, for ``adloader model fit``) and
``OUTDIR/profile.json`` (for ``adloader sim --profile``); with ``--contention`` the profile also
holds the contention surface, k loading pipelines side by side (``loading_surface``, replayed by
``adloader sim --truth measured``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from adloader.device.device_profile import DeviceProfile, save_profile
from adloader.errors import InputError
from adloader.scheduling.model.samples import LoadingSample, TrainingSample
from adloader.workloads import contention, measure
from adloader.workloads.dataset import SyntheticJPEGDataset
from adloader.workloads.samplefile import write_samples

from . import _output

# Settings when a flag is not given: a full run (minutes) and --quick (seconds, for tests).
FULL = {"batches": 20, "rounds": 3, "batch_size": 32, "images": 256, "steps": 5, "warmup": 2,
        "max_jobs": 3, "window": 1.5}  # fmt: skip
QUICK = {"batches": 3, "rounds": 1, "batch_size": 8, "images": 16, "steps": 2, "warmup": 1,
         "max_workers": 3, "models": ["smResnet20"], "train_batches": [2],
         "window": 0.3}  # fmt: skip
CPU_NOTICE = "no GPU: μ (training rate) measured on the CPU as a stand-in for a GPU step"


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"{flag}: expected positive integers, got {text!r}")
    return values


def _settings(args: argparse.Namespace, device: str) -> dict:
    """Resolve flags: given value, else the --quick or full default."""
    base = dict(FULL, **QUICK) if args.quick else dict(FULL)
    models, batches = measure.default_training(device)
    base.setdefault("max_workers", 2 * measure.logical_cores())
    base.setdefault("models", list(models))
    base.setdefault("train_batches", list(batches))
    out = dict(base)
    for key in ("batches", "rounds", "batch_size", "images", "steps", "max_workers"):
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                raise InputError(f"--{key.replace('_', '-')} must be at least 1, got {value}")
            out[key] = value
    if args.models:
        out["models"] = [m.strip() for m in args.models.split(",") if m.strip()]
        if not out["models"]:
            raise InputError(f"--models: expected comma-separated model names, got {args.models!r}")
    if args.train_batches:
        out["train_batches"] = _int_list(args.train_batches, "--train-batches")
    out["data"] = Path(args.data) if args.data else Path(args.out) / "images"
    out["grid"] = _grid(args, out)
    return out


def _grid(args: argparse.Namespace, cfg: dict) -> list[tuple[int, ...]]:
    """The contention grid (``[]`` without ``--contention``): --grid as given, else
    ``contention.default_grid`` up to --max-workers in all, k = 1..--max-jobs; checked."""
    if not args.contention:
        for flag, value in (("--grid", args.grid), ("--max-jobs", args.max_jobs),
                            ("--window", args.window)):
            if value is not None:
                raise InputError(f"{flag} shapes the contention surface: give --contention too")
        return []
    if args.window is not None:
        if not args.window > 0:
            raise InputError(f"--window must be above 0 seconds, got {args.window}")
        cfg["window"] = args.window
    if args.grid is not None:
        if args.max_jobs is not None:
            raise InputError("--grid and --max-jobs: give one (--grid lists every point)")
        return contention.parse_grid(args.grid)
    if args.max_jobs is not None:
        if args.max_jobs < 1:
            raise InputError(f"--max-jobs must be at least 1, got {args.max_jobs}")
        cfg["max_jobs"] = args.max_jobs
    return contention.check_grid(
        contention.default_grid(cfg["max_workers"], cfg["max_jobs"]), "--contention")


def _loading_table(loading: list[LoadingSample]) -> Table:
    table = Table(title="Node loading rate L(d) (one job owns all d workers)")
    table.add_column("d workers", justify="right")
    table.add_column("L(d) samples/s", justify="right")
    table.add_column("per worker", justify="right")
    table.add_column("vs d=1", justify="right")
    first = loading[0].loading_rate / loading[0].node_workers
    for s in loading:
        table.add_row(
            str(s.node_workers),
            f"{s.loading_rate:.1f}",
            f"{s.loading_rate / s.node_workers:.1f}",
            f"{s.loading_rate / first:.2f}x",
        )
    return table


def _surface_table(profile: DeviceProfile) -> Table:
    table = Table(title="Contention surface: pipelines side by side, each its own process")
    for col in ("workers", "samples/s each", "Σ samples/s", "L(D) alone", "Σ / L(D)"):
        table.add_column(col, justify="right")
    for p in profile.loading_surface:
        alone = profile.node_loading_rate(sum(p.workers))
        table.add_row(",".join(map(str, p.workers)), ", ".join(f"{r:.1f}" for r in p.rates),
                      f"{sum(p.rates):.1f}", f"{alone:.1f}",
                      f"{sum(p.rates) / alone:.2f}" if alone > 0 else "—")
    return table


def _training_table(training: list[TrainingSample], profile: DeviceProfile, device: str) -> Table:
    table = Table(title=f"Step time 1/μ on {device} (forward + backward + SGD, 224x224)")
    for col in ("model", "b", "f GFLOPs", "M (M params)", "step ms", "eq. 6 fit ms", "samples/s"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for s in training:
        fit = profile.step_time(s.batch_size, s.flops_g, s.params_m, s.gpus)
        table.add_row(
            s.model, str(s.batch_size), f"{s.flops_g:.3f}", f"{s.params_m:.3f}",
            f"{s.step_s * 1000:.1f}", f"{fit * 1000:.1f}", f"{s.batch_size / s.step_s:.1f}",
        )  # fmt: skip
    return table


def profile_command(args: argparse.Namespace) -> int:
    from adloader import models as zoo

    console = _output.console()
    device = measure.default_device()
    cfg = _settings(args, device)
    for name in cfg["models"]:
        zoo.features(name)  # an unknown model is an InputError before anything is measured
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out}: cannot create the output folder: {exc.strerror}") from None

    workers = list(range(1, cfg["max_workers"] + 1))
    console.print(f"[bold]adloader profile[/] on {measure.device_text()}")
    console.print(
        f"loading: {cfg['images']} JPEG files (256x256, in {cfg['data']}), decoded and augmented "
        f"to 224x224, batch {cfg['batch_size']}, {cfg['batches']} timed batches for each "
        f"d = 1..{cfg['max_workers']} DataLoader workers (fork), median of {cfg['rounds']} rounds"
    )
    if cfg["grid"]:
        console.print(
            f"contention: {len(cfg['grid'])} points of pipelines side by side (each a process "
            f"with its own DataLoader, fork), workers "
            f"{'; '.join(','.join(map(str, p)) for p in cfg['grid'])}, timed together over "
            f"{cfg['window']:g} s, median of {cfg['rounds']} rounds")
    console.print(
        f"training: {', '.join(cfg['models'])} at batch {cfg['train_batches']} on {device}, "
        f"median of {cfg['steps']} steps"
    )
    if not device.startswith("cuda"):
        console.print(f"[yellow]{CPU_NOTICE}[/]")

    with console.status("writing JPEG files"):
        dataset = SyntheticJPEGDataset(
            cfg["data"],
            size=(2 * cfg["max_workers"] + cfg["batches"]) * cfg["batch_size"],
            images=cfg["images"],
        )
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn())  # fmt: skip
    total = ((len(workers) + len(cfg["grid"])) * cfg["rounds"]
             + len(cfg["models"]) * len(cfg["train_batches"]))
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("loading L(d)", total=total)

        def step(message: str) -> None:
            bar.console.print(f"  {message}")
            bar.advance(task)

        measured = measure.measure_loading(
            dataset, workers, cfg["batch_size"], cfg["batches"], rounds=cfg["rounds"],
            progress=step, every_round=True,
        )  # fmt: skip
        loading = measure.median_loading(measured)
        surface = []
        if cfg["grid"]:
            bar.update(task, description="side by side")
            many = SyntheticJPEGDataset(cfg["data"], size=100_000, images=cfg["images"])
            surface = contention.measure_contention(
                many, cfg["grid"], cfg["batch_size"], cfg["window"], cfg["rounds"],
                progress=step)  # fmt: skip
        bar.update(task, description="training 1/μ")
        training = measure.measure_training(
            cfg["models"], cfg["train_batches"], cfg["steps"], device,
            warmup=cfg["warmup"], progress=step,
        )  # fmt: skip
    if not training:
        raise InputError("no training step could be timed (out of GPU memory at every batch?)")

    profile = measure.profile_from_samples(
        args.name, training, loading, cores=measure.logical_cores(),
        extra={"loading_batch_size": cfg["batch_size"], "training_device": device},
        training_device=device, surface=surface,
    )  # fmt: skip
    write_samples(out / "samples.csv", [*training, *measured])  # every round, for the TPM
    save_profile(profile, out / "profile.json")

    console.print(_loading_table(loading))
    if profile.loading_surface:
        console.print(_surface_table(profile))
    console.print(_training_table(training, profile, device))
    alpha = ", ".join(f"{a:.3g}" for a in profile.alpha)
    console.print(f"eq. 6 fit: α = ({alpha})")
    if not device.startswith("cuda"):
        console.print(f"[yellow]{CPU_NOTICE}[/]")
    console.print(f"wrote {out / 'samples.csv'} and {out / 'profile.json'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "profile",
        help="measure this machine's loading rate L(d) and step times into a device profile",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("-o", "--out", default="./profile-out",
                   help="output folder (default ./profile-out)")  # fmt: skip
    p.add_argument("--max-workers", type=int, default=None,
                   help="measure d = 1..N loader workers (default 2 x logical cores)")  # fmt: skip
    p.add_argument("--batches", type=int, default=None,
                   help=f"timed batches per worker count (default {FULL['batches']})")  # fmt: skip
    p.add_argument("--rounds", type=int, default=None,
                   help=f"sweeps over d, the median kept (default {FULL['rounds']})")  # fmt: skip
    p.add_argument("--batch-size", type=int, default=None,
                   help=f"loading batch size (default {FULL['batch_size']})")  # fmt: skip
    p.add_argument("--images", type=int, default=None,
                   help=f"JPEG files to cycle over (default {FULL['images']})")  # fmt: skip
    p.add_argument("--data", default=None,
                   help="folder of the JPEG files (default OUTDIR/images)")  # fmt: skip
    p.add_argument("--models", default=None,
                   help="comma-separated zoo models (default depends on the device)")  # fmt: skip
    p.add_argument("--train-batches", default=None,
                   help="comma-separated per-GPU batches (CPU 4,8,16; GPU 32..256)")  # fmt: skip
    p.add_argument("--steps", type=int, default=None,
                   help=f"timed training steps, median kept (default {FULL['steps']})")  # fmt: skip
    p.add_argument("--name", default="measured",
                   help="the profile's name (default measured)")  # fmt: skip
    p.add_argument("--contention", action="store_true", default=False,
                   help="also measure the contention surface: k loading pipelines side by "
                        "side, each its own process and DataLoader (the `measured` truth)")
    p.add_argument("--max-jobs", type=int, default=None,
                   help=f"with --contention: k = 1..N pipelines on the default grid (equal "
                        f"splits and one unequal split up to --max-workers in all; default "
                        f"{FULL['max_jobs']})")  # fmt: skip
    p.add_argument("--grid", default=None, metavar="POINTS",
                   help="with --contention: the points to measure instead, e.g. 2,2;4,1,1 "
                        "(';' between points, ',' between pipelines' workers)")  # fmt: skip
    p.add_argument("--window", type=float, default=None,
                   help=f"with --contention: seconds each point is timed (default "
                        f"{FULL['window']:g})")  # fmt: skip
    p.add_argument("--quick", action="store_true",
                   default=False,
                   help="small settings that finish in seconds (for tests)")  # fmt: skip
    p.set_defaults(func=profile_command)
