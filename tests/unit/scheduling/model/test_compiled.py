"""A fitted regressor exported as arrays predicts as scikit-learn does, with no sklearn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from adloader.scheduling.model.compiled import EXPORTED, Compiled, export
from adloader.scheduling.model.samples import LoadingSample, TrainingSample
from adloader.scheduling.model.throughput import (
    LoadingRateModel,
    ThroughputModel,
    TrainingRateModel,
    _regressor,
    training_features,
)


@pytest.mark.parametrize("name", EXPORTED)
@pytest.mark.parametrize("seed", range(4))
def test_exported_regressor_predicts_as_sklearn_does(name, seed):
    rng = np.random.default_rng(seed)
    width = 5 if seed % 2 else 2  # F_μ's features, F_λ's
    x = rng.lognormal(size=(60 + 40 * seed, width)) * rng.choice([1e-3, 1.0, 1e3], width)
    y = x @ rng.normal(size=width) + rng.normal(size=len(x))
    fitted = _regressor(name, seed, len(x)).fit(x, y)
    queries = np.vstack([x[:7], rng.lognormal(size=(200, width)) * x.std(axis=0)])
    got = Compiled(name, export(name, fitted)).predict(queries)
    np.testing.assert_allclose(got, fitted.predict(queries), rtol=1e-9, atol=1e-12)


def _models(seed: int) -> tuple[TrainingRateModel, LoadingRateModel]:
    rng = np.random.default_rng(seed)
    training = [TrainingSample(int(b), int(n), f, m, s) for b, n, f, m, s in zip(
        rng.choice([32, 64, 128], 40), rng.choice([1, 2], 40), rng.uniform(0.5, 4, 40),
        rng.uniform(5, 50, 40), rng.uniform(0.05, 0.5, 40), strict=True)]
    loading = [LoadingSample(int(d), int(d + e), r) for d, e, r in zip(
        rng.integers(1, 6, 40), rng.integers(0, 8, 40), rng.uniform(100, 900, 40), strict=True)]
    return (TrainingRateModel("random_forest", np.array(
                [[s.batch_size, s.flops_g, s.params_m, s.gpus, s.step_s] for s in training]),
                {}, seed),
            LoadingRateModel("polynomial", np.array(
                [[s.job_workers, s.node_workers, s.loading_rate] for s in loading]), {},
                LoadingRateModel._fit_stages(np.array(
                    [[s.job_workers, s.node_workers, s.loading_rate] for s in loading]))[0],
                seed))


def test_a_model_read_back_predicts_what_it_did_and_carries_its_arrays():
    training, loading = _models(3)
    model = ThroughputModel(training, loading)
    again = ThroughputModel.from_json(model.to_json())
    x = (np.array([32, 64, 128]), np.array([1.0, 2.0, 3.0]), np.array([5.0, 20, 40]),
         np.array([1, 2, 1]))
    np.testing.assert_allclose(again.training.step_time(*x), training.step_time(*x), rtol=1e-12)
    np.testing.assert_allclose(again.loading_table(12), model.loading_table(12), rtol=1e-12)
    assert isinstance(again.training._model, Compiled) and isinstance(again.loading._model,
                                                                       Compiled)
    assert again.to_json() == model.to_json()  # read back and written again: the same JSON
    assert training_features(*x).shape == (3, 5)


@pytest.mark.processes  # a fresh interpreter
def test_the_daemon_side_reads_a_nonlinear_model_without_importing_sklearn(tmp_path):
    """What the daemon does with the child's answer: ``ThroughputModel.from_json``, a
    prediction and the loading table, in a process where scikit-learn never loads."""
    model = ThroughputModel(*_models(1))
    path = tmp_path / "model.json"
    import json

    path.write_text(json.dumps(model.to_json()))
    code = ("import json, sys; from adloader.scheduling.model.throughput import ThroughputModel; "
            f"m = ThroughputModel.from_json(json.load(open({str(path)!r}))); "
            "m.loading_table(16); print(m.training_throughput(128, 2, 2.0, 11.0)); "
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('sklearn', 'scipy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert float(out[0]) == pytest.approx(model.training_throughput(128, 2, 2.0, 11.0),
                                          rel=1e-12)
    assert out[1] == "[]", out[1]
