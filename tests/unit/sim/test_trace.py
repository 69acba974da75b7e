"""Trace format: bundled traces match the paper, round trips, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from adloader.errors import InputError
from adloader.sim.trace import (
    Trace,
    TraceJob,
    bundled_traces,
    load_trace,
    parse_trace,
    save_trace,
)


def _job(**over) -> dict:
    job = {
        "name": "a",
        "model": "Resnet18",
        "batch_size": 128,
        "gpus": 2,
        "iterations": 500,
        "workers": 6,
        "arrival_s": 0.0,
    }
    job.update(over)
    return {k: v for k, v in job.items() if v is not ...}


def test_bundled_names():
    assert bundled_traces() == ["gpu-bound-mix", "lengths-apart", "paper-dynamic", "paper-static",
                               "small-mix"]


def test_paper_static_is_fig3():
    trace = load_trace("paper-static")
    assert trace.gpus == 4
    got = {j.model: (j.batch_size, j.gpus, j.iterations, j.workers, j.gpu_ids) for j in trace.jobs}
    assert got == {
        "Resnet18": (128, 2, 500, 6, (0, 1)),
        "mdResnet12": (128, 2, 500, 6, (2, 3)),
        "smResnet20": (128, 2, 500, 6, (1, 2)),
    }
    assert all(j.arrival_s == 0 for j in trace.jobs)
    assert [j.per_gpu_batch for j in trace.jobs] == [64, 64, 64]


def test_paper_dynamic_is_table_iii():
    table = [
        ("app1", "mdResnet20", 128, 1000, 6, 0),
        ("app2", "smResnet22", 128, 1000, 6, 0),
        ("app3", "Resnet32", 128, 1500, 6, 120),
        ("app4", "VGG13", 64, 1500, 2, 420),
        ("app5", "mdResnet12", 128, 500, 6, 420),
        ("app6", "smResnet32", 128, 500, 4, 420),
        ("app7", "Resnet28", 64, 1000, 6, 800),
        ("app8", "smVGG7", 64, 1500, 4, 800),
    ]
    trace = load_trace("paper-dynamic", node_gpus=4)
    assert trace.gpus == 4
    got = [
        (j.name, j.model, j.batch_size, j.iterations, j.workers, j.arrival_s) for j in trace.jobs
    ]
    assert got == table
    assert all(j.gpus == 2 and j.gpu_ids is None for j in trace.jobs)
    assert "3.4 B" in trace.description and "21.5 M" in trace.description


def test_small_mix():
    trace = load_trace("small-mix")
    assert trace.gpus is None
    got = [(j.model, j.batch_size, j.iterations, j.arrival_s, j.gpus) for j in trace.jobs]
    assert got == [
        ("smResnet20", 32, 60, 0.0, 1),
        ("mdResnet12", 32, 60, 0.0, 1),
        ("Resnet18", 16, 40, 5.0, 1),
    ]


def test_bundled_name_with_suffix_and_as_path(tmp_path):
    assert load_trace("paper-static.json") == load_trace("paper-static")
    path = tmp_path / "mine.json"
    save_trace(load_trace("paper-dynamic"), path)
    assert load_trace(str(path)) == load_trace("paper-dynamic")


def test_round_trip(tmp_path):
    trace = parse_trace(
        {
            "name": "t",
            "description": "d",
            "gpus": 4,
            "jobs": [
                _job(name="late", arrival_s=9.5, gpu_ids=[3, 1]),
                _job(name="early", workers=None, gpus=1, batch_size=7),
            ],
        }
    )
    path = tmp_path / "t.json"
    save_trace(trace, path)
    assert not (tmp_path / "t.json.tmp").exists()
    again = load_trace(path)
    assert again == trace
    assert [j.name for j in again.jobs] == ["early", "late"]
    assert again.jobs[0].workers is None and again.jobs[1].gpu_ids == (3, 1)
    assert "gpu_ids" not in json.loads(path.read_text())["jobs"][0]


def test_bare_list_and_stable_sort(tmp_path):
    path = tmp_path / "bare.json"
    jobs = [_job(name=n, arrival_s=t) for n, t in [("x", 5), ("y", 1), ("z", 5), ("w", 1)]]
    path.write_text(json.dumps(jobs))
    trace = load_trace(path)
    assert trace.name == "bare"
    assert [j.name for j in trace.jobs] == ["y", "w", "x", "z"]


def test_frozen():
    trace = load_trace("small-mix")
    with pytest.raises(ValidationError):
        trace.jobs[0].batch_size = 3
    with pytest.raises(ValidationError):
        trace.name = "other"
    with pytest.raises(ValidationError):
        TraceJob(**_job(), colour="red")


def test_generated_like_object_validates():
    trace = Trace(jobs=(TraceJob(**_job()),), gpus=2)
    assert trace.to_json()["gpus"] == 2


BAD = [
    # (document, extra flags, words the one error line must hold)
    (
        {"jobs": [_job(name="app3", batch_size=0)]},
        [],
        ["job 'app3': field 'batch_size': must be greater than 0"],
    ),
    ({"jobs": [_job(), _job(name="b", model=...)]}, [], ["job 'b': field 'model' is missing"]),
    ({"jobs": [_job(), _job(name=...)]}, [], ["job #2: field 'name' is missing"]),
    ({"jobs": [_job(name="x", model="Resnet7")]}, [], ["job 'x'", "'model'", "Resnet7"]),
    ({"jobs": []}, [], ["no jobs"]),
    ([], [], ["no jobs"]),
    ({"name": "t"}, [], ["'jobs'", "missing"]),
    ({"jobs": [_job(name="d"), _job(name="d")]}, [], ["'d'", "more than once"]),
    (
        {"jobs": [_job(name="big", gpus=4)]},
        ["--gpus", "2"],
        ["job 'big'", "'gpus'", "the node has 2"],
    ),
    ({"gpus": 2, "jobs": [_job(name="big", gpus=4)]}, [], ["job 'big'", "'gpus'"]),
    ({"jobs": [_job(name="p", gpu_ids=[0, 5])]}, ["--gpus", "4"], ["job 'p'", "'gpu_ids'", "5"]),
    ({"jobs": [_job(name="p", gpu_ids=[0])]}, [], ["job 'p'", "'gpu_ids'", "gpus=2"]),
    ({"jobs": [_job(name="p", gpu_ids=[1, 1])]}, [], ["job 'p'", "'gpu_ids'", "repeat"]),
    ({"jobs": [_job(name="p", gpu_ids=[-1, 0])]}, [], ["job 'p'", "'gpu_ids.0'", "at least 0"]),
    ({"jobs": [_job(name="o", batch_size=129)]}, [], ["job 'o'", "'batch_size'", "divisible"]),
    ({"jobs": [_job(name="w", workers=0)]}, [], ["job 'w'", "'workers'", "at least 1"]),
    ({"jobs": [_job(name="t", arrival_s=-1)]}, [], ["job 't'", "'arrival_s'", "at least 0"]),
    ({"jobs": [_job(name="t", arrival_s=float("nan"))]}, [], ["job 't'", "'arrival_s'", "finite"]),
    ({"jobs": [_job(name="s", batch_size="128")]}, [], ["job 's'", "'batch_size'", "integer"]),
    ({"jobs": [_job(name="s", iterations=1.5)]}, [], ["job 's'", "'iterations'", "integer"]),
    ({"jobs": [_job(name="s", gpus=True)]}, [], ["job 's'", "'gpus'", "integer"]),
    (
        {"jobs": [_job(name="e", colour="red")]},
        [],
        ["job 'e': field 'colour' is not a known field"],
    ),
    ({"jobs": [_job(), 7]}, [], ["job #2", "JSON object"]),
    ({"jobs": [_job()], "owner": "me"}, [], ["'owner'", "not a known field"]),
    ({"jobs": [_job(name="")]}, [], ["job #1", "'name'", "empty"]),
    ("just a string", [], ["JSON object or a list"]),
    ({"jobs": [_job()]}, ["--gpus", "0"], ["at least 1"]),
]


@pytest.mark.parametrize("doc,flags,words", BAD)
def test_bad_trace_is_one_line(doc, flags, words, tmp_path, run):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = run("workload", "check", str(path), *flags)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"adloader: error: trace {path}")
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "Traceback" not in err and "pydantic" not in err


def test_unparseable_json_names_line(tmp_path, run):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "jobs": [\n    {"name": "a",}\n  ]\n}\n')
    code, _, err = run("workload", "check", str(path))
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "not valid JSON" in err and "line 3" in err


def test_missing_file(run):
    code, _, err = run("workload", "check", "/nonexistent/trace.json")
    assert code == 2 and len(err.splitlines()) == 1
    assert "no such file or bundled trace" in err and "paper-static" in err


def test_error_names_bundled_file():
    with pytest.raises(InputError, match=r"^trace paper-static\.json: job 'mdResnet12': .*gpu_ids"):
        load_trace("paper-static", node_gpus=2)
    with pytest.raises(InputError, match=r"^mine: job 'a': field 'gpus': needs 2 GPUs"):
        parse_trace({"jobs": [_job()]}, origin="mine", node_gpus=1)


def test_several_errors_reported_as_one_line():
    with pytest.raises(InputError) as info:
        parse_trace({"jobs": [_job(name="m", batch_size=0, iterations=0, workers=0)]})
    message = str(info.value)
    assert "\n" not in message and "(and 2 more)" in message


def test_check_and_list_print_tables(run):
    code, out, err = run("workload", "check", "paper-dynamic", "--gpus", "4")
    assert code == 0 and err == ""
    assert "mdResnet20" in out and "smVGG7" in out and "ok: 8 jobs" in out
    code, out, _ = run("workload", "list")
    assert code == 0
    for name in ("paper-static", "paper-dynamic", "small-mix"):
        assert name in out
