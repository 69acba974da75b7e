"""GET /v1/jobs and GET /v1/events a page at a time: the cursor header, the filters, and a
4xx naming the parameter for every bad one (never a 500); a request without paging
parameters answers as before."""

from __future__ import annotations

import re

import pytest
from fake_service import TOKEN, FakeService
from fastapi.testclient import TestClient

from adloader import rest
from adloader.daemon.api.app import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SPEC = {"name": "r18", "command": ["python", "train.py"], "model": "Resnet18",
        "batch_size": 32, "iterations": 100}  # fmt: skip


@pytest.fixture
def client() -> TestClient:
    client = TestClient(create_app(FakeService(), TOKEN), raise_server_exceptions=False)
    for i in range(7):
        client.post(rest.JOBS, json={**SPEC, "name": f"n{i % 2}"}, headers=AUTH)
    client.post(rest.job_path("j-000003", rest.CANCEL), headers=AUTH)
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
    (rest.JOBS, "cursor=bogus", 422, "cursor"),
    (rest.JOBS, "cursor=e.3", 422, "cursor"),  # an events cursor
    (rest.JOBS, "cursor=" + "x" * 300, 422, "cursor"),
    (rest.JOBS, "since=-1", 422, "since"),
    (rest.JOBS, "until=nan", 422, "until"),
    (rest.JOBS, "name=" + "n" * 100, 422, "name"),
    (rest.EVENTS, "limit=0", 422, "limit"),
    (rest.EVENTS, "since=-3", 422, "since"),
    (rest.EVENTS, "cursor=bogus", 422, "cursor"),
    (rest.EVENTS, "cursor=j.j-000001", 422, "cursor"),  # a jobs cursor
    (rest.EVENTS, "cursor=e.1x", 422, "cursor"),
    (rest.EVENTS, "&".join(["kind=a"] * 33), 422, "kind"),  # maxItems: 32
    (rest.EVENTS, "&".join(["kind="] * 33), 422, "kind"),  # blanks count as given
    (rest.EVENTS, "kind=" + "a," * 40, 422, "kind"),  # maxLength 64, commas and all
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
    assert r.status_code == 422 and "query parameter 'cursor'" in r.json()["detail"]


def _cursor_pattern(doc: dict, path: str) -> str:
    (cursor,) = [p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == "cursor"]
    (pattern,) = [s["pattern"] for s in cursor["schema"]["anyOf"] if "pattern" in s]
    return pattern


def test_the_schema_says_what_a_cursor_is_and_each_cursor_it_allows_is_one(client):
    """Every cursor the daemon issues matches its list's declared pattern, and every string
    that matches it is a cursor: the items after the one it names (none: the end)."""
    doc = client.get("/openapi.json").json()
    jobs, events = _cursor_pattern(doc, rest.JOBS), _cursor_pattern(doc, rest.EVENTS)
    issued = client.get(rest.JOBS, params={"limit": 2}, headers=AUTH).headers[rest.NEXT_CURSOR]
    assert re.fullmatch(jobs, issued) and not re.fullmatch(events, issued)
    issued = client.get(rest.EVENTS, params={"limit": 2}, headers=AUTH).headers[
        rest.NEXT_CURSOR]
    assert re.fullmatch(events, issued) and not re.fullmatch(jobs, issued)
    for cursor, after in (("j.j-000005", ["j-000006", "j-000007"]), ("j.0", None),
                          ("j.zz", []), ("j.z@b:c_d.e", [])):
        assert re.fullmatch(jobs, cursor)
        r = client.get(rest.JOBS, params={"cursor": cursor}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert after is None or [j["id"] for j in r.json()] == after
        assert rest.NEXT_CURSOR not in r.headers  # the end of the list
    for cursor, after in (("e.6", [7, 8]), ("e.0", None), ("e.99", []),
                          ("e." + "9" * 19, [])):  # past the largest event id: nothing after
        assert re.fullmatch(events, cursor)
        r = client.get(rest.EVENTS, params={"cursor": cursor}, headers=AUTH)
        assert r.status_code == 200, r.text
        assert after is None or [e["id"] for e in r.json()] == after
        assert re.fullmatch(events, r.headers[rest.NEXT_CURSOR])


def test_kind_is_bounded_as_given_and_each_one_may_list_several(client):
    """``kind`` has at most 32 values of at most 64 characters, as sent (the schema's
    maxItems, maxLength); each may name several kinds, comma-separated."""
    many = "&".join(["kind=submitted,nothing"] * 32)  # 64 kinds once split: within bounds
    r = client.get(f"{rest.EVENTS}?{many}", headers=AUTH)
    assert r.status_code == 200, r.text
    assert {e["kind"] for e in r.json()} == {"submitted"}
    r = client.get(f"{rest.EVENTS}?kind=&kind=cancelled", headers=AUTH)
    assert [e["job"] for e in r.json()] == ["j-000003"]
    doc = client.get("/openapi.json").json()
    (kind,) = [p for p in doc["paths"][rest.EVENTS]["get"]["parameters"] if p["name"] == "kind"]
    assert kind["schema"]["maxItems"] == 32 and kind["schema"]["items"]["maxLength"] == 64


def test_the_openapi_document_names_the_parameters_and_the_header(client):
    doc = client.get("/openapi.json").json()
    listing = doc["paths"][rest.JOBS]["get"]
    assert {p["name"] for p in listing["parameters"]} >= {"limit", "cursor", "state", "name",
                                                           "since", "until"}
    assert rest.NEXT_CURSOR in listing["responses"]["200"]["headers"]
    events = doc["paths"][rest.EVENTS]["get"]
    assert {p["name"] for p in events["parameters"]} >= {"limit", "cursor", "since", "kind"}
