"""`adloader` command line: one sub-command per concept, each registered by its module.

Every module in COMMANDS exposes ``register(subparsers)``, which adds its parser and sets
``func`` (called with the parsed namespace, returns an exit code). Every flag's default
may come from an environment variable ``ADLOADER_<FLAG>`` (see :func:`env_default`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from adloader.errors import DaemonBusy, InputError, StorageError

COMMANDS = (
    "adloader.models.commands",  # models list | features
    "adloader.workloads.cli_workload",  # workload generate | check
    "adloader.workloads.cli_profile",  # profile
    "adloader.workloads.cli_model",  # model samples | fit
    "adloader.workloads.cli_sim",  # sim | bench | demo
    "adloader.daemon.client_cli",  # submit | jobs | cancel | logs
    "adloader.daemon.cli_daemon",  # daemon | run
    "adloader.workloads.cli_replay",  # replay
)


def env_default(flag: str, default: object = None) -> object:
    """The default of ``--flag``: the environment's ``ADLOADER_FLAG`` if set, else ``default``."""
    return os.environ.get("ADLOADER_" + flag.upper().replace("-", "_"), default)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adloader",
        description="Share a node's data-loading workers among its training jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
