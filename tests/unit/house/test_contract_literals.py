"""The REST paths and the ``ADLOADER_*`` names are written once: a path's ``/v1`` only in
``adloader/rest.py``, an environment variable's name only in ``adloader/env.py``. Every other
product module takes them from there, so a path or a name cannot drift between the daemon and
its clients. Docstrings (and comments, which ``ast`` never sees) may still mention them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("adloader", "daemon", "client", "workloads", "bench", "models")
# what may only be spelt in one file: the text, and that file (relative to ROOT)
OWNED = (("/v1", "adloader/rest.py"), ("ADLOADER_", "adloader/env.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of a module and its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                found.add(id(body[0].value))
    return found


def violations(source: str, path: str) -> list[str]:
    """``path:line: ...`` for each string literal in ``source`` (a file at ``path``, relative
    to the repository) that spells an owned text outside its owner. Parts of f-strings are
    string constants too; so is a keyword argument's name (``dict(env, ADLOADER_JOB=...)``)."""
    tree = ast.parse(source, filename=path)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        elif isinstance(node, ast.keyword) and node.arg:
            text = node.arg
        else:
            continue
        for owned, owner in OWNED:
            if owned in text and path != owner:
                found.append((node.lineno, f"{path}:{node.lineno}: {text[:60]!r} spells "
                                           f"{owned!r}; take it from {owner}"))
    return [line for _, line in sorted(found)]


def _product_files() -> list[Path]:
    files = []
    for top in PRODUCT:
        files += [p for p in sorted((ROOT / top).rglob("*.py")) if "__pycache__" not in p.parts]
    return files


def test_the_checker_flags_literals_outside_their_owner():
    assert violations('x = "/v1/jobs"\n', "daemon/x.py") == [
        "daemon/x.py:1: '/v1/jobs' spells '/v1'; take it from adloader/rest.py"]
    assert violations('x = "/v1/jobs"\n', "adloader/rest.py") == []
    assert len(violations('x = f"/v1/jobs/{i}"\n', "bench/x.py")) == 1  # an f-string's part
    assert len(violations('v = os.environ["ADLOADER_" + key.upper()]\n', "adloader/c.py")) == 1
    assert len(violations('e = dict(os.environ, ADLOADER_JOB="x")\n', "bench/x.py")) == 1
    assert violations('E = "ADLOADER_JOB"\n', "adloader/env.py") == []
    docs = ('"""Reads ADLOADER_URL."""\n'
            'def f():\n    """GET /v1/jobs."""\n    return 1  # POST /v1/jobs\n'
            'class C:\n    """ADLOADER_JOB."""\n')
    assert violations(docs, "daemon/x.py") == []
    assert len(violations('def f():\n    x = 1\n    "/v1/jobs"\n', "daemon/x.py")) == 1


def test_the_product_code_walk_finds_the_files():
    names = {p.relative_to(ROOT).as_posix() for p in _product_files()}
    assert {"adloader/rest.py", "adloader/env.py", "daemon/api/app.py"} <= names


def test_no_rest_path_or_variable_name_is_spelt_outside_its_owner():
    found = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        found += violations(path.read_text(encoding="utf-8"), rel)
    assert not found, "\n".join(found)
