"""Read and write throughput samples as CSV (columns: scheduling.model.samples.CSV_COLUMNS).

``kind`` is ``training`` (model, batch_size, gpus, flops_g, params_m, step_s) or
``loading`` (job_workers, node_workers, loading_rate); other columns stay empty.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

from adloader.errors import InputError
from adloader.host.atomic import atomic_path
from adloader.scheduling.model.samples import CSV_COLUMNS, LoadingSample, TrainingSample

_TRAINING = {"batch_size": int, "gpus": int, "flops_g": float, "params_m": float, "step_s": float}
_LOADING = {"job_workers": int, "node_workers": int, "loading_rate": float}


def write_samples(path: str | Path, samples: Iterable[TrainingSample | LoadingSample]) -> None:
    """Write samples atomically (temp file, then rename)."""
    with atomic_path(path) as tmp, tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for s in samples:
            if isinstance(s, TrainingSample):
                row = {"kind": "training", "model": s.model}
                row.update({k: getattr(s, k) for k in _TRAINING})
            else:
                row = {"kind": "loading"}
                row.update({k: getattr(s, k) for k in _LOADING})
            writer.writerow(row)


def _field(row: dict, line: int, name: str, kind: type) -> int | float:
    raw = (row.get(name) or "").strip()
    if not raw:
        raise InputError(f"line {line}: field '{name}' is missing")
    try:
        value = kind(float(raw)) if kind is int else kind(raw)
    except ValueError:
        raise InputError(f"line {line}: field '{name}' is not a number: {raw!r}") from None
    if not value > 0:
        raise InputError(f"line {line}: field '{name}' must be positive, got {raw}")
    return value


def read_samples(path: str | Path) -> tuple[list[TrainingSample], list[LoadingSample]]:
    """Parse a samples CSV; a bad row is an InputError naming its line and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or "kind" not in reader.fieldnames:
        raise InputError(f"{path}: not a samples CSV (no 'kind' column in the header)")
    training: list[TrainingSample] = []
    loading: list[LoadingSample] = []
    for line, row in enumerate(reader, start=2):
        kind = (row.get("kind") or "").strip()
        if kind == "training":
            values = {k: _field(row, line, k, t) for k, t in _TRAINING.items()}
            training.append(TrainingSample(model=(row.get("model") or "").strip(), **values))
        elif kind == "loading":
            values = {k: _field(row, line, k, t) for k, t in _LOADING.items()}
            if values["job_workers"] > values["node_workers"]:
                raise InputError(f"line {line}: job_workers exceeds node_workers")
            loading.append(LoadingSample(**values))
        else:
            raise InputError(f"line {line}: field 'kind' must be training or loading, got {kind!r}")
    if not training and not loading:
        raise InputError(f"{path}: no samples")
    return training, loading
