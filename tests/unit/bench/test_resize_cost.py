"""``adloader.bench.live.resize_cost``: a resize's cost and a window's noise, read from a live
run's progress marks (a synthetic ``live.json``: no processes)."""

from __future__ import annotations

import pytest

from adloader.bench.live.resize_cost import resize_cost, resizes

B = 32


def job(name: str, rate_at, end_s: float = 40.0, origin: float = 1.8e9) -> dict:
    """A job whose marks (every 0.25 s, clock ``origin`` + t) follow ``rate_at(t)`` batches/s."""
    marks, done, t = [], 0.0, 0.0
    while t < end_s - 1e-9:
        t += 0.25
        done += rate_at(t) * 0.25
        marks.append([origin + t, done])
    return {"name": name, "batch_size": B, "end_s": end_s, "progress": marks}


def run(jobs: list[dict], timeline: list[dict], policy: str = "ftf") -> dict:
    return {"policy": policy, "realloc": policy == "ftf", "jobs": jobs, "timeline": timeline}


def test_a_resize_that_stalls_the_node_reads_as_its_dip_and_the_others_as_they_were():
    """At 20 s job a's workers change; a trains at half its rate for 3 s after, b as before."""
    a = job("a", lambda t: 5.0 if 20 < t <= 23 else 10.0)
    b = job("b", lambda t: 8.0)
    timeline = [{"t_s": 0.0, "workers": {"a": 4, "b": 4}},
                {"t_s": 20.0, "workers": {"a": 6, "b": 4}},
                {"t_s": 20.1, "workers": {"a": 6, "b": 3}}]  # one plan's two commands
    assert resizes(run([a, b], timeline)) == [(20.0, {"a", "b"})]
    timeline = timeline[:2]
    cost = resize_cost([{"runs": [run([a, b], timeline)]}])["after_resize"]
    assert cost["resized"]["resizes"] == cost["others"]["resizes"] == 1
    assert cost["resized"]["after"][:3] == pytest.approx([0.5] * 3, abs=0.02)
    assert cost["resized"]["after"][4:] == pytest.approx([1.0] * 6, abs=0.02)
    assert cost["others"]["after"] == pytest.approx([1.0] * 10, abs=0.02)


def test_a_resize_near_another_or_the_end_is_left_out():
    a, b = job("a", lambda t: 10.0), job("b", lambda t: 8.0)
    near = [{"t_s": 0.0, "workers": {"a": 4, "b": 4}}, {"t_s": 20.0, "workers": {"a": 5, "b": 4}},
            {"t_s": 23.0, "workers": {"a": 6, "b": 4}}, {"t_s": 35.0, "workers": {"a": 7, "b": 4}}]
    cost = resize_cost([{"runs": [run([a, b], near)]}])["after_resize"]
    assert cost["resized"]["resizes"] == 0  # 20 and 23 too close; 35 too near the end
    apart = near[:2] + near[3:]
    assert resize_cost([{"runs": [run([a, b], apart)]}])["after_resize"]["resized"][
        "resizes"] == 1  # 20 alone


def test_a_windows_halves_read_apart_where_the_rate_swings_within_it():
    steady = run([job("a", lambda t: 10.0), job("b", lambda t: 8.0)], [], "no daemon: even")
    swings = run([job("a", lambda t: 12.0 if int(t // 4) % 2 else 8.0), job("b", lambda t: 8.0)],
                 [], "no daemon: requested")
    spread = resize_cost([{"runs": [steady, swings]}])["window_spread"]
    assert spread["no daemon: even"]["median"] == pytest.approx(0.0, abs=0.01)
    assert spread["no daemon: requested"]["median"] == pytest.approx(4 / 18, abs=0.04)
    assert spread["no daemon: even"]["windows"] == 4  # 4–12, 12–20, 20–28, 28–36 s
