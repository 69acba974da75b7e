"""The online model is refitted only when the model in use mispredicts the node's samples."""

from __future__ import annotations

import threading

import numpy as np

from adloader.daemon.model import online_model
from adloader.daemon.model.online_model import REFIT_EVERY, REFIT_TOLERANCE, OnlineModel
from adloader.device import synth
from adloader.device.device_profile import load_profile
from adloader.scheduling.model.samples import LoadingSample, TrainingSample


class _Tpm:
    def __init__(self):
        self.kept: dict[type, list] = {TrainingSample: [], LoadingSample: []}

    def add_job_samples(self, batch):
        for _, sample in batch:
            self.kept[type(sample)].append(sample)

    def samples(self, per_job=None, newest=None):
        return list(self.kept[TrainingSample]), list(self.kept[LoadingSample])


class _Store:
    def __init__(self):
        self.tpm = _Tpm()


class _Scheduler:
    def __init__(self, model):
        self.model = model


def _online(model, monkeypatch) -> tuple[OnlineModel, list]:
    fits: list = []
    monkeypatch.setattr(online_model, "REFIT_INTERVAL_S", 0.0)
    online = OnlineModel(model, _Store(), _Scheduler(model), threading.Lock(),
                         lambda *a: None)
    monkeypatch.setattr(online, "fit", lambda quiet=False, samples=None: fits.append(quiet))
    return online, fits


JOBS = [(64, 1.8, 11.7, 1), (128, 4.1, 25.6, 2), (32, 0.6, 0.27, 1), (256, 1.8, 11.7, 4),
        (96, 0.3, 2.2, 1), (48, 7.8, 60.2, 2)]  # six jobs' features (B, f, M, n): MIN_DISTINCT


def _samples(model, scale: float, jobs=JOBS[:3]) -> list:
    """Samples the model predicts exactly, their step times × ``scale``."""
    out = []
    for b, f, m, n in jobs:
        step = float(model.training.step_time(b, f, m, n))
        out.append(("j", TrainingSample(b, n, f, m, step * scale)))
    for d, total in [(1, 4), (2, 4), (3, 6)]:
        out.append(("j", LoadingSample(d, total, float(model.loading.rate(d, total)))))
    return out


def _feed(online, samples, times: int) -> None:
    for _ in range(times):
        online.pending.extend(samples)
        online.flush()
        online.maybe_refit()
        for t in threading.enumerate():  # the refit thread, if one started
            if t.name == "adloader-refit":
                t.join(5)


def test_a_model_that_predicts_the_samples_is_not_refitted(monkeypatch):
    model = synth.fitted_model(load_profile("paper"), 0)
    online, fits = _online(model, monkeypatch)
    _feed(online, _samples(model, 1.0 + REFIT_TOLERANCE / 2), 2 * REFIT_EVERY)
    assert fits == [] and online.skipped > 0


def test_a_model_off_by_more_than_the_tolerance_is_refitted(monkeypatch):
    model = synth.fitted_model(load_profile("paper"), 0)
    online, fits = _online(model, monkeypatch)
    _feed(online, _samples(model, 1.0 + 2 * REFIT_TOLERANCE, JOBS), 2)
    assert fits == [True] and online.skipped == 0


def test_a_kind_with_too_few_samples_to_fit_does_not_start_a_fit(monkeypatch):
    """Three training samples mispredicted by 40 %: a fit now would keep F_μ (fewer than
    MIN_REAL), so none is made until there are enough."""
    model = synth.fitted_model(load_profile("paper"), 0)
    online, fits = _online(model, monkeypatch)
    monkeypatch.setattr(online_model, "REFIT_EVERY", 1)
    _feed(online, _samples(model, 1.4, JOBS[:3])[:3], 1)
    assert fits == [] and online.skipped == 1
    _feed(online, _samples(model, 1.4, JOBS[3:])[:3], 1)  # six stored now, of six jobs
    assert fits == [True]


