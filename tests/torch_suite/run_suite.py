#!/usr/bin/env python3
"""Run PyTorch's own DataLoader tests against torch's DataLoader and adloader's, and compare.

    python tests/torch_suite/run_suite.py [--loader torch|elastic|both] [-k EXPR]
                                          [--timeout S] [--json OUT] [--slow]

Each loader's run is one pytest process over ``upstream/test_dataloader.py`` (fetched by hand,
never committed: see README.md), with a per-test time limit, a JUnit XML file and a JSON-lines
log in ``results/``. For "elastic" the suite's ``DataLoader`` name is ElasticDataLoader
(``boot/torch_suite_swap.py``). The report gives each run's counts and wall time and, with
``both``, every test that passes on torch but not on ElasticDataLoader with the first line of
its failure, marked "known" when ``known_differences.txt`` lists it.

Exit status: 0 when every such test is known (or only one loader ran), 1 when one is not,
2 when the upstream file is missing, 3 when another run is using the same results folder.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
UPSTREAM = HERE / "upstream" / "test_dataloader.py"
RESULTS = HERE / "results"
KNOWN = HERE / "known_differences.txt"
BOOT = HERE / "boot"
LOADERS = ("torch", "elastic")
FETCH_HINT = (
    "curl -L -o tests/torch_suite/upstream/test_dataloader.py "
    "https://raw.githubusercontent.com/pytorch/pytorch/v2.13.0/test/test_dataloader.py"
)


def test_id(nodeid: str) -> str:
    """``path::Class::test`` -> ``Class.test`` (the form known_differences.txt uses)."""
    return ".".join(nodeid.split("::")[1:]) or nodeid


def read_known(path: Path) -> dict[str, str]:
    """``Class.test | reason`` lines; blank lines and ``#`` comments are skipped."""
    known: dict[str, str] = {}
    if not path.exists():
        return known
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("|")
        known[name.strip()] = reason.strip()
    return known


def outcomes(jsonl: Path) -> dict[str, dict]:
    """Per test: outcome (passed, failed, error, skipped, xfailed, xpassed) and its message."""
    reports: dict[str, list[dict]] = {}
    if jsonl.exists():
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            rep = json.loads(line) if line.strip() else {}
            if "nodeid" in rep:
                reports.setdefault(rep["nodeid"], []).append(rep)
    result = {}
    for nodeid, reps in reports.items():
        phase = {rep["when"]: rep for rep in reps}
        setup, call, teardown = phase.get("setup"), phase.get("call"), phase.get("teardown")
        bad = next((r for r in (setup, teardown) if r and r["outcome"] == "failed"), None)
        if bad is not None:
            outcome, cause = "error", bad
        elif call is not None:
            cause = call
            outcome = {
                ("passed", False): "passed", ("passed", True): "xpassed",
                ("failed", False): "failed", ("failed", True): "failed",
                ("skipped", True): "xfailed", ("skipped", False): "skipped",
            }[(call["outcome"], call["xfail"])]
        elif setup is not None and setup["outcome"] == "skipped":
            outcome, cause = ("xfailed" if setup["xfail"] else "skipped"), setup
        else:  # started, never finished: the run was killed while it ran
            outcome, cause = "error", {"message": "run killed while this test ran", "where": ""}
        result[test_id(nodeid)] = {
            "outcome": outcome,
            "message": cause.get("message", ""),
            "where": cause.get("where", ""),
            "duration": round(sum(r.get("duration", 0) for r in reps), 3),
        }
    return result


def run_one(loader: str, args, results: Path) -> dict:
    """One pytest process over the upstream file for ``loader``; returns its summary."""
    jsonl, junit, log = (results / f"{loader}.{ext}" for ext in ("jsonl", "xml", "log"))
    for path in (jsonl, junit, log):
        path.unlink(missing_ok=True)
    env = dict(os.environ)
    env.update(
        ADLOADER_TORCH_SUITE="1",
        ADLOADER_TORCH_SUITE_LOADER=loader,
        ADLOADER_TORCH_SUITE_REPORT=str(jsonl),
        PYTHONPATH=os.pathsep.join(p for p in (str(BOOT), env.get("PYTHONPATH")) if p),
    )
    cmd = [
        sys.executable, "-m", "pytest", str(args.upstream), "-q", "-p", "no:cacheprovider",
        f"--confcutdir={HERE}", f"--junitxml={junit}", "-o", "junit_suite_name=" + loader,
    ]
    if args.k:
        cmd += ["-k", args.k]
    if args.slow:
        env["PYTORCH_TEST_WITH_SLOW"] = "1"
    if args.timeout > 0:
        if _has_pytest_timeout():
            cmd += [f"--timeout={args.timeout}", "--timeout-method=signal"]
        else:
            env["ADLOADER_TORCH_SUITE_ALARM"] = str(args.timeout)
    print(f"[{loader}] {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    killed = False
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=args.run_timeout or None)
        except subprocess.TimeoutExpired:
            killed = True
            _kill_group(proc.pid)
            rc = proc.wait()
        finally:  # also on SIGTERM/SIGINT: the run is in its own session, so it goes too
            _kill_group(proc.pid)  # with any workers or helpers it left behind
    wall = time.monotonic() - start
    tests = outcomes(jsonl)
    swapped = loader_in_module(jsonl)
    counts: dict[str, int] = {}
    for info in tests.values():
        counts[info["outcome"]] = counts.get(info["outcome"], 0) + 1
    print(f"[{loader}] rc={rc} wall={wall:.1f}s {_counts_text(counts)}"
          + (" (killed: run timeout)" if killed else ""), flush=True)
    print(f"[{loader}] test_dataloader.DataLoader was {swapped or 'never reported'}", flush=True)
    want = "adloader" if loader == "elastic" else "torch"
    if not swapped.startswith(want):
        raise SystemExit(f"[{loader}] the suite did not run {want}'s loader: see {log}")
    return {"loader": loader, "rc": rc, "killed": killed, "wall_s": round(wall, 1),
            "counts": counts, "tests": tests, "data_loader": swapped, "junit": str(junit),
            "log": str(log)}


