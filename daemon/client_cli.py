"""``adloader submit | jobs | cancel | logs``: talk to a running daemon over its REST API.

The daemon is at ``--url`` (ADLOADER_URL, default http://127.0.0.1:7070); its bearer token
comes from ADLOADER_TOKEN, else ``--token-file`` (default: the daemon config's token path).
A spec is validated by the daemon, whose one-line answer is shown as the error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from rich.console import Console
from rich.table import Table

from adloader.cli import env_default
from adloader.daemon.jobfile import read_jobspec_toml
from adloader.daemon.settings import load_config
from adloader.errors import InputError

DEFAULT_URL = "http://127.0.0.1:7070"
TIMEOUT_S = 10.0
_SPEC_FLAGS = ("name", "model", "batch_size", "gpus", "iterations", "epochs", "workers", "cwd")


class DaemonFailed(Exception):
    """The daemon answered 5xx: not the user's fault (exit 1)."""


def common_parser() -> argparse.ArgumentParser:
    """--url and --token-file, shared by every command that talks to the daemon."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=env_default("url", DEFAULT_URL),
                        help=f"the daemon's REST address (default {DEFAULT_URL})")  # fmt: skip
    common.add_argument("--token-file", default=env_default("token-file", None),
                        help="bearer token file (default: the daemon's; "
                             "ADLOADER_TOKEN overrides it)")  # fmt: skip
    return common


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``submit``, ``jobs``, ``cancel`` and ``logs`` to the ``adloader`` parser."""
    common = common_parser()

    p = sub.add_parser("submit", parents=[common], help="submit a training job to the daemon",
                       usage="%(prog)s [options] (JOB.toml | -- COMMAND...)")  # fmt: skip
    p.add_argument("argv", nargs="*", metavar="JOB.toml | -- COMMAND",
                   help="a job file, or the job's command after --")  # fmt: skip
    p.add_argument("--name", help="job name (default: the model or the program's name)")
    p.add_argument("--model", help="zoo model the job trains, e.g. Resnet18")
    p.add_argument("--batch-size", type=int, help="per-GPU batch size b")
    p.add_argument("--gpus", type=int, help="GPUs n (default 1)")
    p.add_argument("--iterations", type=int, help="training iterations")
    p.add_argument("--epochs", type=int, help="training epochs")
    p.add_argument("--workers", type=int, help="loading workers asked for")
    p.add_argument("--cwd", help="working folder (default: the current one)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="an environment variable for the job (repeatable)")  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="print only the job id")
    p.set_defaults(func=_submit)

    p = sub.add_parser("jobs", parents=[common], help="list the daemon's jobs")
    p.add_argument("--json", action="store_true", help="print the jobs as JSON")
    p.set_defaults(func=_jobs)

    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("job", metavar="ID", help="job id, e.g. j-000001")
    p.set_defaults(func=_cancel)

    p = sub.add_parser("pause", parents=[common], help="suspend a running job")
    p.add_argument("job", metavar="ID")
    p.add_argument("--checkpoint", action="store_true",
                   help="save model, optimizer and loader state before pausing")
    p.set_defaults(func=_pause)

    p = sub.add_parser("resume", parents=[common], help="resume a paused job")
    p.add_argument("job", metavar="ID")
    p.set_defaults(func=_resume)

    p = sub.add_parser("logs", parents=[common], help="a job's output")
    p.add_argument("job", metavar="ID", help="job id, e.g. j-000001")
    p.add_argument("--tail", type=int, default=64 * 1024, metavar="BYTES",
                   help="show at most the last BYTES bytes (default 65536)")  # fmt: skip
    p.set_defaults(func=_logs)


# -- talking to the daemon -------------------------------------------------------------
def _token(args: argparse.Namespace) -> tuple[str | None, str]:
    """The bearer token and where it came from."""
    if os.environ.get("ADLOADER_TOKEN"):
        return os.environ["ADLOADER_TOKEN"].strip(), "ADLOADER_TOKEN"
    path = Path(args.token_file) if args.token_file else load_config().token_path
    try:
        return path.read_text().strip() or None, str(path)
    except OSError:
        return None, str(path)


def request(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One call to the daemon; InputError for no daemon, a 4xx, a bad token; DaemonFailed 5xx."""
    url = args.url.rstrip("/")
    token, source = _token(args)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT_S) as client:
            response = client.request(method, path, **kwargs)
    except httpx.ConnectError:
        raise InputError(f"no daemon at {url} (start one with `adloader daemon`)") from None
    except httpx.TimeoutException:
        raise InputError(f"the daemon at {url} did not answer within {TIMEOUT_S:g} s") from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol):
        raise InputError(f"--url {args.url!r} is not an http:// or https:// address") from None
    except httpx.HTTPError as exc:
        raise InputError(f"the daemon at {url}: {exc}") from None
    if response.status_code < 400:
        return response
    detail = _detail(response)
    if response.status_code == 401:
        why = "no token (ADLOADER_TOKEN unset, " + source + " unreadable)" if not token else \
            f"it refused the token from {source}"  # fmt: skip
        raise InputError(f"the daemon at {url}: {why}")
    if response.status_code < 500:
        raise InputError(detail)
    raise DaemonFailed(f"the daemon at {url} failed: {detail}")


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


def _run(fn):
    """Wrap a command: a 5xx from the daemon is one line and exit 1."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except DaemonFailed as exc:
            print(f"adloader: error: {exc}", file=sys.stderr)
            return 1

    wrapped.__doc__ = fn.__doc__
    return wrapped


def _console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=140)


# -- submit ----------------------------------------------------------------------------
def job_body(args: argparse.Namespace) -> tuple[dict, str]:
    """The JSON body for ``POST /v1/jobs`` from a job file and/or flags, and its origin."""
    argv = list(args.argv)
    if argv and argv[0].endswith(".toml"):
        origin, body = argv[0], read_jobspec_toml(argv[0])
        argv = argv[1:]
    else:
        origin, body = "job", {}
    if argv:
        body["command"] = argv
    for flag in _SPEC_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            body[flag] = str(Path(value).resolve()) if flag == "cwd" else value
    if args.env:
        env = body.get("env", {})
        if not isinstance(env, dict):
            raise InputError(f"{origin}: field 'env': must be a table")
        env = dict(env)
        for item in args.env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise InputError(f"--env {item!r}: expected KEY=VALUE")
            env[key] = value
        body["env"] = env
    if origin == "job" and "command" not in body:
        raise InputError("submit: give a job file (JOB.toml) or the job's command after --")
    body.setdefault("cwd", os.getcwd())
    if "name" not in body:
        command = body.get("command")
        program = command.split() if isinstance(command, str) else command
        base = body.get("model") or (Path(str(program[0])).name if program else "")
        body["name"] = re.sub(r"[^A-Za-z0-9._-]", "-", str(base))[:64] or "job"
    return body, origin


@_run
def _submit(args: argparse.Namespace) -> int:
    body, origin = job_body(args)
    try:
        job = request(args, "POST", "/v1/jobs", json=body).json()
    except InputError as exc:
        if origin != "job" and str(exc).startswith("field "):
            raise InputError(f"{origin}: {exc}") from None
        raise
    if args.quiet:
        print(job["id"])
    else:
        print(f"submitted {job['id']} ({job['name']}): {job['state']}")
    return 0


# -- jobs, cancel, logs ----------------------------------------------------------------
def _when(t: float | None) -> str:
    return "—" if t is None else time.strftime("%m-%d %H:%M:%S", time.localtime(t))


def _what(spec: dict) -> str:
    if spec.get("model"):
        return spec["model"]
    f = spec.get("features") or {}
    return f"{f.get('flops_g', 0):g} GF, {f.get('params_m', 0):g} M"


def _cell(value: Any, fmt: str = "{}") -> str:
    return "—" if value is None else fmt.format(value)


def jobs_table(jobs: list[dict]) -> Table:
    """One row per job: id, name, state, model, b, n, workers, iteration, samples/s, times."""
    table = Table(title=f"{len(jobs)} job{'s' * (len(jobs) != 1)}")
    for col in ("id", "name", "state", "model"):
        table.add_column(col)
    for col in ("batch", "GPUs", "workers", "iteration", "samples/s"):
        table.add_column(col, justify="right")
    table.add_column("submitted")
    table.add_column("exit", justify="right")
    for job in jobs:
        spec = job.get("spec") or {}
        table.add_row(
            job["id"], job["name"], job["state"], _what(spec), _cell(spec.get("batch_size")),
            _cell(spec.get("gpus")), _cell(job.get("workers")), _cell(job.get("iteration")),
            _cell(job.get("throughput"), "{:.1f}"), _when(job.get("submitted_at")),
            _cell(job.get("exit_code")),
        )  # fmt: skip
    return table


@_run
def _jobs(args: argparse.Namespace) -> int:
    jobs = request(args, "GET", "/v1/jobs").json()
    if args.json:
        print(json.dumps(jobs, indent=2))
    else:
        _console().print(jobs_table(jobs))
    return 0


def _job_path(args: argparse.Namespace, action: str = "") -> str:
    return f"/v1/jobs/{quote(args.job, safe='')}" + (f"/{action}" if action else "")


@_run
def _cancel(args: argparse.Namespace) -> int:
    job = request(args, "DELETE", _job_path(args)).json()
    print(f"cancelled {job['id']} ({job['name']}): {job['state']}")
    return 0


@_run
def _pause(args: argparse.Namespace) -> int:
    job = request(args, "POST", _job_path(args, "pause"),
                  params={"checkpoint": args.checkpoint}).json()
    print(f"pausing {job['id']} ({job['name']}) at its next batch boundary")
    return 0


@_run
def _resume(args: argparse.Namespace) -> int:
    job = request(args, "POST", _job_path(args, "resume")).json()
    print(f"resumed {job['id']} ({job['name']}): {job['state']}")
    return 0


@_run
def _logs(args: argparse.Namespace) -> int:
    if args.tail < 0:
        raise InputError(f"--tail must be >= 0, got {args.tail}")
    text = request(args, "GET", _job_path(args, "log"), params={"tail": args.tail}).text
    sys.stdout.write(text)
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
    return 0
