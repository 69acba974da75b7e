"""The OpenAPI document changes only on purpose (issue 24, item 7): its contract — each
operation's method, path, id, parameters, request body and answers, and each schema's fields
and which are required — is compared with ``tests/api/contract.json``. A change to the API
shows here as a diff; after a deliberate one, write the file anew with
``ADLOADER_WRITE_CONTRACT=1 python3 -m pytest tests/unit/contracts/test_openapi_snapshot.py`` and
say it in CHANGELOG.md. (Descriptions and titles are left out: wording is not contract.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

from adloader.daemon.api.app import create_app

SNAPSHOT = Path(__file__).parents[2] / "api" / "contract.json"


def contract(schema: dict) -> dict:
    ops = {}
    for path, item in schema["paths"].items():
        for method, op in item.items():
            body = op.get("requestBody", {}).get("content", {})
            ops[f"{method.upper()} {path}"] = {
                "operationId": op.get("operationId"),
                "parameters": sorted((p["in"], p["name"], bool(p.get("required")))
                                     for p in op.get("parameters", [])),
                "body": {k: v.get("schema", {}).get("$ref") for k, v in body.items()},
                "answers": {code: sorted(a.get("content", {})) for code, a in
                            sorted(op["responses"].items())},
            }
    schemas = {name: {"properties": sorted(s.get("properties", {})),
                      "required": sorted(s.get("required", []))}
               for name, s in sorted(schema["components"]["schemas"].items())}
    return json.loads(json.dumps({"operations": ops, "schemas": schemas}))  # tuples as lists


def test_the_api_is_the_one_recorded():
    now = contract(create_app(None, "token").openapi())
    if os.environ.get("ADLOADER_WRITE_CONTRACT"):
        SNAPSHOT.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(SNAPSHOT.read_text())
    changed = sorted(k for k in recorded["operations"].keys() | now["operations"].keys()
                     if recorded["operations"].get(k) != now["operations"].get(k))
    schemas = sorted(k for k in recorded["schemas"].keys() | now["schemas"].keys()
                     if recorded["schemas"].get(k) != now["schemas"].get(k))
    assert (changed, schemas) == ([], []), (
        "the API changed: if on purpose, write tests/api/contract.json anew (see the module) "
        "and list the change in CHANGELOG.md")
