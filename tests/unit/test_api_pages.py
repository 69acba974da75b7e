"""GET /v1/jobs and GET /v1/events a page at a time: the cursor header, the filters, and a
4xx naming the parameter for every bad one (never a 500); a request without paging
parameters answers as before."""

from __future__ import annotations

import pytest
from fake_service import TOKEN, FakeService
from fastapi.testclient import TestClient

from adloader import rest
from adloader.daemon.api import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SPEC = {"name": "r18", "command": ["python", "train.py"], "model": "Resnet18",
        "batch_size": 32, "iterations": 100}  # fmt: skip


@pytest.fixture
def client() -> TestClient:
    client = TestClient(create_app(FakeService(), TOKEN), raise_server_exceptions=False)
    for i in range(7):
        client.post(rest.JOBS, json={**SPEC, "name": f"n{i % 2}"}, headers=AUTH)
    client.delete(rest.job_path("j-000003"), headers=AUTH)
    return client


def test_a_request_without_paging_gets_the_first_page_as_before(client):
    r = client.get(rest.JOBS, headers=AUTH)
    assert r.status_code == 200 and len(r.json()) == 7
    assert rest.NEXT_CURSOR not in r.headers  # everything fit


def test_pages_follow_the_cursor_and_filters_apply(client):
    seen, params = [], {"limit": 3}
    while True:
        r = client.get(rest.JOBS, params=params, headers=AUTH)
        assert r.status_code == 200, r.text
        seen += [j["id"] for j in r.json()]
        if rest.NEXT_CURSOR not in r.headers:
            break
        params = {"limit": 3, "cursor": r.headers[rest.NEXT_CURSOR]}
    assert seen == [f"j-{i:06d}" for i in range(1, 8)]
    one = client.get(rest.JOBS, params={"state": "cancelled,running"}, headers=AUTH).json()
    assert [j["id"] for j in one] == ["j-000003"]
    both = client.get(f"{rest.JOBS}?state=cancelled&state=queued&name=n1", headers=AUTH)
    assert [j["id"] for j in both.json()] == ["j-000002", "j-000004", "j-000006"]


def test_events_carry_a_cursor_to_poll_with(client):
    r = client.get(rest.EVENTS, params={"limit": 5}, headers=AUTH)
    assert [e["id"] for e in r.json()] == [1, 2, 3, 4, 5]
    r = client.get(rest.EVENTS, params={"cursor": r.headers[rest.NEXT_CURSOR]}, headers=AUTH)
    assert [e["id"] for e in r.json()] == [6, 7, 8]
    r = client.get(rest.EVENTS, params={"cursor": r.headers[rest.NEXT_CURSOR]}, headers=AUTH)
    assert r.json() == [] and r.headers[rest.NEXT_CURSOR]
    kinds = client.get(rest.EVENTS, params={"kind": "cancelled"}, headers=AUTH).json()
    assert [e["job"] for e in kinds] == ["j-000003"]
    assert [e["id"] for e in client.get(rest.EVENTS, params={"since": 6},
                                        headers=AUTH).json()] == [7, 8]


@pytest.mark.parametrize(("path", "query", "status", "named"), [
    (rest.JOBS, "limit=0", 422, "limit"),
    (rest.JOBS, f"limit={rest.PAGE_MAX + 1}", 422, "limit"),
    (rest.JOBS, "limit=ten", 422, "limit"),
    (rest.JOBS, "state=done", 422, "state"),
    (rest.JOBS, "cursor=bogus", 400, "cursor"),
    (rest.JOBS, "cursor=" + "x" * 300, 422, "cursor"),
    (rest.JOBS, "since=-1", 422, "since"),
    (rest.JOBS, "until=nan", 422, "until"),
    (rest.JOBS, "name=" + "n" * 100, 422, "name"),
    (rest.EVENTS, "limit=0", 422, "limit"),
    (rest.EVENTS, "since=-3", 422, "since"),
    (rest.EVENTS, "cursor=bogus", 400, "cursor"),
    (rest.EVENTS, "t_since=inf", 422, "t_since"),
])
def test_bad_parameters_are_a_4xx_naming_them(client, path, query, status, named):
    r = client.get(f"{path}?{query}", headers=AUTH)
    assert r.status_code == status, r.text
    assert f"'{named}" in r.json()["detail"], r.json()


def test_a_cursor_of_one_list_is_refused_by_the_other(client):
    cursor = client.get(rest.EVENTS, params={"limit": 1}, headers=AUTH).headers[
        rest.NEXT_CURSOR]
    r = client.get(rest.JOBS, params={"cursor": cursor}, headers=AUTH)
    assert r.status_code == 400 and "query parameter 'cursor'" in r.json()["detail"]


def test_the_openapi_document_names_the_parameters_and_the_header(client):
    doc = client.get("/openapi.json").json()
    listing = doc["paths"][rest.JOBS]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"limit", "cursor", "state", "name",
                                                           "since", "until"}
    assert rest.NEXT_CURSOR in listing["responses"]["200"]["headers"]
    events = doc["paths"][rest.EVENTS]["get"]
    assert {p["name"] for p in events["parameters"]} >= {"limit", "cursor", "since", "kind"}
