"""The REST API over an in-memory NodeService: auth, validation messages as problems (RFC
9457), 404s, 500s for bugs and 503s for a node that cannot serve."""

from __future__ import annotations

import pytest
from fake_service import TOKEN, FakeService
from fastapi.testclient import TestClient

from adloader import limits
from adloader.daemon.api.app import create_app
from adloader.daemon.api.service import NodeService
from adloader.errors import InputError
from adloader.remote.jobfile import load_jobspec_file
from adloader.rest import parse_jobspec

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SPEC = {"name": "r18", "command": ["python", "train.py"], "model": "Resnet18",
        "batch_size": 32, "iterations": 100}  # fmt: skip


def _typed(service: NodeService) -> NodeService:  # the fake satisfies the protocol
    return service


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def client(service) -> TestClient:
    return TestClient(create_app(_typed(service), TOKEN), raise_server_exceptions=False)


def test_submit_list_get_cancel(client, service):
    r = client.post("/v1/jobs", json=SPEC, headers=AUTH)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["id"] == "j-000001" and job["state"] == "queued"
    assert job["spec"]["model"] == "Resnet18" and job["spec"]["gpus"] == 1
    assert [j["id"] for j in client.get("/v1/jobs", headers=AUTH).json()] == ["j-000001"]
    assert client.get("/v1/jobs/j-000001", headers=AUTH).json()["name"] == "r18"
    r = client.post("/v1/jobs/j-000001/cancel", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    kinds = [e["kind"] for e in client.get("/v1/events?since=0", headers=AUTH).json()]
    assert kinds == ["submitted", "cancelled"]
    assert [e["id"] for e in client.get("/v1/events?since=1", headers=AUTH).json()] == [2]
    assert client.get("/v1/allocations", headers=AUTH).json()["jobs"] == {"j-000001": 0}


def test_cancel_is_an_action_and_the_cancelled_job_stays_readable(client, service):
    """``POST /v1/jobs/{id}/cancel`` ends a job and its record stays: a DELETE that did not
    delete is gone (405 naming what the path takes), and the document says so."""
    client.post("/v1/jobs", json=SPEC, headers=AUTH)
    client.post("/v1/jobs", json=SPEC, headers=AUTH)
    r = client.post("/v1/jobs/j-000001/cancel", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "cancelled", r.text
    assert client.get("/v1/jobs/j-000001", headers=AUTH).json()["state"] == "cancelled"
    r = client.post("/v1/jobs/j-000002/cancel?signal=KILL", headers=AUTH)
    assert r.status_code == 200 and service.signals == {"j-000002": "KILL"}
    r = client.post("/v1/jobs/j-000002/cancel?signal=STOP", headers=AUTH)  # does not end one
    assert r.status_code == 422 and "query parameter 'signal'" in r.json()["detail"]
    r = client.delete("/v1/jobs/j-000001", headers=AUTH)
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    assert r.json()["type"] == "urn:adloader:problem:method-not-allowed"
    doc = client.get("/openapi.json").json()
    assert set(doc["paths"]["/v1/jobs/{job_id}"]) == {"get"}
    cancel = doc["paths"]["/v1/jobs/{job_id}/cancel"]["post"]
    assert cancel["operationId"] == "cancel_job"
    assert [p["name"] for p in cancel["parameters"]] == ["job_id", "signal"]
    assert not [op for item in doc["paths"].values() for op in item if op == "delete"]


def test_model_metrics_health_log(client):
    assert client.get("/v1/model", headers=AUTH).json()["fits"] == 0
    assert client.post("/v1/model/fit", headers=AUTH).json()["fits"] == 1
    client.post("/v1/jobs", json=SPEC, headers=AUTH)
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "adloader_jobs 1" in r.text
    r = client.get("/v1/jobs/j-000001/log?tail=16", headers=AUTH)
    assert r.status_code == 200 and r.text == "line 98\nline 99\n"
    assert client.get("/healthz").json()["status"] == "ok"  # no token needed
    assert client.get("/openapi.json").json()["info"]["title"] == "adloader"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"},
                                     {"Authorization": f"Bearer {TOKEN}x"}])  # fmt: skip
def test_token_is_required(client, headers):
    for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/model/fit"), ("GET", "/metrics"),
                         ("POST", "/v1/jobs/j-000001/cancel"), ("GET", "/v1/events")]:
        r = client.request(method, path, headers=headers)
        assert r.status_code == 401, (method, path)
        assert r.json()["detail"] == "missing or wrong bearer token"
        assert r.json()["type"] == "urn:adloader:problem:unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("change", "detail"), [
    ({"batch_size": 0}, "field 'batch_size': must be greater than 0"),
    ({"batch_size": "many"}, "field 'batch_size': must be a valid integer"),
    ({"gpus": -1}, "field 'gpus': must be greater than 0"),
    ({"command": []}, "field 'command': must have at least 1 item"),
    ({"name": "a b"}, "field 'name': must be 1..64 letters"),
    ({"model": "Resnet7"}, "field 'model': invalid depth in model 'Resnet7'"),
    ({"model": "AlexNet"}, "field 'model': unknown model 'AlexNet'"),
    ({"features": {"flops_g": 0, "params_m": 1}}, "field 'features.flops_g': must be greater"),
    ({"env": {"A=B": "1"}}, "field 'env': 'A=B' is not a valid variable name"),
    ({"cwd": "relative/dir"}, "field 'cwd': must be an absolute path"),
    ({"batch_size": "128"}, "field 'batch_size': must be a valid integer"),  # strict
    ({"command": "python train.py"}, "field 'command': must be a valid list"),  # job files'
    ({"model": "resnet18"}, "field 'model': unknown model 'resnet18': did you mean"),
    ({"colour": "red"}, "field 'colour': is not a known field"),
    ({"model": None}, "field 'model': required unless 'features' is given"),
    ({"iterations": None}, "field 'iterations': required unless 'epochs' is given"),
])  # fmt: skip
def test_invalid_spec_names_the_field(client, change, detail):
    body = {k: v for k, v in {**SPEC, **change}.items() if v is not None}
    r = client.post("/v1/jobs", json=body, headers=AUTH)
    assert r.status_code == 422
    assert r.json()["detail"].startswith(detail), r.json()


