"""``adloader submit | jobs | describe | cancel | pause | resume | logs``: a running daemon's
jobs, over its REST API (``adloader.remote.rest_client.DaemonClient``).

Listings print to standard output, chosen with ``-o`` (``table``, ``wide``, ``name``,
``json``); piped, a table is plain columns, a line per job.

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

from adloader.errors import InputError

from . import _options, _output

_SPEC_FLAGS = ("name", "model", "batch_size", "gpus", "iterations", "epochs", "workers", "cwd")
OUTPUTS = ("table", "wide", "name", "json")
EVENTS_SHOWN = 10  # ``describe``: the job's latest events


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``submit``, ``jobs``, ``describe``, ``cancel``, ``pause``, ``resume`` and
    ``logs``."""
    common = _options.daemon_options()

    p = sub.add_parser("submit", parents=[common], help="submit a training job to the daemon",
                       usage="%(prog)s [options] (JOB.toml | -- COMMAND...)")  # fmt: skip
    p.add_argument("argv", nargs="*", metavar="JOB.toml | -- COMMAND",
                   help="a job file, or the job's command after --")  # fmt: skip
    p.add_argument("--name", help="job name (default: the model or the program's name)")
    p.add_argument("--model", help="zoo model the job trains, e.g. Resnet18")
    p.add_argument("--batch-size", type=int, help="global batch B (B/n on each of n GPUs)")
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
    p.add_argument("-o", "--output", choices=OUTPUTS, default=None,
                   help="table (default), wide (every column), name (the ids, a line each), "
                        "json")
    p.add_argument("--json", dest="output", action="store_const", const="json",
                   help="the same as -o json")
    p.add_argument("--state", action="append", default=[], metavar="STATE",
                   help="only jobs in this state (repeatable, or comma-separated: "
                        "running,paused)")
    p.set_defaults(func=_jobs)

    p = sub.add_parser("describe", parents=[common],
                       help="one job, whole: its state, processes, spec and latest events")
    p.add_argument("job", metavar="ID", help="job id, e.g. j-000001")
    p.add_argument("-o", "--output", choices=("text", "json"), default="text")
    p.set_defaults(func=_describe)

    p = sub.add_parser("cancel", parents=[common], help="cancel jobs")
    p.add_argument("jobs", nargs="+", metavar="ID", help="job ids, e.g. j-000001 j-000002")
    p.add_argument("--signal", metavar="SIG",
                   help="send a launched job's processes SIG now (TERM, INT, KILL, 9…) "
                        "instead of asking it to stop at its next batch boundary")
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
    p.add_argument("--tail", type=int, default=None, metavar="N",
                   help="show the last N lines (default: the last 64 KiB)")  # fmt: skip
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing the output as the job writes it, until it ends")
    p.set_defaults(func=_logs)


# -- submit ----------------------------------------------------------------------------
def job_body(args: argparse.Namespace) -> tuple[dict, str]:
    """The JSON body for ``POST /v1/jobs`` from a job file and/or flags, and its origin."""
    from adloader.remote.jobfile import read_jobspec_toml

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
    body.setdefault("name", default_name(body))
    return as_api_body(body, origin), origin


def as_api_body(body: dict, origin: str) -> dict:
    """A job file's spelling (a string command split as a shell would, a model name in any
    case) as the API takes it: exactly its schema. A bad field is named here, before any
    request (with the file's name when there is one)."""
    from pydantic import ValidationError

    from adloader.rest import JOB_FILE, JobSpec, describe_error

    try:
        spec = JobSpec.model_validate(body, context={JOB_FILE: True})
    except ValidationError as exc:
        why = describe_error(exc.errors()[0])
        raise InputError(why if origin == "job" else f"{origin}: {why}") from None
    return spec.model_dump(mode="json", exclude_none=True)


def default_name(body: dict) -> str:
    """A job's name when none is given: its model, else its script or program (``train.py``
    for ``python3 train.py``, ``adloader.workloads.train`` for ``python3 -m ...``)."""
    command = body.get("command")
    argv = command.split() if isinstance(command, str) else list(command or [])
    base = body.get("model") or ""
    if not base and argv:
        program = Path(str(argv[0])).name
        rest = [a for a in argv[1:] if not a.startswith("-") or a == "-m"]
        if re.match(r"^python[\d.]*$", program) and rest:
            base = rest[1] if rest[0] == "-m" and len(rest) > 1 else Path(rest[0]).name
        else:
            base = program
    return re.sub(r"[^A-Za-z0-9._-]", "-", str(base))[:64] or "job"


def _submit(args: argparse.Namespace) -> int:
    body, origin = job_body(args)
    with _options.client(args) as client:
        try:
            job = client.submit(body)
        except InputError as exc:
            if origin != "job" and str(exc).startswith("field "):
                raise InputError(f"{origin}: {exc}") from None
            raise
    print(job.id if args.quiet else f"submitted {job.id} ({job.name}): {job.state}")
    return 0


# -- jobs, cancel, pause, resume, logs -----------------------------------------------------
def _when(t: float | None, plain: bool = False) -> str:
    """A time as a terminal reads it, or piped one field (ISO 8601, local time)."""
    return "—" if t is None else time.strftime(
        "%Y-%m-%dT%H:%M:%S" if plain else "%m-%d %H:%M:%S", time.localtime(t))


def _model_or_features(spec: dict, plain: bool = False) -> str:
    if spec.get("model"):
        return spec["model"]
    f = spec.get("features") or {}
    return (f"{f.get('flops_g', 0):g}GF/{f.get('params_m', 0):g}M" if plain
            else f"{f.get('flops_g', 0):g} GF, {f.get('params_m', 0):g} M")


def _or_dash(value: Any, fmt: str = "{}") -> str:
    return "—" if value is None else fmt.format(value)


