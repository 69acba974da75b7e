"""What ``workloads.replay.summarise`` makes of a daemon's job views and events: the CPU
weights the daemon wrote (``cpu_shares``) kept, by the trace's names, beside the plans."""

from adloader.sim.trace import parse_trace
from workloads.replay import summarise


def test_the_cpu_weights_and_their_order_are_kept_by_the_traces_names():
    trace = parse_trace({"name": "t", "gpus": 2, "jobs": [
        {"name": "a", "model": "Resnet18", "batch_size": 32, "gpus": 1, "iterations": 10,
         "arrival_s": 0, "workers": 1},
        {"name": "b", "model": "smResnet20", "batch_size": 32, "gpus": 1, "iterations": 10,
         "arrival_s": 0, "workers": 1}]},
        "test")
    ids = {"a": "j-1", "b": "j-2"}
    views = {i: {"started_at": 100.0, "submitted_at": 100.0, "finished_at": 110.0,
                 "iteration": 10, "state": "finished"} for i in ids.values()}
    events = [
        {"t": 100.5, "job": None, "kind": "plan",
         "data": {"workers": {"j-1": 1, "j-2": 1}, "resized": []}},
        {"t": 100.6, "job": None, "kind": "cpu_shares",
         "data": {"weights": {"j-1": 1800, "j-2": 224}, "rule": "order",
                  "order": ["j-1", "j-2"], "ceilings": {"j-1": 480.0, "j-2": 2400.0}}},
        {"t": 101.0, "job": None, "kind": "cpu_shares",
         "data": {"weights": {"j-2": 1024}, "rule": "workers"}}]
    out = summarise(trace, ids, views, events, {"policy": "ftf", "capacity": 2},
                    {"a": 10, "b": 10}, 100.0)
    shares = [e for e in out["events"] if e["kind"] == "cpu_shares"]
    assert shares == [{"t_s": 0.6, "kind": "cpu_shares", "weights": {"a": 1800, "b": 224},
                       "order": ["a", "b"], "ceilings": {"a": 480.0, "b": 2400.0}},
                      {"t_s": 1.0, "kind": "cpu_shares", "weights": {"b": 1024}}]
    assert [e["kind"] for e in out["events"]].count("plan") == 1