def loader_in_module(jsonl: Path) -> str:
    """The class the suite's ``DataLoader`` name held, as the plugin recorded it."""
    if jsonl.exists():
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            rep = json.loads(line) if line.strip() else {}
            if rep.get("meta") == "DataLoader":
                return rep["value"]
    return ""


def _has_pytest_timeout() -> bool:
    import importlib.util

    return importlib.util.find_spec("pytest_timeout") is not None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _counts_text(counts: dict[str, int]) -> str:
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in order)


def compare(torch_run: dict, elastic_run: dict, known: dict[str, str]) -> list[dict]:
    """Tests that pass on torch and do not pass on ElasticDataLoader."""
    lost = []
    for name, info in sorted(torch_run["tests"].items()):
        if info["outcome"] != "passed":
            continue
        other = elastic_run["tests"].get(name, {"outcome": "missing", "message": "", "where": ""})
        if other["outcome"] == "passed":
            continue
        lost.append({"test": name, "outcome": other["outcome"], "message": other["message"],
                     "where": other["where"], "known": name in known,
                     "known_reason": known.get(name, "")})
    return lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loader", choices=(*LOADERS, "both"), default="both")
    parser.add_argument("-k", default="", help="pytest -k expression")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="per-test limit in seconds (0: none); default 60")
    parser.add_argument("--run-timeout", type=float, default=3 * 3600,
                        help="limit for a whole run in seconds (0: none); default 3 h")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument("--slow", action="store_true",
                        help="also run the suite's @slowTest tests (PYTORCH_TEST_WITH_SLOW=1)")
    parser.add_argument("--upstream", type=Path, default=UPSTREAM,
                        help="the upstream test file (default: %(default)s)")
    parser.add_argument("--known", type=Path, default=KNOWN,
                        help="known differences (default: %(default)s)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="folder for JUnit XML, JSON lines and logs (default: %(default)s)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    args.upstream = args.upstream.resolve()
    if not args.upstream.exists():
        print(f"{args.upstream} is missing: it is PyTorch's code and is never committed. "
              f"Fetch it first (see tests/torch_suite/README.md):\n  {FETCH_HINT}",
              file=sys.stderr)
        return 2
    args.results.mkdir(parents=True, exist_ok=True)
    lock = open(args.results / ".lock", "w")  # noqa: SIM115 (held until the process exits)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"another run_suite.py is writing to {args.results}: wait for it, or give this "
              "run its own folder with --results DIR", file=sys.stderr)
        return 3
    loaders = LOADERS if args.loader == "both" else (args.loader,)
    runs = {loader: run_one(loader, args, args.results.resolve()) for loader in loaders}

    print()
    for run in runs.values():
        print(f"{run['loader']:>8}: {run['counts'].get('passed', 0)} passed "
              f"in {run['wall_s']:.1f}s  ({_counts_text(run['counts'])})")
    report = {"upstream": str(args.upstream), "timeout_s": args.timeout,
              "runs": {k: {key: v[key] for key in ("rc", "killed", "wall_s", "counts",
                                                    "data_loader", "junit", "log", "tests")}
                       for k, v in runs.items()}}
    status = 0
    if len(runs) == 2:
        known = read_known(args.known)
        lost = compare(runs["torch"], runs["elastic"], known)
        report["pass_on_torch_not_elastic"] = lost
        print(f"\n{len(lost)} pass on torch but not on ElasticDataLoader "
              f"({sum(not item['known'] for item in lost)} not in {args.known.name}):")
        for item in lost:
            tag = "known" if item["known"] else "NEW"
            print(f"  [{tag}] {item['test']}: {item['outcome']}: {item['message']}"
                  + (f"  ({item['where']})" if item["where"] else ""))
        fixed = sorted(set(known) - {item["test"] for item in lost})
        if fixed:
            report["known_but_passing"] = fixed
            print(f"\n{len(fixed)} listed in {args.known.name} no longer differ:")
            for name in fixed:
                print(f"  {name}")
        status = 1 if any(not item["known"] for item in lost) else 0
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"\nreport: {args.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
