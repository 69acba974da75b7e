"""Throughput prediction model, TPM (A-Dloader §III-B).

- Training rate F_μ (eq. 6): 1/F_μ = α0·(b·f) + α1·(M·n) + α2·(b·M) + α3·M + α4, learned by
  the regressor with the best held-out R² among linear, polynomial, k-nearest-neighbour and
  random forest (Table I). b is the per-GPU batch, f forward GFLOPs per sample, M million
  parameters, n GPUs. μ is in iterations (global mini-batches) per second.
- Loading rate F_λ (eq. 7, Fig. 5): the node loads L(D) samples/s with D workers in all,
  in three stages — contention-free, contention, saturation — whose breakpoints are learned
  from the samples; a job with d of them loads λ(d; D) = d/D · L(D) samples/s.
- Job throughput T(d) = B·min(μ, λ(d)/B) = min(B·μ, λ(d; D)) samples/s (eq. 5), and
  d* = the fewest workers whose λ reaches B·μ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from adloader.errors import InputError
from adloader.scheduling.model.compiled import EXPORTED, Compiled, export
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

TEST_FRACTION = 0.4  # the paper trains on 60 % of the samples and validates on 40 %
# ... and picks the regressor by that held-out R²; one split of a dozen samples is a coin
# toss (a node's 14 loading samples: a polynomial of (d, D) won on 2 of 3 splits, and its
# L(D) peaked at 4 workers where the node saturates at 2), so the pick averages the held-out
# R² of this many 60/40 splits (each regressor on the same splits)
SPLITS = 5
MAX_BREAKPOINTS = 64  # candidate breakpoints of the stage search (all integers on small nodes)


def training_features(batch_size, flops_g, params_m, gpus) -> np.ndarray:
    """Eq. 6's regressors (b·f, M·n, b·M, M, 1), one row per sample."""
    b, f, m, n = (np.asarray(x, dtype=float) for x in (batch_size, flops_g, params_m, gpus))
    b, f, m, n = np.broadcast_arrays(b, f, m, n)
    return np.stack([b * f, m * n, b * m, m, np.ones_like(b)], axis=-1)


def _regressor(name: str, seed: int, n_train: int = 5):
    """A fresh scikit-learn regressor (imported here: fitting is the only user of sklearn)."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import LinearRegression
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PolynomialFeatures, StandardScaler

    if name == "linear":
        return LinearRegression(fit_intercept=False)
    if name == "polynomial":
        return make_pipeline(PolynomialFeatures(2), StandardScaler(), LinearRegression())
    if name == "knn":
        k = max(1, min(5, n_train))  # a handful of samples early on: fewer neighbours
        return make_pipeline(StandardScaler(), KNeighborsRegressor(k, weights="distance"))
    if name == "random_forest":
        return RandomForestRegressor(n_estimators=100, random_state=seed, n_jobs=1)
    raise InputError(f"unknown regressor {name!r}")


REGRESSORS = ("linear", "polynomial", "knn", "random_forest")


def _split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * TEST_FRACTION)))
    return order[n_test:], order[:n_test]


def _splits(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``SPLITS`` 60/40 splits of n samples (the first is ``_split(n, seed)``)."""
    return [_split(n, seed + k) for k in range(SPLITS)]


def _mean_scores(per_split: list[dict[str, float]]) -> dict[str, float]:
    return {name: float(np.mean([scores[name] for scores in per_split]))
            for name in per_split[0]}


def _r2(truth, predicted) -> float:
    """Held-out R²; a constant held-out set (R² undefined) scores as nothing learnt."""
    from sklearn.metrics import r2_score

    value = float(r2_score(truth, predicted)) if len(truth) > 1 else float("nan")
    return value if np.isfinite(value) else -1.0


def _pick(scores: dict[str, float]) -> str:
    return max(scores, key=lambda k: (scores[k], -list(scores).index(k)))