def test_samples_of_too_few_jobs_do_not_start_a_fit(monkeypatch):
    """Three jobs' step times mispredicted by 40 %, sample after sample: a fit would keep F_μ
    (eq. 6 has five coefficients; fewer than MIN_DISTINCT jobs fit it any way at all), so
    none is made, however many samples come — until a sixth job's do."""
    model = synth.fitted_model(load_profile("paper"), 0)
    online, fits = _online(model, monkeypatch)
    monkeypatch.setattr(online_model, "REFIT_EVERY", 1)
    for _ in range(10):
        _feed(online, _samples(model, 1.4, JOBS[:3])[:3], 1)
    assert fits == [] and online.skipped == 10
    _feed(online, _samples(model, 1.4, JOBS[3:])[:3], 1)
    assert fits == [True]


def test_a_fit_refits_only_the_parts_its_samples_spread_over():
    from adloader.daemon.model.refit import MIN_DISTINCT, MIN_SPREAD, fittable

    model = synth.fitted_model(load_profile("paper"), 0)
    few = [s for _, s in _samples(model, 1.0, JOBS[:3]) * 4]  # 12 training, 3 jobs
    many = [s for _, s in _samples(model, 1.0, JOBS)]
    assert len(JOBS) == MIN_DISTINCT
    loads = [LoadingSample(1, total, 100.0) for total in range(1, MIN_SPREAD + 3)]
    assert fittable([s for s in few if isinstance(s, TrainingSample)], loads) == (False, True)
    assert fittable([s for s in many if isinstance(s, TrainingSample)],
                    loads[:MIN_SPREAD - 1] * 3) == (True, False)


def test_relative_errors_by_kind():
    model = synth.fitted_model(load_profile("paper"), 0)
    samples = [s for _, s in _samples(model, 1.3)]
    steps, loads = online_model.relative_errors(model, samples)
    assert np.isclose(steps, 0.3 / 1.3) and np.isclose(loads, 0.0)
    assert online_model.relative_errors(model, []) == (0.0, 0.0)


def test_a_kept_prior_without_its_arrays_is_fitted_again(tmp_path, monkeypatch):
    """A prior cached by an earlier release (a non-linear part, no arrays) would be rebuilt
    in the daemon, loading scikit-learn: it is fitted again in the child instead."""
    import json

    from adloader.scheduling.model.compiled import EXPORTED

    model = synth.fitted_model(load_profile("paper"), 0).to_json()
    cache = tmp_path / "prior.json"
    fitted = []
    monkeypatch.setattr(online_model, "fit_in_child", lambda req: fitted.append(req) or model)
    online_model.prior_model("paper", cache)  # writes the cache (a fit)
    assert len(fitted) == 1
    online_model.prior_model("paper", cache)  # read back
    assert len(fitted) == 1
    kept = json.loads(cache.read_text())
    kept["model"]["training"]["regressor"] = EXPORTED[0]  # as an earlier release kept it
    kept["model"]["training"].pop("compiled", None)
    cache.write_text(json.dumps(kept))
    online_model.prior_model("paper", cache)
    assert len(fitted) == 2


def test_fits_that_do_not_help_are_spaced_out_until_a_new_job_comes(monkeypatch):
    """A node the model's forms cannot follow mispredicts after every fit: each such fit
    doubles the wait (20, 40, 80 … up to REFIT_BACKOFF_MAX_S), not a fit every 20 s; a job
    the model has not seen brings the wait back to 20 s."""
    model = synth.fitted_model(load_profile("paper"), 0)
    online, fits = _online(model, monkeypatch)
    monkeypatch.setattr(online_model, "REFIT_INTERVAL_S", 20.0)
    online.interval_s = 20.0
    now = [1000.0]
    monkeypatch.setattr(online_model.time, "monotonic", lambda: now[0])
    fitted_at = []
    wrong = _samples(model, 1.0 + 3 * REFIT_TOLERANCE, JOBS)  # still wrong after each "fit"
    for second in range(700):  # a sample a second for 700 s, of six jobs in turn
        before = len(fits)
        _feed(online, [wrong[second % len(JOBS)]], 1)
        if len(fits) > before:
            fitted_at.append(now[0] - 1000.0)
        now[0] += 1.0
    gaps = np.diff(fitted_at).tolist()
    assert gaps[:4] == [20.0, 40.0, 80.0, 160.0], fitted_at
    assert max(gaps) == online_model.REFIT_BACKOFF_MAX_S and len(fits) <= 7, fitted_at
    online.take([("a-new-job", wrong[0][1])])  # its first sample
    assert online.interval_s == 20.0
