"""The TPM's part of the store (``daemon.store.store.Store.tpm``): the samples measured on jobs
and the models fitted from them. A sample is kept only when it is one the TPM may learn from
(``valid_sample``); fits read each job's newest samples, so older ones are pruned."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable

from adloader import limits
from adloader.scheduling.model.samples import LoadingSample, TrainingSample

from .database import Database

MODELS_KEPT = 5  # fitted models kept in the store, newest first (the daemon reads the last)


def valid_sample(sample: TrainingSample | LoadingSample) -> bool:
    """Whether a measured sample is one the TPM may learn from: finite, positive, in bounds."""
    if isinstance(sample, TrainingSample):
        numbers = (sample.flops_g, sample.params_m, sample.step_s)
        return (all(math.isfinite(x) and x > 0 for x in numbers)
                and 0 < sample.batch_size <= limits.MAX_BATCH
                and 0 < sample.gpus <= limits.MAX_GPUS and sample.step_s <= limits.MAX_STEP_S)
    if isinstance(sample, LoadingSample):
        return (math.isfinite(sample.loading_rate) and 0 < sample.loading_rate <= limits.MAX_RATE
                and 0 < sample.job_workers <= sample.node_workers <= 64 * limits.MAX_WORKERS)
    return False


class TpmTables:
    """The tables ``samples`` and ``models`` of ``database``."""

    def __init__(self, database: Database):
        self._database = database
        self._sample_counts: dict[str, int] | None = None  # by kind, once counted

    # -- samples -----------------------------------------------------------------------
    def add_sample(self, job: str | None, sample: TrainingSample | LoadingSample,
                   t: float | None = None) -> int:
        """Store one TPM sample measured on ``job``; returns its id."""
        return self.add_samples(job, [sample], t)[-1]

    def add_samples(self, job: str | None, samples: Iterable[TrainingSample | LoadingSample],
                    t: float | None = None) -> list[int]:
        """Store several samples of one job in one transaction; returns their ids."""
        return self.add_job_samples([(job, s) for s in samples], t)

    def add_job_samples(self, samples: Iterable[tuple[str | None, TrainingSample |
                                                        LoadingSample]],
                        t: float | None = None) -> list[int]:
        """Store (job, sample) pairs in one transaction; a sample that is not finite and in
        bounds (``valid_sample``) is a ValueError and nothing is stored."""
        t = time.time() if t is None else t
        ids, kinds = [], []
        with self._database.lock:  # counted once committed, before another write or count
            with self._database.transaction() as db:
                for job, s in samples:
                    if not isinstance(s, TrainingSample | LoadingSample):
                        raise TypeError(f"not a sample: {s!r}")
                    if not valid_sample(s):
                        raise ValueError(f"sample out of bounds: {s!r}")
                    if isinstance(s, TrainingSample):
                        row = (t, job, "training", s.model, s.batch_size, s.gpus, s.flops_g,
                               s.params_m, s.step_s, None, None, None)  # fmt: skip
                    else:
                        row = (t, job, "loading", None, None, None, None, None, None,
                               s.job_workers, s.node_workers, s.loading_rate)  # fmt: skip
                    cur = db.execute(
                        "INSERT INTO samples (t, job, kind, model, batch_size, gpus, flops_g, "
                        "params_m, step_s, job_workers, node_workers, loading_rate) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
                    ids.append(int(cur.lastrowid))
                    kinds.append(row[2])
            self._counted(kinds)
        return ids

    def samples(self, per_job: int | None = None, newest: int | None = None
                ) -> tuple[list[TrainingSample], list[LoadingSample]]:
        """Stored samples, oldest first: (training, loading); with ``per_job``, only each
        job's newest that many of each kind, so no one job outweighs the node; with
        ``newest``, only the newest that many of each kind (read as such, not cut after)."""
        cut = "" if per_job is None else f"WHERE n <= {int(per_job)}"
        limit = "" if newest is None else f"LIMIT {int(newest)}"
        out = []
        for kind in ("training", "loading"):
            rows = self._database.query(
                "SELECT model, batch_size, gpus, flops_g, params_m, step_s, job_workers, "
                "node_workers, loading_rate FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
                f"job ORDER BY id DESC) AS n FROM samples WHERE kind = ?) {cut} "
                f"ORDER BY id DESC {limit}", (kind,))
            if kind == "training":
                found = [TrainingSample(batch_size=b, gpus=n, flops_g=f, params_m=m, step_s=s,
                                        model=name or "")
                         for name, b, n, f, m, s, *_ in reversed(rows)]
            else:
                found = [LoadingSample(job_workers=d, node_workers=total, loading_rate=rate)
                         for *_, d, total, rate in reversed(rows)]
            out.append([x for x in found if valid_sample(x)])
        return out[0], out[1]

    def prune_samples(self, per_job: int, per_kind: int) -> int:
        """Forget samples a fit will never read: all but each job's newest ``per_job`` of
        each kind, and all but the newest ``per_kind`` of each kind; returns how many went."""
        with self._database.transaction() as db:
            cur = db.execute(
                "DELETE FROM samples WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() "
                "OVER (PARTITION BY job, kind ORDER BY id DESC) AS n, ROW_NUMBER() OVER "
                "(PARTITION BY kind ORDER BY id DESC) AS m FROM samples) WHERE n > ? OR m > ?)",
                (int(per_job), int(per_kind)))
            self._sample_counts = None  # counted again when next asked
            return cur.rowcount

    def sample_counts(self) -> dict[str, int]:
        """How many samples of each kind are stored: {"training": n, "loading": m}. Counted
        once from the file, then as samples are added (``GET /v1/model`` shows them: a
        count of every sample under a burst of jobs took up to 58 ms); a prune counts again."""
        counts = self._sample_counts
        if counts is None:
            with self._database.lock:
                if self._sample_counts is None:
                    self._sample_counts = dict(self._database.query(
                        "SELECT kind, COUNT(*) FROM samples GROUP BY kind"))
                counts = self._sample_counts
        return dict(counts)

    def _counted(self, kinds: list[str]) -> None:
        """Samples of ``kinds`` committed (under the database's lock)."""
        counts = self._sample_counts
        if counts is not None:
            for kind in kinds:
                counts[kind] = counts.get(kind, 0) + 1

    # -- fitted models -----------------------------------------------------------------
    def save_model(self, model_json: dict, t: float | None = None) -> int:
        """Keep a fitted TPM (``ThroughputModel.to_json()``); returns its id. Only the newest
        ``MODELS_KEPT`` are kept: a busy node refits every few tens of seconds, for months."""
        with self._database.transaction() as db:
            cur = db.execute("INSERT INTO models (t, json) VALUES (?, ?)",
                             (time.time() if t is None else t, json.dumps(model_json)))
            db.execute("DELETE FROM models WHERE id <= ?", (cur.lastrowid - MODELS_KEPT,))
            return int(cur.lastrowid)

    def latest_model(self) -> dict | None:
        """The most recently saved model's JSON, or None."""
        rows = self._database.query("SELECT json FROM models ORDER BY id DESC LIMIT 1")
        return json.loads(rows[0][0]) if rows else None