class TrainingRateModel:
    """F_μ (eq. 6): iterations/s of a job from (b, f, M, n).

    When the linear regressor wins (eq. 6 is linear in its features), its coefficients α are
    kept and predictions are ``x · α`` — a model read back from JSON then needs no sklearn."""

    def __init__(self, regressor: str, samples: np.ndarray, scores: dict[str, float], seed=0,
                 coef=None, compiled: dict | None = None):
        self.regressor, self.samples, self.scores, self.seed = regressor, samples, scores, seed
        self.coef = None if coef is None else np.asarray(coef, float)
        self._model = None
        if self.coef is None and compiled is not None and regressor in EXPORTED:
            self._model = Compiled(regressor, compiled)  # fitted elsewhere: no sklearn here
        elif self.coef is None:
            x, y = training_features(*samples[:, :4].T), samples[:, 4]
            self._model = _regressor(regressor, seed, len(samples)).fit(x, y)
            if regressor == "linear":
                self.coef, self._model = np.asarray(self._model.coef_, float), None

    @classmethod
    def fit(cls, samples: Sequence[TrainingSample], seed: int = 0) -> TrainingRateModel:
        if len(samples) < 5:
            raise InputError(f"F_μ needs at least 5 training samples, got {len(samples)}")
        data = np.array(
            [[s.batch_size, s.flops_g, s.params_m, s.gpus, s.step_s] for s in samples], float
        )
        x, y = training_features(*data[:, :4].T), data[:, 4]
        per_split = []
        for train, test in _splits(len(data), seed):
            scores = {}
            for name in REGRESSORS:
                model = _regressor(name, seed, len(train)).fit(x[train], y[train])
                predicted = 1.0 / np.maximum(model.predict(x[test]), 1e-9)
                scores[name] = _r2(1.0 / y[test], predicted)
            per_split.append(scores)
        scores = _mean_scores(per_split)
        return cls(_pick(scores), data, scores, seed)

    def step_time(self, batch_size, flops_g, params_m, gpus) -> np.ndarray:
        """1/F_μ seconds for per-GPU batch b (never below a microsecond)."""
        x = training_features(batch_size, flops_g, params_m, gpus)
        flat = x.reshape(-1, 5)
        step = flat @ self.coef if self.coef is not None else self._model.predict(flat)
        return np.maximum(step, 1e-6).reshape(x.shape[:-1])

    def rate(self, batch_size, flops_g, params_m, gpus) -> np.ndarray:
        """F_μ: iterations per second."""
        return 1.0 / self.step_time(batch_size, flops_g, params_m, gpus)

    def to_json(self) -> dict:
        return {
            "regressor": self.regressor,
            "scores": self.scores,
            "seed": self.seed,
            "samples": self.samples.round(9).tolist(),
            **({"coef": self.coef.tolist()} if self.coef is not None else {}),
            **_exported(self.regressor, self._model),
        }

    @classmethod
    def from_json(cls, data: dict) -> TrainingRateModel:
        samples = np.array(data["samples"], float)
        return cls(data["regressor"], samples, data["scores"], data["seed"], data.get("coef"),
                   data.get("compiled"))


def _exported(name: str, model) -> dict:
    """``{"compiled": arrays}`` for a regressor a reader can predict with, numpy only."""
    if isinstance(model, Compiled):
        return {"compiled": model.data}
    data = export(name, model) if model is not None and name in EXPORTED else None
    return {"compiled": data} if data is not None else {}


def _hinges(d, node, k1, k2) -> np.ndarray:
    """Regressors of the staged λ: d, d·(D−k1)+/D, d·(D−k2)+/D, so L(D) is piecewise linear."""
    d, node = np.asarray(d, float), np.maximum(np.asarray(node, float), 1e-9)
    return np.stack(
        [d, d * np.maximum(0.0, node - k1) / node, d * np.maximum(0.0, node - k2) / node], axis=-1
    )


@dataclass(frozen=True)
class Stages:
    """The learned stages of L(D) (Fig. 5): per-worker slopes and where they change."""

    contention_from: int
    saturation_at: int
    slopes: tuple[float, float, float]  # samples/s per added worker in each stage


