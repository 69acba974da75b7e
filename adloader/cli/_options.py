"""Flag groups several commands share. A flag reads an environment variable only where one is
named here, explicitly (``adloader.env``): the daemon's address and token, and its settings
file; nothing else does, so two flags never collide on one variable."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from adloader import env
from adloader.errors import InputError


def daemon_options() -> argparse.ArgumentParser:
    """--url and --token-file, for every command that talks to the daemon."""
    from adloader.daemon.rest_client import DEFAULT_URL

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get(env.URL) or DEFAULT_URL,
                        help=f"the daemon's REST address (default {DEFAULT_URL}; {env.URL})")
    common.add_argument("--token-file", default=os.environ.get(env.TOKEN_FILE) or None,
                        help=f"bearer token file (default: the daemon's; {env.TOKEN_FILE}; "
                             f"{env.API_TOKEN} overrides it)")
    return common


def client(args: argparse.Namespace):
    """The DaemonClient for --url and --token-file."""
    from adloader.daemon.rest_client import DaemonClient

    return DaemonClient.from_environment(args.url, args.token_file)


def config_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=os.environ.get(env.CONFIG) or None,
                        help=f"the daemon's TOML settings file ({env.CONFIG})")


def sim_options(parser: argparse.ArgumentParser) -> None:
    """The simulated node: device profile, TPM, seed, cores, windows, reallocation cost."""
    from adloader.sim.simulator import LIVE_RESIZE_S

    parser.add_argument("--profile", default="paper",
                        help="bundled profile name or a profile JSON (adloader profile)")
    parser.add_argument("--model", default=None,
                        help="a fitted TPM JSON; default: fit one from the profile's samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cores", type=int, default=None,
                        help="loading workers of the node (default: the profile's)")
    parser.add_argument("--window", type=float, default=30.0,
                        help="arrival and completion buffer windows, seconds (paper: 30)")
    parser.add_argument("--prediction-error", type=float, default=0.0,
                        help="each job's predicted training rate off by up to ± this fraction "
                             "(robustness; the simulated truth is unchanged)")
    parser.add_argument("--realloc-cost", type=float, default=LIVE_RESIZE_S,
                        help="seconds a resized job stalls (default: adloader's live resize, "
                             f"{LIVE_RESIZE_S} s; the paper's pause-and-retrieve: 16)")


def counts(text: str) -> tuple[int, ...]:
    """An argparse type: ``N`` or ``N,M,...`` (worker counts, each >= 0)."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N,M,...; got {text!r}") from None
    if min(values) < 0:
        raise argparse.ArgumentTypeError(f"counts must be >= 0, got {text!r}")
    return values


def output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", default=None, help="write the result as JSON")
    parser.add_argument("--plot", default=None, help="write the timeline PNG")


def load_model(path: str | Path):
    """A fitted TPM from its JSON file (``adloader tpm fit -o``)."""
    from adloader.throughput import ThroughputModel

    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return ThroughputModel.from_json(data)


def simulation_setup(args: argparse.Namespace):
    """(profile, model, SimConfig) from the sim options."""
    from adloader.sim import synth
    from adloader.sim.device_profile import load_profile
    from adloader.sim.simulator import SimConfig

    if args.realloc_cost < 0:
        raise InputError("--realloc-cost must be at least 0")
    if args.cores is not None and args.cores < 1:
        raise InputError("--cores must be at least 1")
    error = getattr(args, "prediction_error", 0.0)
    if not 0.0 <= error < 1.0:
        raise InputError(f"--prediction-error must be in [0, 1), got {error}")
    profile = load_profile(args.profile)
    model = load_model(args.model) if args.model else synth.fitted_model(profile, args.seed)
    config = SimConfig(capacity=args.cores, arrival_window_s=args.window,
                       completion_window_s=args.window, realloc_cost_s=args.realloc_cost,
                       prediction_error=error, error_seed=args.seed)
    return profile, model, config
