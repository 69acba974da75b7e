"""A fitted TPM regressor as plain arrays: predicting without scikit-learn.

The daemon fits the TPM in a child (``daemon.model.refit``) and only predicts with it. When a
non-linear regressor wins (Table I: polynomial, k-nearest-neighbour, random forest),
rebuilding it from the model's samples imported scikit-learn into the daemon — ~2
CPU-seconds and ~100 MB of heap once a daemon life — and fitted it again at every online
fit. The child, which has fitted it anyway, exports the fitted parameters instead; the daemon
predicts from them with numpy, the same arithmetic scikit-learn does
(``tests/unit/scheduling/model/test_compiled.py``: equal predictions on random cases).

- ``polynomial``: PolynomialFeatures(2) → StandardScaler → LinearRegression: the monomials'
  powers, the scaler's mean and scale, the coefficients and the intercept.
- ``random_forest``: every tree's node arrays (children, split feature, threshold, leaf
  value), walked for all trees and queries at once; inputs are cast to float32 first, as
  scikit-learn's trees do; the mean of the trees, summed in their order.
- ``knn``: StandardScaler → KNeighborsRegressor(k, weights="distance"): the scaled samples,
  their targets and k, searched by brute force; a query on a sample takes the samples at
  distance zero alone, as scikit-learn does. Which of several equally distant samples are the
  k nearest is, in scikit-learn, "dependent on the ordering of the training data" (its user
  guide); here the earlier sample wins. Equal predictions are tested where no two samples
  tie.
"""

from __future__ import annotations

import base64

import numpy as np

EXPORTED = ("polynomial", "knn", "random_forest")
CHUNK = 256  # queries a brute-force neighbour search takes at once


def export(name: str, fitted) -> dict | None:
    """The arrays of a fitted scikit-learn regressor (``throughput._regressor``'s shapes), or
    None for one that is not exported. Runs where scikit-learn is loaded (the fitting child)."""
    if name == "polynomial":
        poly, scaler, linear = (step for _, step in fitted.steps)
        return {"features": int(poly.n_features_in_), "powers": poly.powers_.tolist(),
                "mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(),
                "coef": linear.coef_.tolist(), "intercept": float(linear.intercept_)}
    if name == "knn":
        scaler, knn = (step for _, step in fitted.steps)
        return {"features": int(scaler.n_features_in_), "mean": scaler.mean_.tolist(),
                "scale": scaler.scale_.tolist(), "k": int(knn.n_neighbors),
                "x": _pack(knn._fit_X, "<f8"), "y": _pack(np.ravel(knn._y), "<f8")}
    if name == "random_forest":
        trees = [t.tree_ for t in fitted.estimators_]
        return {"features": int(fitted.n_features_in_), "trees": [
            {"left": _pack(t.children_left, "<i4"), "right": _pack(t.children_right, "<i4"),
             "feature": _pack(t.feature, "<i4"), "threshold": _pack(t.threshold, "<f8"),
             "value": _pack(t.value[:, 0, 0], "<f8")} for t in trees]}
    return None


# a forest's node arrays, base64 of fixed little-endian types: a fraction of JSON lists' size
# and read back without parsing a number at a time
_TYPES = {"left": "<i4", "right": "<i4", "feature": "<i4", "threshold": "<f8", "value": "<f8"}


def _pack(values, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode()


def _unpack(text: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=dtype)


class Compiled:
    """``predict(x)`` of an exported regressor, numpy only."""

    def __init__(self, name: str, data: dict):
        if name not in EXPORTED:
            raise ValueError(f"no exported form for regressor {name!r}")
        self.name, self.data = name, data
        if name == "polynomial":
            self._powers = np.asarray(data["powers"], float)
            self._mean, self._scale = (np.asarray(data[k], float) for k in ("mean", "scale"))
            self._coef, self._intercept = np.asarray(data["coef"], float), data["intercept"]
        elif name == "knn":
            self._mean, self._scale = (np.asarray(data[k], float) for k in ("mean", "scale"))
            self._x = _unpack(data["x"], "<f8").reshape(-1, int(data["features"]))
            self._y, self._k = _unpack(data["y"], "<f8"), int(data["k"])
        else:
            self._trees = len(data["trees"])
            arrays = [{k: _unpack(t[k], kind) for k, kind in _TYPES.items()}
                      for t in data["trees"]]
            sizes = [len(t["left"]) for t in arrays]
            self._root = np.cumsum([0, *sizes[:-1]])  # each tree's first node, all in one array
            joined = {k: np.concatenate([t[k] for t in arrays]) for k in _TYPES}
            leaf = joined["left"] < 0
            offset = np.repeat(self._root, sizes)
            self._left = np.where(leaf, -1, joined["left"] + offset)
            self._right = np.where(leaf, -1, joined["right"] + offset)
            self._feature = np.where(leaf, 0, joined["feature"]).astype(np.intp)
            self._threshold = joined["threshold"].astype(float)
            self._value = joined["value"].astype(float)

    def predict(self, x) -> np.ndarray:
        x = np.asarray(x, float).reshape(-1, int(self.data["features"]))
        if self.name == "polynomial":
            monomials = np.prod(x[:, None, :] ** self._powers[None, :, :], axis=2)
            return (monomials - self._mean) / self._scale @ self._coef + self._intercept
        if self.name == "knn":
            return np.concatenate([self._neighbours((x[i:i + CHUNK] - self._mean) / self._scale)
                                   for i in range(0, len(x), CHUNK)] or [np.zeros(0)])
        x32 = x.astype(np.float32)  # scikit-learn's trees compare float32 inputs
        rows = np.arange(len(x))[:, None]
        node = np.broadcast_to(self._root, (len(x), self._trees)).copy()
        while True:
            inner = self._left[node] >= 0
            if not inner.any():
                break
            go_left = x32[rows, self._feature[node]] <= self._threshold[node]
            node = np.where(inner, np.where(go_left, self._left[node], self._right[node]), node)
        out = np.zeros(len(x))
        for k in range(self._trees):  # summed tree by tree, as the forest does
            out += self._value[node[:, k]]
        return out / self._trees

    def _neighbours(self, z: np.ndarray) -> np.ndarray:
        """Distance-weighted mean of the k nearest samples (those at distance zero alone)."""
        dist = np.sqrt(((z[:, None, :] - self._x[None, :, :]) ** 2).sum(axis=2))
        k = min(self._k, len(self._x))
        near = np.argsort(dist, axis=1, kind="stable")[:, :k]
        d = np.take_along_axis(dist, near, axis=1)
        with np.errstate(divide="ignore"):
            weight = 1.0 / d
        exact = np.isinf(weight)
        on_sample = exact.any(axis=1)
        weight[on_sample] = exact[on_sample]
        return (self._y[near] * weight).sum(axis=1) / weight.sum(axis=1)
