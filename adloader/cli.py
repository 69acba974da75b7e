"""`adloader` command line: one sub-command per concept, each registered by its module.

COMMANDS maps each command to the module that implements it and a one-line help. Only the
chosen command's module is imported (``adloader jobs`` never loads torch or scikit-learn);
``adloader --help`` imports none. Every module exposes ``register(subparsers)``, which adds
its parsers and sets ``func`` (called with the parsed namespace, returns an exit code).
Every flag's default may come from an environment variable ``ADLOADER_<FLAG>`` (see
:func:`env_default`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from adloader.errors import DaemonBusy, InputError, StorageError

COMMANDS: dict[str, tuple[str, str]] = {
    "daemon": ("adloader.daemon.cli_daemon", "run the node daemon (REST + ZeroMQ control channel)"),
    "run": ("adloader.daemon.cli_daemon", "run a training command as a job of the daemon"),
    "submit": ("adloader.daemon.client_cli", "submit a training job to the daemon"),
    "jobs": ("adloader.daemon.client_cli", "list the daemon's jobs"),
    "cancel": ("adloader.daemon.client_cli", "cancel a job"),
    "pause": ("adloader.daemon.client_cli", "suspend a running job"),
    "resume": ("adloader.daemon.client_cli", "resume a paused job"),
    "logs": ("adloader.daemon.client_cli", "a job's output"),
    "replay": ("adloader.workloads.cli_replay", "replay a trace against a running daemon"),
    "demo": ("adloader.workloads.cli_sim", "a live daemon running real jobs, then the static mix"),
    "sim": ("adloader.workloads.cli_sim", "simulate a trace on one node under a policy"),
    "bench": ("adloader.workloads.cli_sim", "benchmarks with ratios against a same-run baseline"),
    "workload": ("adloader.workloads.cli_workload", "generate, check and list workload traces"),
    "profile": ("adloader.workloads.cli_profile", "measure this machine's loading and steps"),
    "model": ("adloader.workloads.cli_model", "throughput prediction model: samples, fit"),
    "models": ("adloader.models.commands", "the model zoo and its FLOPs/parameter table"),
}


def env_default(flag: str, default: object = None) -> object:
    """The default of ``--flag``: the environment's ``ADLOADER_FLAG`` if set, else ``default``."""
    return os.environ.get("ADLOADER_" + flag.upper().replace("-", "_"), default)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with a known ``command``, only its module is imported and registered."""
    parser = argparse.ArgumentParser(
        prog="adloader",
        description="Share a node's data-loading workers among its training jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command][0]).register(sub)
    else:
        for name, (_, text) in COMMANDS.items():
            sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (InputError, StorageError, DaemonBusy) as exc:
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        print(f"adloader: error: {lines[-1] if len(lines) > 1 else lines[0]}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
