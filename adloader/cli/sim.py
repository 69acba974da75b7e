"""``adloader sim TRACE`` (one trace on a simulated node) and ``adloader demo`` (the main job on
embedded defaults: a real daemon runs real jobs, then the paper's static mix is simulated)."""

from __future__ import annotations

import argparse
from pathlib import Path

from adloader.errors import InputError
from adloader.scheduling.policies.registry import DEFAULT_POLICY, POLICIES, get_policy

from . import _options, _output


def _sim(args: argparse.Namespace) -> int:
    from adloader.sim.simulator import simulate
    from adloader.sim.trace import load_trace

    profile, model, config = _options.simulation_setup(args)
    trace = load_trace(args.trace, node_gpus=profile.gpus)
    config.policy, config.realloc = args.policy, not args.no_realloc
    config.closed_loop = args.closed_loop
    result = simulate(trace, profile, model, config).to_json()
    out = _output.console()
    out.print(_output.result_table(result, f"{trace.name or args.trace}: {args.policy}, "
                                           f"profile {profile.name}"))
    out.print(_output.result_line(result))
    _output.save(args.json, result)
    _output.plot(args.plot, [result])
    return 0


def _demo(args: argparse.Namespace) -> int:
    """A real daemon replays the small-mix trace with real jobs over REST; then the static mix
    runs in the simulator under every policy (``adloader bench static``)."""
    import tempfile

    from adloader.bench.sim.report import static_benchmark
    from adloader.remote.process import DaemonProcess
    from adloader.sim.trace import load_trace
    from adloader.workloads.replay import replay

    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = _output.console()
    work = Path(tempfile.mkdtemp(prefix="adloader-demo-"))
    daemon_args = ["--capacity", str(args.capacity), "--arrival-window", "2",
                   "--completion-window", "2", "--heartbeat", "0.5"]
    with out.status("live: starting a daemon and replaying the small-mix trace"), \
            DaemonProcess(work / "state", daemon_args) as daemon:
        result = replay(load_trace("small-mix"), daemon.call, crop=112, images=64,
                        data=str(work / "jpeg"), timeout_s=600)
    out.print(_output.result_table(result, f"live: small-mix on a real daemon "
                                           f"({result['cores']} workers, policy "
                                           f"{result['policy']})"))
    out.print(_output.result_line(result))
    _output.save(out_dir / "live.json", result)
    _output.plot(out_dir / "live-timeline.png", [result], "adloader demo: live daemon")
    out.print(f"wrote {out_dir / 'live.json'}\n")
    return static_benchmark(args.profile, args.seed, json_path=out_dir / "static.json",
                            plot_path=out_dir / "static-timeline.png")


def _policy(name: str) -> str:
    """A registered policy name, or ``fair:α`` with 0 ≤ α ≤ 1."""
    try:
        get_policy(name)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name


def register(sub) -> None:
    p = sub.add_parser("sim", help="simulate a trace on one node under a policy")
    p.add_argument("trace", help="trace JSON or bundled name (paper-static, paper-dynamic)")
    p.add_argument("--policy", default=DEFAULT_POLICY, type=_policy,
                   help=f"{', '.join(sorted(POLICIES))}, or fair:α (default {DEFAULT_POLICY})")
    p.add_argument("--no-realloc", action="store_true",
                   help="running jobs keep their workers; new ones get what is free")
    p.add_argument("--closed-loop", action="store_true",
                   help="the policy under the daemon's closed loop (measured starts and "
                        "moves, the guard: adloader.scheduling.closed_loop); default: each "
                        "plan applied as planned")
    _options.sim_options(p)
    _options.output_options(p)
    p.set_defaults(func=_sim)
    p = sub.add_parser("demo", help="a live daemon running real jobs, then the static mix "
                                    "under every policy in the simulator")
    p.add_argument("--capacity", type=int, default=4, help="live: the daemon's workers")
    p.add_argument("--profile", default="paper")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", default="adloader-demo")
    p.set_defaults(func=_demo)
