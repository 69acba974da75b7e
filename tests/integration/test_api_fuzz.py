"""The REST API under a fuzzer (schemathesis over its own OpenAPI spec) against a real daemon:
no request the spec allows, and none it does not, gets a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from daemon_harness import Daemon
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    # an arrival window of an hour held for every arrival: submitted jobs are stored and
    # buffered, never launched
    d = Daemon(tmp_path_factory.mktemp("fuzz") / "state", window=3600.0,
               extra=("--hold-arrivals",)).start()
    yield d
    assert d.metric("adloader_loop_errors_total") == 0
    d.stop()


@pytest.fixture(scope="module")
def api_schema(fuzzed):
    return schemathesis.openapi.from_url(fuzzed.url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case, fuzzed):
    case.call_and_validate(base_url=fuzzed.url, checks=[not_a_server_error],
                           headers={"Authorization": f"Bearer {fuzzed.token}"})
