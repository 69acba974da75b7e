"""pytest plugin for the upstream DataLoader suite; active only in runs that run_suite.py starts.

Outside those runs the upstream file (if a developer fetched it) is left out of collection, so
the default ``pytest`` never runs PyTorch's suite by accident. Inside them (ADLOADER_TORCH_SUITE
set) this plugin:

* swaps ``test_dataloader.DataLoader`` for ElasticDataLoader when the run is for "elastic"
  (again, after collection, in case the import went through a finder ahead of ours, such as
  pytest's assertion rewriter);
* bounds each test with SIGALRM when pytest-timeout is not installed (with it, the harness
  passes ``--timeout``);
* appends every test report to a JSON-lines file as it arrives, so a run that has to be killed
  still leaves its results behind.
"""

from __future__ import annotations

import json
import os
import signal

import pytest

ENV_ON = "ADLOADER_TORCH_SUITE"
ENV_REPORT = "ADLOADER_TORCH_SUITE_REPORT"
ENV_ALARM = "ADLOADER_TORCH_SUITE_ALARM"

if not os.environ.get(ENV_ON):
    collect_ignore_glob = ["upstream/*"]


def pytest_collection_modifyitems(session, config, items):
    if not os.environ.get(ENV_ON):
        return
    import torch_suite_swap

    for module in {getattr(item, "module", None) for item in items} - {None}:
        if module.__name__ == torch_suite_swap.MODULE:
            torch_suite_swap.swap(module)
            cls = module.DataLoader
            _append({"meta": "DataLoader", "value": f"{cls.__module__}.{cls.__qualname__}"})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    limit = float(os.environ.get(ENV_ALARM) or 0)
    if not os.environ.get(ENV_ON) or limit <= 0:
        yield
        return

    def on_alarm(signum, frame):
        pytest.fail(f"Timeout >{limit}s", pytrace=False)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _message(report) -> tuple[str, str]:
    """(first line of the failure or skip reason, where it was raised)."""
    longrepr = report.longrepr
    if longrepr is None:
        return "", ""
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: "), f"{longrepr[0]}:{longrepr[1]}"
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    where = f"{crash.path}:{crash.lineno}" if crash is not None else ""
    return first, where


def pytest_runtest_logreport(report):
    if not os.environ.get(ENV_ON):
        return
    message, where = _message(report)
    line = {
        "nodeid": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "xfail": hasattr(report, "wasxfail"),
        "duration": round(report.duration, 3),
        "message": message,
        "where": where,
    }
    _append(line)


def _append(record: dict) -> None:
    path = os.environ.get(ENV_REPORT)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