class LoadingRateModel:
    """F_λ (eq. 7 with contention): λ(d; D) samples/s, d job workers among D node workers."""

    def __init__(self, regressor, samples: np.ndarray, scores, stages: Stages, seed=0,
                 compiled: dict | None = None):
        self.regressor, self.samples, self.scores, self.stages, self.seed = (
            regressor, samples, scores, stages, seed,
        )
        self._model = None
        if compiled is not None and regressor in EXPORTED:
            self._model = Compiled(regressor, compiled)  # fitted elsewhere: no sklearn here
        elif regressor != "staged":
            self._model = _regressor(regressor, seed, len(samples)).fit(samples[:, :2],
                                                                        samples[:, 2])

    @staticmethod
    def _breakpoints(node: np.ndarray) -> list[int]:
        """Candidate breakpoints: every integer up to the largest node total seen, or on a
        large node ``MAX_BREAKPOINTS`` quantiles of the totals seen (the search is O(k²))."""
        top = int(node.max())
        if top <= MAX_BREAKPOINTS:
            return list(range(1, top + 1))
        quantiles = np.quantile(node, np.linspace(0, 1, MAX_BREAKPOINTS))
        return sorted({max(1, int(round(q))) for q in quantiles} | {top})

    @staticmethod
    def _fit_stages(data: np.ndarray) -> tuple[Stages, np.ndarray]:
        """Breakpoints k1 < k2 by least squares over pairs of candidate breakpoints (every
        integer pair in the samples' range on a node of up to MAX_BREAKPOINTS workers), each
        stage's slope no steeper than the one before (contention never helps)."""
        from scipy.optimize import nnls
        from sklearn.linear_model import LinearRegression

        d, node, y = data[:, 0], data[:, 1], data[:, 2]
        top = int(node.max())
        candidates = LoadingRateModel._breakpoints(node)
        sign = np.array([1.0, -1.0, -1.0])  # slopes never rise: β0 ≥ 0, β1 ≤ 0, β2 ≤ 0
        best = None  # grid search of the breakpoints by non-negative least squares
        for i, k1 in enumerate(candidates):
            for k2 in [*candidates[i + 1:], top + 1]:
                x = _hinges(d, node, k1, k2) * sign
                coef, residual = nnls(x, y)
                if best is None or residual < best[0] - 1e-9 * abs(best[0]):
                    best = (residual, k1, k2)
        _, k1, k2 = best
        fit = LinearRegression(fit_intercept=False, positive=True)
        beta = fit.fit(_hinges(d, node, k1, k2) * sign, y).coef_ * sign
        slopes = (beta[0], beta[0] + beta[1], beta[0] + beta[1] + beta[2])
        return Stages(k1, k2, tuple(float(s) for s in slopes)), beta

    @classmethod
    def fit(cls, samples: Sequence[LoadingSample], seed: int = 0) -> LoadingRateModel:
        if len(samples) < 5:
            raise InputError(f"F_λ needs at least 5 loading samples, got {len(samples)}")
        data = np.array([[s.job_workers, s.node_workers, s.loading_rate] for s in samples], float)
        per_split = []
        for train, test in _splits(len(data), seed):
            scores = {}
            stages, _ = cls._fit_stages(data[train])
            staged = cls("staged", data[train], {}, stages, seed)
            scores["staged"] = _r2(data[test, 2], staged.rate(*data[test, :2].T))
            for name in REGRESSORS:
                model = _regressor(name, seed, len(train)).fit(data[train, :2], data[train, 2])
                scores[name] = _r2(data[test, 2], model.predict(data[test, :2]))
            per_split.append(scores)
        scores = _mean_scores(per_split)
        stages, _ = cls._fit_stages(data)
        return cls(_pick(scores), data, scores, stages, seed)

    def node_rate(self, node_workers) -> np.ndarray:
        """L(D): samples/s the node loads with D workers, from the learned stages."""
        node = np.asarray(node_workers, float)
        s, k1, k2 = self.stages.slopes, self.stages.contention_from, self.stages.saturation_at
        return (
            s[0] * np.minimum(node, k1)
            + s[1] * np.clip(node - k1, 0, k2 - k1)
            + s[2] * np.maximum(node - k2, 0)
        )

    def rate(self, job_workers, node_workers) -> np.ndarray:
        """λ(d; D) samples/s; zero without workers."""
        d, node = np.broadcast_arrays(
            np.asarray(job_workers, float), np.asarray(node_workers, float)
        )
        node = np.maximum(node, d)
        if self.regressor == "staged":
            out = d / np.maximum(node, 1e-9) * self.node_rate(node)
        else:
            flat = np.stack([d.ravel(), node.ravel()], axis=-1)
            out = self._model.predict(flat).reshape(d.shape)
        return np.where(d > 0, np.maximum(out, 0.0), 0.0)

    def to_json(self) -> dict:
        return {
            "regressor": self.regressor,
            "scores": self.scores,
            "seed": self.seed,
            "stages": {
                "contention_from": self.stages.contention_from,
                "saturation_at": self.stages.saturation_at,
                "slopes": list(self.stages.slopes),
            },
            "samples": self.samples.round(6).tolist(),
            **_exported(self.regressor, self._model),
        }

    @classmethod
    def from_json(cls, data: dict) -> LoadingRateModel:
        st = data["stages"]
        stages = Stages(st["contention_from"], st["saturation_at"], tuple(st["slopes"]))
        return cls(data["regressor"], np.array(data["samples"], float), data["scores"], stages,
                   data["seed"], data.get("compiled"))