def job_rows(jobs: list[dict], wide: bool = False,
             plain: bool = False) -> tuple[list[str], list[list]]:
    """(columns, a row per job): id, name, state, model, b, n, workers, iteration,
    samples/s, submitted, exit, pids; ``wide`` adds CPU %, start, end and how it ended.
    ``plain`` (piped): every cell but the last column's one field, as ``awk`` splits them —
    times in ISO 8601, a failed job's state without its reason (``-o wide``: the last
    column)."""
    columns = ["id", "name", "state", "model", "batch", "GPUs", "workers", "iteration",
               "samples/s", "submitted", "exit", "pid", "supervisor"]
    if wide:
        columns += ["CPU %", "started", "ended", "reason"]
    rows = []
    for job in jobs:
        spec = job.get("spec") or {}
        ended = job.get("reason") if job["state"] in ("failed", "lost") and not plain \
            else None
        row = [job["id"], job["name"], job["state"] + (f" ({ended})" if ended else ""),
               _model_or_features(spec, plain), _or_dash(spec.get("batch_size")),
               _or_dash(spec.get("gpus")), _or_dash(job.get("workers")),
               _or_dash(job.get("iteration")), _or_dash(job.get("throughput"), "{:.1f}"),
               _when(job.get("submitted_at"), plain), _or_dash(job.get("exit_code")),
               _or_dash(job.get("pid")), _or_dash(job.get("supervisor_pid"))]
        if wide:
            row += [_or_dash(job.get("cpu_percent"), "{:.0f}"),
                    _when(job.get("started_at"), plain), _when(job.get("finished_at"), plain),
                    _or_dash(job.get("reason"))]
        rows.append(row)
    return columns, rows


def print_jobs(jobs: list[dict], output: str = "table") -> None:
    """``jobs`` as ``-o`` asks, on standard output."""
    if output == "json":
        print(json.dumps(jobs, indent=2))
    elif output == "name":
        sys.stdout.writelines(f"{job['id']}\n" for job in jobs)
    else:
        columns, rows = job_rows(jobs, wide=output == "wide", plain=not sys.stdout.isatty())
        _output.listing(f"{len(jobs)} job{'s' * (len(jobs) != 1)}", columns, rows, left=4)


def _states(given: list[str]) -> list[str]:
    """``--state`` values, checked here: a typo is named before the daemon is asked."""
    from adloader.rest import JOB_STATES

    states = [part.strip() for value in given for part in value.split(",") if part.strip()]
    for state in states:
        if state not in JOB_STATES:
            raise InputError(f"--state {state!r}: not one of {', '.join(JOB_STATES)}")
    return states


def _jobs(args: argparse.Namespace) -> int:
    with _options.client(args) as client:
        jobs = [j.model_dump(mode="json") for j in client.jobs(_states(args.state))]
    print_jobs(jobs, args.output or "table")
    return 0


def _describe(args: argparse.Namespace) -> int:
    with _options.client(args) as client:
        job = client.job(args.job).model_dump(mode="json")
        events, count = client.job_events(args.job, EVENTS_SHOWN)
    if args.output == "json":
        print(json.dumps({"job": job, "events": events, "event_count": count}, indent=2))
        return 0
    spec = job.pop("spec") or {}
    lines = [f"{key}: {_or_dash(value)}" for key, value in job.items()
             if not key.endswith("_at")]
    lines += [f"{key}: {_when(job.get(key))}" for key in job if key.endswith("_at")]
    lines.append("spec:")
    lines += [f"  {key}: {json.dumps(value) if isinstance(value, (dict, list)) else value}"
              for key, value in spec.items() if value is not None]
    lines.append(f"events (the last {len(events)} of {count}):")
    lines += [f"  {_when(e.get('t'))}  {e.get('kind')}  {json.dumps(e.get('data') or {})}"
              for e in events]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    """Each job in turn; one the daemon refuses is said and the others are still cancelled
    (exit 2 when any was refused)."""
    if args.signal is not None:
        from adloader.rest import signal_number

        signal_number(args.signal)  # a bad name is said before the daemon is asked
    refused = []
    with _options.client(args) as client:
        for job_id in dict.fromkeys(args.jobs):
            try:
                job = client.cancel(job_id, args.signal)
            except InputError as exc:
                if len(args.jobs) == 1:
                    raise
                refused.append(job_id)
                print(f"adloader: error: {exc}", file=sys.stderr)
                continue
            ending = "" if job.state in ("cancelled", "finished", "failed", "lost") else \
                f" (sent {args.signal.upper()})" if args.signal else \
                " (asked to stop at its next batch boundary)"
            print(f"cancelled {job.id} ({job.name}): {job.state}{ending}")
    return 2 if refused else 0


def _pause(args: argparse.Namespace) -> int:
    with _options.client(args) as client:
        job = client.pause(args.job, args.checkpoint)
    print(f"pausing {job.id} ({job.name}) at its next batch boundary")
    return 0


def _resume(args: argparse.Namespace) -> int:
    with _options.client(args) as client:
        job = client.resume(args.job)
    print(f"resumed {job.id} ({job.name}): {job.state}")
    return 0


def _logs(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        raise InputError(f"--tail must be >= 0, got {args.tail}")
    with _options.client(args) as client:
        text = None if args.tail is None else client.log_lines(args.job, args.tail)
        # without --tail, the client's (and the API's) own default window
        window = {} if text is None else {"tail": len(text.encode("utf-8", "replace"))}
        if args.follow:  # from those lines on (a line written meanwhile may be cut)
            for chunk in client.follow_log(args.job, **window):
                sys.stdout.write(chunk)
                sys.stdout.flush()
            return 0
        if text is None:
            text = client.log(args.job)
    sys.stdout.write(text)
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
    return 0
