"""adloader.scheduling.node_summary against hand-computed cases on a linear loading table."""

from __future__ import annotations

import numpy as np
import pytest

from adloader.scheduling.node_summary import summary


def _table(cap=8, per=10.0):
    d, node = np.meshgrid(np.arange(cap + 1), np.arange(cap + 1))
    return np.where(d <= node, per * d, 0.0).astype(float)  # λ(d; D) = 10 d, no contention


def test_free_idle_and_the_next_worker_by_hand():
    # a: GPU-bound at 25/s holding 5 workers (3 would do); b: data-bound at 2 workers
    out = summary({"a": 25.0, "b": 100.0}, {"a": 5, "b": 2}, 8, _table())
    assert out["node_workers"] == 7 and out["free_workers"] == 1
    assert out["idle_workers"] == 2  # a: 30 ≥ 25 with 3 workers
    assert out["predicted_rate"] == pytest.approx(25 + 20)
    assert out["marginal_gain"] == pytest.approx(10.0)  # one more to b
    assert out["spare_rate"] == pytest.approx(30.0)  # 1 free + 2 idle


def test_a_full_node_offers_nothing_more():
    out = summary({"a": 1000.0}, {"a": 8}, 8, _table())
    assert (out["free_workers"], out["idle_workers"], out["marginal_gain"]) == (0, 0, 0.0)
    assert out["spare_rate"] == 0.0


def test_an_empty_node_offers_everything():
    out = summary({}, {}, 8, _table())
    assert out["free_workers"] == 8 and out["spare_rate"] == pytest.approx(80.0)
    assert out["marginal_gain"] == 0.0 and out["jobs"] == 0
