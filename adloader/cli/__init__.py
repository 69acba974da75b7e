"""The ``adloader`` command line: one module per group of commands, imported only when one of
its commands runs (``adloader jobs`` never loads torch or scikit-learn; ``adloader --help``
imports no command at all). Each module exposes ``register(subparsers)``, which adds its
parsers and sets ``func`` (called with the parsed namespace, returns an exit code). Nothing
outside this package imports it. Flags read environment variables only where
``_options`` names one explicitly (``adloader.env``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from adloader.errors import DaemonBusy, DaemonUnavailable, InputError, StorageError

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("adloader.cli.sim", "a live daemon running real jobs, then the static mix"),
    "daemon": ("adloader.cli.daemon", "run the node daemon (REST + ZeroMQ control channel)"),
    "ui": ("adloader.cli.daemon", "the operator's page in a browser: a link that signs in"),
    "run": ("adloader.cli.daemon", "run a training command as a job of the daemon"),
    "submit": ("adloader.cli.jobs", "submit a training job to the daemon"),
    "jobs": ("adloader.cli.jobs", "list the daemon's jobs"),
    "describe": ("adloader.cli.jobs", "one job, whole: state, processes, spec, events"),
    "logs": ("adloader.cli.jobs", "a job's output (-f to follow it)"),
    "cancel": ("adloader.cli.jobs", "cancel jobs"),
    "pause": ("adloader.cli.jobs", "suspend a running job"),
    "resume": ("adloader.cli.jobs", "resume a paused job"),
    "replay": ("adloader.cli.replay_command", "replay a trace against a running daemon"),
    "sim": ("adloader.cli.sim", "simulate a trace on one node under a policy"),
    "bench": ("adloader.cli.bench.bench_commands", "benchmarks against same-run baselines"),
    "workload": ("adloader.cli.traces", "generate, check and list workload traces"),
    "profile": ("adloader.cli.profile", "measure this machine's loading and step times"),
    "tpm": ("adloader.cli.tpm_command", "the throughput prediction model: samples, fit"),
    "models": ("adloader.cli.zoo_command", "the model zoo and its FLOPs/parameter table"),
}
ALIASES = {"model": "tpm"}  # old names, kept working but not listed
OUTPUT_FLAGS = {"json": "out", "plot": "plot", "report": "report"}  # dest: the flag's name


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with a known ``command``, only its module is imported and registered."""
    parser = argparse.ArgumentParser(
        prog="adloader",
        description="Share a node's data-loading workers among its training jobs.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = ALIASES.get(command, command)
    if command in COMMANDS:
        importlib.import_module(COMMANDS[command][0]).register(sub)
    else:
        for name, (_, text) in COMMANDS.items():
            sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(command)
    except ModuleNotFoundError as exc:
        return _missing(exc, command)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _check_outputs(args)
        return int(args.func(args) or 0)
    except ModuleNotFoundError as exc:
        return _missing(exc, command)
    except (InputError, StorageError, DaemonBusy) as exc:
        return _error(exc, 2)
    except DaemonUnavailable as exc:  # not the user's fault
        return _error(exc, 1)
    except KeyboardInterrupt:
        return 130


def _version() -> str:
    """``adloader 0.1.0 (commit 1a2b3c4, Python 3.12.3)``: what a bug report needs."""
    from adloader.host.build_info import build_info

    info = build_info()
    commit = f"commit {info['commit']}, " if info["commit"] else ""
    return f"adloader {info['version']} ({commit}Python {info['python']})"


def _check_outputs(args) -> None:
    """A result file or report folder the run could not write is named before the run (a
    long bench must not end in a traceback): its folder must exist."""
    for flag in OUTPUT_FLAGS:
        path = getattr(args, flag, None)
        if isinstance(path, str) and path:
            folder = Path(path).expanduser().resolve().parent
            if not folder.is_dir():
                raise InputError(f"--{OUTPUT_FLAGS[flag]} {path}: the folder {folder} does "
                                 "not exist")


# what `pip install "adloader[daemon]"` adds (pyproject.toml), by import name
DAEMON_EXTRA = ("sklearn", "scipy", "matplotlib", "rich", "PIL", "fastapi", "uvicorn", "httpx",
                "prometheus_client", "starlette")


def _missing(exc: ModuleNotFoundError, command: str | None) -> int:
    """A command of the daemon's side on the job side's install (``pip install adloader``):
    one line naming the extra; any other missing module is a bug, raised as it is."""
    name = (exc.name or "").split(".")[0]
    if name not in DAEMON_EXTRA:
        raise exc
    print(f"adloader: error: `adloader {command or ''}` needs the daemon's packages (no module "
          f"named {name!r}): pip install \"adloader[daemon]\"", file=sys.stderr)
    return 1


def _error(exc: Exception, code: int) -> int:
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    print(f"adloader: error: {lines[-1] if len(lines) > 1 else lines[0]}", file=sys.stderr)
    return code
