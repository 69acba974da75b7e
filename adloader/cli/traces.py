"""``adloader workload generate | check | list``: make, validate and list workload traces."""

from __future__ import annotations

import argparse
import json
import sys

from rich.table import Table

from adloader.sim.generator import NAMED_MIXES, generate
from adloader.sim.trace import Trace, bundled_traces, load_trace, save_trace

from . import _output


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("workload", help="generate, check and list workload traces")
    parser.set_defaults(func=lambda _args: _help(parser))
    inner = parser.add_subparsers(dest="workload_command", metavar="ACTION")

    gen = inner.add_parser("generate", help="a random trace with Poisson arrivals")
    gen.add_argument("--jobs", type=int, default=8, help="number of jobs")
    gen.add_argument("--seed", type=int, default=0, help="random seed")
    gen.add_argument(
        "--mix",
        default="paper",
        help=f"{', '.join(NAMED_MIXES)}, or weights like Resnet18:2,smResnet20:1",
    )
    gen.add_argument(
        "--rate",
        type=float,
        default=1 / 60,
        help="arrivals per second (Poisson rate; default one a minute)",
    )
    gen.add_argument("--gpus", type=int, default=4, help="GPUs on the node")
    gen.add_argument(
        "-o", "--output", default=None, help="write here (default: JSON to stdout)"
    )
    gen.set_defaults(func=_generate)

    check = inner.add_parser("check", help="validate a trace file or bundled trace")
    check.add_argument("trace", help="trace JSON path or bundled name")
    check.add_argument(
        "--gpus", type=int, default=None, help="check jobs fit a node of G GPUs"
    )
    check.set_defaults(func=_check)

    listing = inner.add_parser("list", help="the bundled traces")
    listing.set_defaults(func=_list)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def trace_table(trace: Trace) -> Table:
    """A rich table of a trace's jobs."""
    where = f", {trace.gpus}-GPU node" if trace.gpus else ""
    table = Table(title=f"{trace.name or 'trace'}: {len(trace.jobs)} jobs{where}")
    for col in ("job", "model", "batch", "gpus", "gpu ids", "iters", "workers", "arrival s"):
        table.add_column(col, justify="left" if col in ("job", "model") else "right")
    for job in trace.jobs:
        table.add_row(
            job.name,
            job.model,
            str(job.batch_size),
            str(job.gpus),
            ",".join(map(str, job.gpu_ids)) if job.gpu_ids is not None else "-",
            str(job.iterations),
            str(job.workers) if job.workers is not None else "-",
            f"{job.arrival_s:g}",
        )
    return table


def _generate(args: argparse.Namespace) -> int:
    trace = generate(args.jobs, args.seed, args.mix, args.rate, args.gpus)
    if not args.output:
        json.dump(trace.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    save_trace(trace, args.output)
    console = _output.console()
    console.print(trace_table(trace))
    console.print(f"wrote {args.output}")
    return 0


def _check(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace, node_gpus=args.gpus)
    console = _output.console()
    console.print(trace_table(trace))
    if trace.description:
        console.print(trace.description)
    console.print(f"ok: {len(trace.jobs)} jobs")
    return 0


def _list(_args: argparse.Namespace) -> int:
    table = Table(title="bundled traces")
    for col in ("name", "jobs", "gpus", "description"):
        table.add_column(col)
    for name in bundled_traces():
        trace = load_trace(name)
        gpus = str(trace.gpus) if trace.gpus else "-"
        table.add_row(name, str(len(trace.jobs)), gpus, trace.description)
    _output.console().print(table)
    return 0
