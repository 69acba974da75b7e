"""``adloader replay TRACE``: submit a trace's jobs to a running daemon at their arrival times
and collect what happened, in the simulator's result shape."""

from __future__ import annotations

from rich.progress import Progress

from . import _options, _output


def _replay(args) -> int:
    from adloader.sim.trace import load_trace
    from adloader.workloads.replay import replay

    trace = load_trace(args.trace)
    out = _output.console()
    with _options.client(args) as client, Progress(console=out, transient=True) as progress:
        result = replay(trace, client.request, time_scale=args.time_scale,
                        iterations_scale=args.iterations_scale, step_scale=args.step_scale,
                        crop=args.crop, data=args.data, timeout_s=args.timeout,
                        progress=progress)
    out.print(_output.result_table(result, f"replay of {trace.name or args.trace} (live)"))
    out.print(_output.result_line(result))
    _output.save(args.json, result)
    _output.plot(args.plot, [result])
    return 0


def register(sub) -> None:
    p = sub.add_parser("replay", parents=[_options.daemon_options()],
                       help="replay a trace against a running daemon")
    p.add_argument("trace", help="trace JSON or bundled name")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="multiply arrival times (0.1 = ten times faster)")
    p.add_argument("--iterations-scale", type=float, default=1.0,
                   help="multiply every job's iterations (shorter runs)")
    p.add_argument("--step-scale", type=float, default=1.0,
                   help="multiply emulated GPU step times (no GPU here)")
    p.add_argument("--crop", type=int, default=224, help="training crop of the JPEG pipeline")
    p.add_argument("--data", default="", help="folder of the JPEG files")
    p.add_argument("--timeout", type=float, default=3600.0)
    _options.output_options(p)
    p.set_defaults(func=_replay)
