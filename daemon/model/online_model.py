"""The node's TPM, learnt online (A-Dloader §III-B: "the model is refitted as jobs run").

Heartbeats become samples — one per job and kind every ``SAMPLE_INTERVAL_S``, checked
(``store.tpm.valid_sample``) and written in one transaction per turn of the control loop.
After ``REFIT_EVERY`` new samples (and at most every ``REFIT_INTERVAL_S``), if the model in
use mispredicts them (the median relative error of a kind over ``REFIT_TOLERANCE``, with
enough samples of that kind, spread widely enough, to fit it from: ``refit.fittable``), the
model is refitted in a child process (``daemon.model.refit``: one long-lived worker, so
scikit-learn is not imported again at every refit, and never in the daemon: it predicts
from the fitted arrays, ``scheduling.model.compiled``) from each job's newest ``FIT_PER_JOB``
samples, the newest ``FIT_WINDOW`` of each kind, so no one job outweighs the node and the
store stays bounded.
Its loading table is made before the node's lock is taken. A model that already predicts
the node's samples is not refitted: a fit is ~0.4 CPU-seconds, and one every 20 s was most
of the daemon's running cost per training-second (docs/benchmarks.md, "Overhead"). Nor is
one refitted every turn when fitting does not help: a node whose loading the model's forms
cannot follow (the node's L(D) under three jobs' contention, say) mispredicts after every
fit, so each fit that is followed by a misprediction doubles the wait before the next (up to
``REFIT_BACKOFF_MAX_S``); a turn where the model predicts well, or a job the model has not
seen, brings it back to ``REFIT_INTERVAL_S``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from adloader.errors import ConflictError, InputError, StorageError
from adloader.host.atomic import write_json
from adloader.scheduling.model.samples import LoadingSample, TrainingSample
from adloader.scheduling.model.throughput import ThroughputModel

from ..store.store import Store
from ..store.tpm import valid_sample
from .refit import MIN_REAL, RefitWorker, fit_in_child, fittable

log = logging.getLogger("adloader.daemon")
REFIT_EVERY = 10  # new samples between online refits ...
REFIT_INTERVAL_S = 20.0  # ... and at most one refit in this long
SAMPLE_INTERVAL_S = 2.0  # one sample per job in this long (heartbeats come faster)
FIT_WINDOW = 2000  # the newest samples of each kind a fit uses ...
FIT_PER_JOB = 200  # ... of which one job gives at most this many
REFIT_TOLERANCE = 0.10  # a model whose median relative error on new samples is within this
RECENT = 200  # new samples kept to judge the model in use by
REFIT_BACKOFF_MAX_S = 16 * REFIT_INTERVAL_S  # the longest wait after fits that did not help


def prior_model(profile_name: str, cache: Path | None = None) -> ThroughputModel:
    """The TPM a node starts with, before its own heartbeats: fitted (in a child process,
    ``daemon.model.refit``) from noisy samples of a device profile (``paper`` unless configured;
    ``adloader profile`` measures this one), and kept in ``cache`` for the next start while
    the profile stays the same."""
    from adloader.device.device_profile import load_profile

    name = profile_name or "paper"
    digest = hashlib.sha256(json.dumps(asdict(load_profile(name)), sort_keys=True,
                                       default=str).encode()).hexdigest()
    if cache is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, InputError):
            kept = json.loads(cache.read_text())
            if kept["profile"] == digest and _predicts_without_sklearn(kept["model"]):
                return ThroughputModel.from_json(kept["model"])
    model = fit_in_child({"prior": name})
    if cache is not None:
        with contextlib.suppress(OSError):
            write_json(cache, {"profile": digest, "model": model}, indent=None)
    return ThroughputModel.from_json(model)


def relative_errors(model: ThroughputModel, samples) -> tuple[float, float]:
    """The median relative error of ``model`` on the training samples and on the loading
    samples among ``samples`` (0 for a kind with none)."""
    steps = [s for s in samples if isinstance(s, TrainingSample)]
    loads = [s for s in samples if isinstance(s, LoadingSample)]
    out = []
    for kind, truth, predicted in (
            (steps, lambda s: s.step_s, lambda k: model.training.step_time(
                *np.array([[s.batch_size, s.flops_g, s.params_m, s.gpus] for s in k]).T)),
            (loads, lambda s: s.loading_rate, lambda k: model.loading.rate(
                *np.array([[s.job_workers, s.node_workers] for s in k]).T))):
        if not kind:
            out.append(0.0)
            continue
        real = np.array([truth(s) for s in kind], float)
        out.append(float(np.median(np.abs(predicted(kind) - real) / np.maximum(real, 1e-9))))
    return out[0], out[1]


def _predicts_without_sklearn(model: dict) -> bool:
    """A kept model whose non-linear parts carry their fitted arrays (one kept by an
    earlier release does not: it is fitted again rather than rebuilt in the daemon)."""
    from adloader.scheduling.model.compiled import EXPORTED

    return all(part.get("regressor") not in EXPORTED or "compiled" in part
               for part in (model["training"], model["loading"]))


class OnlineModel:
    def __init__(self, prior: ThroughputModel, store: Store, scheduler, lock,
                 record_event: Callable[[str | None, str, dict], None],
                 fitter: RefitWorker | None = None):
        self.prior, self.store, self.scheduler, self.lock = prior, store, scheduler, lock
        self.fitter = fitter  # None: a fresh child for each fit
        self._record_event = record_event
        self.source = "prior"
        self.pending: list[tuple] = []
        self._last_sample: dict[tuple, float] = {}
        self._new_samples = 0
        self._last_refit = 0.0
        self._refitting = False
        self._fitting = threading.Lock()
        self._recent: deque = deque(maxlen=RECENT)  # samples since the last fit or check
        self.skipped = 0  # refits not made: the model in use predicted the new samples
        self.interval_s = REFIT_INTERVAL_S  # the wait between refits now (doubled, reset)
        self._fitted = False  # a fit was made since the interval was last reset

    def take(self, samples) -> None:
        """Keep one valid sample per job and kind every SAMPLE_INTERVAL_S."""
        now = time.monotonic()
        for job_id, sample in samples:
            key = (job_id, type(sample))
            if (now - self._last_sample.get(key, -1e9) >= SAMPLE_INTERVAL_S
                    and valid_sample(sample)):
                if key not in self._last_sample:  # a job not seen yet: refit when allowed
                    self._reset_interval()
                self._last_sample[key] = now
                self.pending.append((job_id, sample))

    def forget(self, job_id: str) -> None:
        """The job has ended for good: no more samples are taken of it."""
        for kind in (TrainingSample, LoadingSample):
            self._last_sample.pop((job_id, kind), None)

    def flush(self) -> None:
        """Write the samples taken since the last flush, in one transaction."""
        batch, self.pending = self.pending, []
        self.store.tpm.add_job_samples(batch)
        self._new_samples += len(batch)
        self._recent.extend(sample for _, sample in batch)

    def close(self) -> None:
        if self.fitter is not None:
            self.fitter.close()

    def _reset_interval(self) -> None:
        self.interval_s, self._fitted = REFIT_INTERVAL_S, False

    def maybe_refit(self) -> None:
        if (self._new_samples >= REFIT_EVERY and not self._refitting
                and time.monotonic() - self._last_refit >= self.interval_s):
            self._new_samples, self._last_refit = 0, time.monotonic()
            recent, self._recent = list(self._recent), deque(maxlen=RECENT)
            samples = self._worth_fitting(recent)
            if samples is None:
                self.skipped += 1
                self._reset_interval()
                return
            if self._fitted:  # the last fit did not make it predict: wait longer next time
                self.interval_s = min(2 * self.interval_s, REFIT_BACKOFF_MAX_S)
            self._fitted = True
            self._refitting = True
            threading.Thread(target=self._refit_quietly, args=(samples,),
                             name="adloader-refit", daemon=True).start()

    def _worth_fitting(self, recent: list) -> tuple[list, list] | None:
        """The samples a fit would read, (training, loading), when the model in use
        mispredicts a kind that a fit from them would refit (``refit.fittable``; else it
        would keep that part as it is, and the fit would cost its CPU for nothing); else
        None. The fit is given them: the store is read once a refit."""
        errors = relative_errors(self.scheduler.model, recent)
        if not any(err > REFIT_TOLERANCE for err in errors):
            return None
        samples = self.store.tpm.samples(per_job=FIT_PER_JOB, newest=FIT_WINDOW)
        worth = any(err > REFIT_TOLERANCE and part
                    for part, err in zip(fittable(*samples), errors, strict=True))
        return samples if worth else None

    def _refit_quietly(self, samples: tuple[list, list]) -> None:
        try:
            self.fit(quiet=True, samples=samples)
        except (InputError, StorageError, ValueError) as exc:
            log.warning("online refit skipped: %s", exc)
        finally:
            self._refitting = False

    def fit(self, quiet: bool = False, samples: tuple[list, list] | None = None) -> None:
        """Refit from the node's own samples (``samples``: as the store gave them just now;
        else read here); each part keeps the prior until it has enough (InputError when
        neither has, unless ``quiet``)."""
        with self._fitting:
            training, loading = samples or self.store.tpm.samples(per_job=FIT_PER_JOB,
                                                                  newest=FIT_WINDOW)
            with contextlib.suppress(StorageError):  # the store is bounded: a fit reads no more
                self.store.tpm.prune_samples(FIT_PER_JOB, 5 * FIT_WINDOW)
            if not quiet and len(training) < MIN_REAL and len(loading) < MIN_REAL:
                raise ConflictError(f"too few samples to refit: {len(training)} training, "
                                 f"{len(loading)} loading (need {MIN_REAL} of one kind)")
            request = {"prior": self.prior.to_json(),
                       "training": [[s.batch_size, s.gpus, s.flops_g, s.params_m, s.step_s]
                                    for s in training],
                       "loading": [[s.job_workers, s.node_workers, s.loading_rate]
                                   for s in loading]}
            # sklearn's work and memory stay in the child
            fitted = self.fitter.fit(request) if self.fitter else fit_in_child(request)
            model = ThroughputModel.from_json(fitted)
            table = model.loading_table(self.scheduler.capacity)  # slow: outside the lock
            with self.lock:
                self.scheduler.set_model(model, table)
                self.source = "online"
                with contextlib.suppress(StorageError):
                    self.store.tpm.save_model(model.to_json())
                self._record_event(None, "model_fit", {"training": len(training),
                                                       "loading": len(loading)})
