"""The simulator's outputs on the bundled traces, as committed (issue 24 item 7: a regression
caught by CI, not by a reader). Any change that moves a policy's schedule — each job's start
and end, the reallocations — fails here, meant or not. When it is meant, write the file
again and say why in the commit:

    ADLOADER_UPDATE_GOLDEN=1 python3 -m pytest -q tests/unit/sim/test_sim_golden.py

Figures are kept to 9 significant digits (the same code on the same numpy gives the same
floats; the margin is for another CPU's last bits, not for a changed schedule).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from adloader.bench.sim.report import setup
from adloader.sim.simulator import simulate
from adloader.sim.trace import load_trace

GOLDEN = Path(__file__).with_name("sim_golden.json")
CASES = [(trace, truth, policy)
         for trace, truths in (("paper-static", ("model", "published")),
                               ("paper-dynamic", ("published",)),
                               ("small-mix", ("published",)))
         for truth in truths
         for policy in ("balance", "waa", "fair", "jct", "ftf")]


def _key(trace: str, truth: str, policy: str) -> str:
    return f"{trace} · {truth} · {policy}"


@functools.cache
def _node(truth: str):
    """(profile, TPM, config) of the paper's node on ``truth``: the TPM fitted once."""
    return setup("paper", truth=truth)


def _figures(trace: str, truth: str, policy: str) -> dict:
    profile, model, config = _node(truth)
    result = simulate(load_trace(trace, node_gpus=profile.gpus), profile, model,
                      replace(config, policy=policy)).to_json()
    g = lambda x: float(f"{x:.9g}")  # noqa: E731
    return {"makespan_s": g(result["makespan_s"]), "mean_jct_s": g(result["mean_jct_s"]),
            "reallocations": result["reallocations"],
            "jobs": {j["name"]: [g(j["start_s"]), g(j["end_s"]), j["workers_initial"]]
                     for j in result["jobs"]}}


@pytest.fixture(scope="module")
def golden() -> dict:
    if os.environ.get("ADLOADER_UPDATE_GOLDEN") == "1":
        if os.environ.get("CI") == "true":
            pytest.fail("ADLOADER_UPDATE_GOLDEN under CI=true: CI checks the file, never "
                        "writes it")
        data = {_key(*case): _figures(*case) for case in CASES}
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return json.loads(GOLDEN.read_text())


def test_the_golden_file_covers_every_case_and_nothing_else(golden):
    assert sorted(golden) == sorted(_key(*case) for case in CASES)


@pytest.mark.parametrize("trace, truth, policy", CASES)
def test_each_policy_schedules_the_bundled_traces_as_committed(golden, trace, truth, policy):
    assert _figures(trace, truth, policy) == golden[_key(trace, truth, policy)]
