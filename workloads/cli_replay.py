"""`adloader replay TRACE`: submit a trace's jobs to a running daemon at their arrival times."""

from __future__ import annotations

from rich.progress import Progress

from adloader.cli import env_default
from adloader.workloads.cli_model import wide_console
from adloader.workloads.cli_sim import result_line, result_table
from adloader.workloads.files import write_json
from adloader.workloads.plot import plot_timelines
from adloader.workloads.replay import replay
from adloader.workloads.trace import load_trace


def _replay(args) -> int:
    from adloader.daemon.client_cli import request

    trace = load_trace(args.trace)
    console = wide_console()
    with Progress(console=console, transient=True) as progress:
        result = replay(trace, lambda m, p, **kw: request(args, m, p, **kw),
                        time_scale=args.time_scale, iterations_scale=args.iterations_scale,
                        step_scale=args.step_scale, crop=args.crop, data=args.data,
                        timeout_s=args.timeout, progress=progress)
    console.print(result_table(result, f"replay of {trace.name or args.trace} (live)"))
    console.print(result_line(result))
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot_timelines([result], args.plot)
        console.print(f"wrote {args.plot}")
    return 0


def add_replay_arguments(p) -> None:
    p.add_argument("--time-scale", type=float, default=float(env_default("time_scale", 1.0)),
                   help="multiply arrival times (0.1 = ten times faster)")
    p.add_argument("--iterations-scale", type=float, default=1.0,
                   help="multiply every job's iterations (shorter runs)")
    p.add_argument("--step-scale", type=float, default=1.0,
                   help="multiply emulated GPU step times (no GPU here)")
    p.add_argument("--crop", type=int, default=224, help="training crop of the JPEG pipeline")
    p.add_argument("--data", default=env_default("data", ""), help="folder of the JPEG files")
    p.add_argument("--timeout", type=float, default=3600.0)


def register(sub) -> None:
    from adloader.daemon.client_cli import common_parser

    p = sub.add_parser("replay", parents=[common_parser()],
                       help="replay a trace against a running daemon")
    p.add_argument("trace", help="trace JSON or bundled name")
    add_replay_arguments(p)
    p.add_argument("--json", default=None, help="write the result as JSON")
    p.add_argument("--plot", default=None, help="write the timeline PNG")
    p.set_defaults(func=_replay)
