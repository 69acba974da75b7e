"""The node's TPM, learnt online (A-Dloader §III-B: "the model is refitted as jobs run").

Heartbeats become samples — one per job and kind every ``SAMPLE_INTERVAL_S``, checked
(``store.valid_sample``) and written in one transaction per turn of the control loop.
After ``REFIT_EVERY`` new samples (and at most every ``REFIT_INTERVAL_S``) the model is
refitted in a child process (``daemon.refit``: one long-lived worker, so scikit-learn is not
imported again at every refit) from each job's newest ``FIT_PER_JOB`` samples, the newest
``FIT_WINDOW`` of each kind, so no one job outweighs the node and the store stays bounded.
Its loading table is made before the node's lock is taken.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from adloader.errors import InputError, StorageError
from adloader.host.atomic import write_json
from adloader.scheduling.samples import LoadingSample, TrainingSample
from adloader.scheduling.throughput import ThroughputModel

from .refit import MIN_REAL, RefitWorker, fit_in_child
from .store import Store, valid_sample

log = logging.getLogger("adloader.daemon")
REFIT_EVERY = 10  # new samples between online refits ...
REFIT_INTERVAL_S = 20.0  # ... and at most one refit in this long
SAMPLE_INTERVAL_S = 2.0  # one sample per job in this long (heartbeats come faster)
FIT_WINDOW = 2000  # the newest samples of each kind a fit uses ...
FIT_PER_JOB = 200  # ... of which one job gives at most this many


def prior_model(profile_name: str, cache: Path | None = None) -> ThroughputModel:
    """The TPM a node starts with, before its own heartbeats: fitted (in a child process,
    ``daemon.refit``) from noisy samples of a device profile (``paper`` unless configured;
    ``adloader profile`` measures this one), and kept in ``cache`` for the next start while
    the profile stays the same."""
    from adloader.sim.device_profile import load_profile

    name = profile_name or "paper"
    digest = hashlib.sha256(json.dumps(asdict(load_profile(name)), sort_keys=True,
                                       default=str).encode()).hexdigest()
    if cache is not None:
        with contextlib.suppress(OSError, ValueError, KeyError, InputError):
            kept = json.loads(cache.read_text())
            if kept["profile"] == digest:
                return ThroughputModel.from_json(kept["model"])
    model = fit_in_child({"prior": name})
    if cache is not None:
        with contextlib.suppress(OSError):
            write_json(cache, {"profile": digest, "model": model}, indent=None)
    return ThroughputModel.from_json(model)


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

    def take(self, samples) -> None:
        """Keep one valid sample per job and kind every SAMPLE_INTERVAL_S."""
        now = time.monotonic()
        for job_id, sample in samples:
            key = (job_id, type(sample))
            if (now - self._last_sample.get(key, -1e9) >= SAMPLE_INTERVAL_S
                    and valid_sample(sample)):
                self._last_sample[key] = now
                self.pending.append((job_id, sample))

    def forget(self, job_id: str) -> None:
        """The job has ended for good: no more samples are taken of it."""
        for kind in (TrainingSample, LoadingSample):
            self._last_sample.pop((job_id, kind), None)

    def flush(self) -> None:
        """Write the samples taken since the last flush, in one transaction."""
        batch, self.pending = self.pending, []
        self.store.add_job_samples(batch)
        self._new_samples += len(batch)

    def close(self) -> None:
        if self.fitter is not None:
            self.fitter.close()

    def maybe_refit(self) -> None:
        if (self._new_samples >= REFIT_EVERY and not self._refitting
                and time.monotonic() - self._last_refit >= REFIT_INTERVAL_S):
            self._new_samples, self._refitting = 0, True
            self._last_refit = time.monotonic()
            threading.Thread(target=self._refit_quietly, name="adloader-refit",
                             daemon=True).start()

    def _refit_quietly(self) -> None:
        try:
            self.fit(quiet=True)
        except (InputError, StorageError, ValueError) as exc:
            log.warning("online refit skipped: %s", exc)
        finally:
            self._refitting = False

    def fit(self, quiet: bool = False) -> None:
        """Refit from the node's own samples; each part keeps the prior until it has
        enough (InputError when neither has, unless ``quiet``)."""
        with self._fitting:
            training, loading = self.store.samples(per_job=FIT_PER_JOB, newest=FIT_WINDOW)
            with contextlib.suppress(StorageError):  # the store is bounded: a fit reads no more
                self.store.prune_samples(FIT_PER_JOB, 5 * FIT_WINDOW)
            if not quiet and len(training) < MIN_REAL and len(loading) < MIN_REAL:
                raise InputError(f"too few samples to refit: {len(training)} training, "
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
                    self.store.save_model(model.to_json())
                self._record_event(None, "model_fit", {"training": len(training),
                                                       "loading": len(loading)})