class ThroughputModel:
    """The TPM: F_μ and F_λ together, T(d) = min(B·μ, λ(d; D)) samples/s (eq. 5)."""

    def __init__(self, training: TrainingRateModel, loading: LoadingRateModel):
        self.training, self.loading = training, loading

    @classmethod
    def fit(cls, training: Sequence[TrainingSample], loading: Sequence[LoadingSample], seed=0):
        return cls(TrainingRateModel.fit(training, seed), LoadingRateModel.fit(loading, seed))

    def training_throughput(self, batch_size, gpus, flops_g, params_m) -> float:
        """B·F_μ: the samples/s a job reaches when loading keeps up (B global batch)."""
        per_gpu = batch_size / gpus
        return float(batch_size * self.training.rate(per_gpu, flops_g, params_m, gpus))

    def throughput(self, batch_size, gpus, flops_g, params_m, workers, node_workers) -> float:
        """T(d) = min(B·μ, λ(d; D)) samples/s."""
        mu = self.training_throughput(batch_size, gpus, flops_g, params_m)
        return float(min(mu, self.loading.rate(workers, node_workers)))

    def workers_needed(self, samples_per_s: float, node_workers: int, limit: int) -> int:
        """d*: the fewest d ≤ limit with λ(d; D) ≥ the given rate (limit if none does)."""
        d = np.arange(1, limit + 1)
        reached = np.nonzero(self.loading.rate(d, max(node_workers, 1)) >= samples_per_s)[0]
        return int(d[reached[0]]) if len(reached) else limit

    def loading_table(self, capacity: int) -> np.ndarray:
        """λ(d; D) for D, d = 0..capacity as a (C+1, C+1) array; contention never helps,
        so each column is made non-increasing in D past d (and zero where d > D)."""
        size = capacity + 1
        d, node = np.meshgrid(np.arange(size), np.arange(size))
        table = self.loading.rate(d, np.maximum(node, d))
        table = np.where(d <= node, table, 0.0)
        for col in range(1, size):  # running minimum down each column, from D = d on
            table[col:, col] = np.minimum.accumulate(table[col:, col])
        return table

    def to_json(self) -> dict:
        return {"kind": "adloader-tpm", "version": 1, "training": self.training.to_json(),
                "loading": self.loading.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> ThroughputModel:
        if not isinstance(data, dict) or data.get("kind") != "adloader-tpm":
            raise InputError("not an adloader throughput model (kind != 'adloader-tpm')")
        try:
            return cls(TrainingRateModel.from_json(data["training"]),
                       LoadingRateModel.from_json(data["loading"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"throughput model is malformed: {exc}") from None



