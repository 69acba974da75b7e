"""The REST contract test's configuration (``tests/api/schemathesis.toml``) turns no check
off and widens no check for every operation: a status it lets one operation answer beside a
check's defaults is one that operation declares, for the reason docs/api.md gives."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from adloader.daemon.api.app import create_app

CONFIG = Path(__file__).parents[2] / "api" / "schemathesis.toml"
# schemathesis' own (4.32.5, schemathesis.config._checks): what a check expects untold
DEFAULTS = {
    "negative_data_rejection": {"400", "401", "403", "404", "405", "406", "409", "415", "422",
                                "428", "429", "5xx"},
    "positive_data_acceptance": {"2xx", "3xx", "401", "403", "404", "409", "429", "5xx"},
}


def test_the_defaults_here_are_the_pinned_schemathesis_defaults():
    checks = pytest.importorskip("schemathesis.config._checks")
    pinned = {"negative_data_rejection": set(checks.NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES),
              "positive_data_acceptance": set(checks.POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES)}
    assert pinned == DEFAULTS


def _config() -> dict:
    return tomllib.loads(CONFIG.read_text())


def test_no_check_is_turned_off():
    config = _config()
    off = [name for name, check in config.get("checks", {}).items()
           if isinstance(check, dict) and check.get("enabled") is False]
    off += [f"{op.get('include-operation-id')}: {name}" for op in config.get("operations", [])
            for name, check in op.get("checks", {}).items()
            if isinstance(check, dict) and check.get("enabled") is False]
    assert off == []


def test_no_check_expects_more_of_every_operation_than_its_defaults():
    checks = _config().get("checks", {})
    widened = [name for name in DEFAULTS
               if set(checks.get(name, {}).get("expected-statuses", DEFAULTS[name]))
               != DEFAULTS[name]]
    assert widened == []


def test_what_an_operation_may_answer_besides_the_defaults_it_declares():
    schema = create_app(None, "token").openapi()
    declared = {op["operationId"]: set(op["responses"]) for item in schema["paths"].values()
                for op in item.values()}
    undeclared = []
    for op in _config().get("operations", []):
        name = op["include-operation-id"]
        assert name in declared, f"{name}: no such operation"
        for check, allowed in DEFAULTS.items():
            extra = set(op.get("checks", {}).get(check, {}).get("expected-statuses", ()))
            undeclared += [f"{name} {check} {s}" for s in sorted(extra - allowed - declared[name])]
    assert undeclared == []
