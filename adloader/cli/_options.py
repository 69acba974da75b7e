"""Flag groups several commands share. A flag reads an environment variable only where one is
named here, explicitly (``adloader.env``): the daemon's address and token, and its settings
file; nothing else does, so two flags never collide on one variable."""

from __future__ import annotations

import argparse
import os

from adloader import env


def daemon_options() -> argparse.ArgumentParser:
    """--url and --token-file, for every command that talks to the daemon."""
    from adloader.remote.rest_client import DEFAULT_URL

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get(env.URL) or DEFAULT_URL,
                        help=f"the daemon's REST address (default {DEFAULT_URL}; {env.URL})")
    common.add_argument("--token-file", default=os.environ.get(env.TOKEN_FILE) or None,
                        help=f"bearer token file (default: the daemon's; {env.TOKEN_FILE}; "
                             f"{env.API_TOKEN} overrides it)")
    return common


def client(args: argparse.Namespace):
    """The DaemonClient for --url and --token-file."""
    from adloader.remote.rest_client import DaemonClient

    return DaemonClient.from_environment(args.url, args.token_file)


def config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=os.environ.get(env.CONFIG) or None,
                        help=f"the daemon's TOML settings file ({env.CONFIG})")


SIM_FLAGS = ("--profile", "--model", "--seed", "--cores", "--window", "--prediction-error",
             "--realloc-cost", "--truth")


def sim_options(parser: argparse.ArgumentParser, only: tuple[str, ...] = SIM_FLAGS) -> None:
    """The simulated node: device profile, TPM, seed, cores, windows, reallocation cost, the
    ground truth (those of them named in ``only``; the others keep their defaults in
    ``simulation_setup``)."""
    from adloader.sim.simulator import LIVE_RESIZE_S
    from adloader.sim.truth import DEFAULT_TRUTH, TRUTHS

    if set(only) - set(SIM_FLAGS):
        raise ValueError(f"not simulation flags: {sorted(set(only) - set(SIM_FLAGS))}")
    flags = {
        "--profile": dict(default="paper",
                          help="bundled profile name or a profile JSON (adloader profile)"),
        "--model": dict(default=None,
                        help="a fitted TPM JSON; default: fit one from the profile's samples"),
        "--seed": dict(type=int, default=0),
        "--cores": dict(type=int, default=None,
                        help="loading workers of the node (default: the profile's)"),
        "--window": dict(type=float, default=30.0,
                         help="arrival and completion buffer windows, seconds (paper: 30)"),
        "--prediction-error": dict(type=float, default=0.0,
                                   help="each job's predicted training rate off by up to ± "
                                        "this fraction (robustness; the simulated truth is "
                                        "unchanged)"),
        "--realloc-cost": dict(type=float, default=LIVE_RESIZE_S,
                               help="seconds a resized job stalls (default: adloader's live "
                                    f"resize, {LIVE_RESIZE_S} s; the paper's "
                                    "pause-and-retrieve: 16)"),
        "--truth": dict(choices=TRUTHS, default=DEFAULT_TRUTH,
                        help="the simulated ground truth of step times and GPU sharing: model "
                             "(the profile's eq. 6 and perfect time-slicing, the TPM's own forms;"
                             " an ablation), published (published GPU measurements; "
                             "adloader/sim/truths), measured (the profile's contention "
                             "surface for loading: adloader profile --contention), gpu-node "
                             "(model, each job capped at the intake ceiling a GPU node "
                             "measured: adloader/sim/gpu_node.py) "
                             f"(default {DEFAULT_TRUTH})"),
    }
    for flag in SIM_FLAGS:
        if flag in only:
            parser.add_argument(flag, **flags[flag])


def seconds(text: str) -> float:
    """An argparse type: a duration in seconds, > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"seconds must be > 0, got {text!r}")
    return value


def counts(text: str) -> tuple[int, ...]:
    """An argparse type: ``N`` or ``N,M,...`` (worker counts, each >= 0)."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N,M,...; got {text!r}") from None
    if min(values) < 0:
        raise argparse.ArgumentTypeError(f"counts must be >= 0, got {text!r}")
    return values


def json_option(parser: argparse.ArgumentParser) -> None:
    """``--out FILE``: the result as JSON, in a file (``--json FILE``, its first name, kept)."""
    parser.add_argument("--out", "--json", dest="json", default=None, metavar="FILE",
                        help="write the result as JSON to FILE (--json FILE: the same)")


def output_options(parser: argparse.ArgumentParser) -> None:
    json_option(parser)
    parser.add_argument("--plot", default=None, help="write the timeline PNG")


def simulation_setup(args: argparse.Namespace):
    """(profile, model, SimConfig) from the sim options (``adloader.bench.sim.report.setup``); a
    flag the command does not take keeps its default."""
    from adloader.bench.sim import report

    return report.setup(args.profile, getattr(args, "model", None), getattr(args, "seed", 0),
                        getattr(args, "cores", None), getattr(args, "window", 30.0),
                        getattr(args, "realloc_cost", None),
                        getattr(args, "prediction_error", 0.0), getattr(args, "truth", "model"))
