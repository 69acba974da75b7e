import json

import numpy as np
import pytest

from adloader.errors import InputError
from adloader.scheduling.model.samples import LoadingSample, TrainingSample
from adloader.scheduling.model.throughput import LoadingRateModel, ThroughputModel


def test_paper_profile_targets_r2(paper_model):
    """Issue targets: held-out R² ≥ 0.95 for F_μ and ≥ 0.98 for F_λ on noisy paper samples."""
    assert max(paper_model.training.scores.values()) >= 0.95
    assert paper_model.training.scores[paper_model.training.regressor] == max(
        paper_model.training.scores.values())
    assert paper_model.loading.scores[paper_model.loading.regressor] >= 0.98
    assert set(paper_model.training.scores) == {"linear", "polynomial", "knn", "random_forest"}


def test_stages_are_learned_not_typed(paper_model, paper_profile):
    stages = paper_model.loading.stages
    assert abs(stages.contention_from - 11) <= 1
    assert abs(stages.saturation_at - 24) <= 1
    free, contended, saturated = stages.slopes
    assert free > contended > saturated
    assert abs(saturated) < 0.1 * free


def test_stages_move_with_the_data():
    samples = []
    for node in range(1, 31):
        total = 50 * min(node, 5) + 10 * max(0, min(node, 20) - 5)
        for d in (1, node):
            samples.append(LoadingSample(d, node, d / node * total))
    model = LoadingRateModel.fit(samples)
    assert (model.stages.contention_from, model.stages.saturation_at) == (5, 20)
    assert model.rate(3, 30) == pytest.approx(3 / 30 * (250 + 150), rel=1e-6)


def test_contention_depends_on_the_node_total(paper_model):
    alone = paper_model.loading.rate(6, 6)
    crowded = paper_model.loading.rate(6, 18)
    assert crowded < alone * 0.95


def test_throughput_and_workers_needed(paper_model):
    mu = paper_model.training_throughput(128, 2, 3.63, 11.69)  # Resnet18, B=128 on 2 GPUs
    d_star = paper_model.workers_needed(mu, 18, 18)
    assert paper_model.loading.rate(d_star, 18) >= mu > paper_model.loading.rate(d_star - 1, 18)
    assert paper_model.throughput(128, 2, 3.63, 11.69, 18, 18) == pytest.approx(mu)
    assert paper_model.throughput(128, 2, 3.63, 11.69, 1, 18) < mu


def test_loading_table_is_monotone(paper_model):
    table = paper_model.loading_table(30)
    for d in range(1, 31):
        column = table[d:, d]
        assert np.all(np.diff(column) <= 1e-9)
        assert np.all(table[:d, d] == 0)


def test_json_round_trip_predicts_the_same(paper_model):
    again = ThroughputModel.from_json(json.loads(json.dumps(paper_model.to_json())))
    assert again.training.regressor == paper_model.training.regressor
    for args in [(64, 3.6, 11.7, 2), (32, 0.3, 0.9, 1), (128, 22.4, 9.9, 4)]:
        assert again.training.step_time(*args) == pytest.approx(
            paper_model.training.step_time(*args))
    assert again.loading.rate(7, 20) == pytest.approx(paper_model.loading.rate(7, 20))


def test_bad_inputs():
    with pytest.raises(InputError, match="at least 5 training samples"):
        ThroughputModel.fit([TrainingSample(8, 1, 1.0, 1.0, 0.1)] * 2, [])
    with pytest.raises(InputError, match="not an adloader throughput model"):
        ThroughputModel.from_json({"kind": "other"})


def test_a_handful_of_samples_still_fits():
    """Online refits start from six samples: every regressor must cope (kNN has k ≤ n)."""
    training = [TrainingSample(32, 1, 0.3, 0.9, 0.02 + 0.001 * i) for i in range(6)]
    loading = [LoadingSample(d, 4, 100.0 * d) for d in (1, 2, 3, 4, 2, 1)]
    model = ThroughputModel.fit(training, loading)
    assert set(model.training.scores) == {"linear", "polynomial", "knn", "random_forest"}
    assert model.loading.rate(2, 4) > 0