def test_malformed_bodies_are_4xx(client):
    r = client.post("/v1/jobs", content=b"{not json", headers=AUTH | {"content-type":
                                                                      "application/json"})
    assert r.status_code == 400 and r.json()["detail"] == "body is not valid JSON"
    assert r.headers["content-type"] == "application/problem+json"
    r = client.post("/v1/jobs", headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"] == "request body is required"
    r = client.post("/v1/jobs", json=[1, 2], headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"].startswith("body: must be")
    r = client.post("/v1/jobs", json={"name": "x"}, headers=AUTH)
    assert r.status_code == 422 and r.json()["detail"] == "field 'command': is required"
    r = client.get("/v1/events?limit=0", headers=AUTH)
    assert r.status_code == 422
    assert r.json()["detail"] == "query parameter 'limit': must be greater than or equal to 1"
    r = client.get("/v1/jobs/j-000001/log?tail=-1", headers=AUTH)
    assert r.status_code == 422 and "'tail'" in r.json()["detail"]


def test_a_body_over_its_limit_is_413_which_every_operation_declares(client):
    """A body over ``limits.MAX_BODY_BYTES`` (any operation: the limit comes before the
    route) or a spec over ``MAX_SPEC_BYTES`` is 413, and the document says each may be."""
    big = b"[" + b" " * limits.MAX_BODY_BYTES + b"]"
    for path in ("/v1/jobs", "/v1/jobs/j-000001/pause", "/v1/model/fit"):
        r = client.post(path, content=big, headers=AUTH | {"content-type": "application/json"})
        assert r.status_code == 413, (path, r.text)
        assert r.json()["type"] == "urn:adloader:problem:body-too-large"
    spec = {**SPEC, "command": ["python", *["x" * limits.MAX_ARG] * 17]}  # 272 KiB of args
    r = client.post("/v1/jobs", json=spec, headers=AUTH)
    assert r.status_code == 413 and "command and env together" in r.json()["detail"]
    doc = client.get("/openapi.json").json()
    undeclared = [f"{method} {path}" for path, item in doc["paths"].items()
                  for method, op in item.items() if "413" not in op["responses"]]
    assert undeclared == []


def test_unknown_job_is_404(client):
    for method, path in [("GET", "/v1/jobs/j-000042"), ("POST", "/v1/jobs/j-000042/cancel"),
                         ("GET", "/v1/jobs/j-000042/log")]:
        r = client.request(method, path, headers=AUTH)
        assert r.status_code == 404 and r.json()["detail"] == "no job 'j-000042'"
        assert r.json()["type"] == "urn:adloader:problem:not-found"


def test_service_input_error_is_400(client):
    r = client.post("/v1/jobs", json={**SPEC, "gpus": 9}, headers=AUTH)
    assert r.status_code == 400
    assert r.json()["detail"] == "job 'r18': asks for 9 GPUs, the node has 8"


def test_a_bug_is_500_and_logged(client, service, caplog):
    """500, not 503: a 503 tells clients and proxies to retry, and a bug does not pass."""
    service.fail = RuntimeError("database is locked")
    for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/model/fit"), ("GET", "/metrics"),
                         ("GET", "/healthz"), ("GET", "/v1/jobs/j-1/log")]:
        r = client.request(method, path, headers=AUTH)
        assert r.status_code == 500, (path, r.text)
        assert "failed inside the daemon" in r.json()["detail"]
        assert r.json()["type"] == "urn:adloader:problem:internal"
    assert "database is locked" in caplog.text


def test_invalid_service_answer_is_500(client, service):
    service.allocations = lambda: "not a dict"
    r = client.get("/v1/allocations", headers=AUTH)
    assert r.status_code == 500 and "invalid answer" in r.json()["detail"]


def test_empty_token_is_refused(service):
    with pytest.raises(ValueError):
        create_app(service, "")


def test_parse_jobspec_and_file(tmp_path):
    spec = parse_jobspec({**SPEC, "model": "mdresnet12", "command": "python 't r.py' -x"}, "j")
    assert spec.model == "mdResnet12" and spec.command == ["python", "t r.py", "-x"]
    with pytest.raises(InputError, match=r"^j: field 'epochs': must be greater than 0$"):
        parse_jobspec({**SPEC, "epochs": 0}, "j")
    with pytest.raises(InputError, match="^j: a job must be a table"):
        parse_jobspec(["x"], "j")
    path = tmp_path / "job.toml"
    path.write_text('[job]\nname = "f"\ncommand = ["./run"]\ncwd = "sub"\n'
                    'features = { flops_g = 2.5, params_m = 4.0 }\nbatch_size = 8\nepochs = 3\n')
    spec = load_jobspec_file(path)
    assert spec.cwd == str(tmp_path / "sub") and spec.features.flops_g == 2.5
    assert spec.model is None and spec.gpus == 1
    path.write_text('name = "f"\ncommand = ["./run"]\nbatch_size = 8\nepochs = 3\n')
    with pytest.raises(InputError, match=f"^{path}: field 'model': required unless"):
        load_jobspec_file(path)
    with pytest.raises(InputError, match="cannot read"):
        load_jobspec_file(tmp_path / "nope.toml")
