"""Workload traces: the jobs a node is given, when they arrive and what each one asks for.

A trace is a JSON object ``{"name", "description", "gpus", "jobs": [...]}`` or a bare list of
jobs. Each job names a zoo model, its global batch B (split evenly over its ``gpus``), its
iterations, the workers it requests (the paper's "workers" column, optional) and its arrival
time in seconds. ``gpu_ids`` pins a job to GPUs; without it the simulator places the job.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from adloader.errors import InputError
from adloader.host.atomic import write_json

_Positive = Annotated[StrictInt, Field(gt=0)]
_GpuIndex = Annotated[StrictInt, Field(ge=0)]
_Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]


class TraceJob(BaseModel):
    """One job: model, global batch B, GPUs, iterations, requested workers d, arrival time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(min_length=1, strict=True)]
    model: Annotated[str, Field(strict=True)]
    batch_size: _Positive
    gpus: _Positive
    iterations: _Positive
    workers: Annotated[StrictInt, Field(ge=1)] | None = None
    arrival_s: _Seconds
    gpu_ids: tuple[_GpuIndex, ...] | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from adloader.models import parse

        try:
            return parse(value).name
        except InputError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _consistent(self) -> TraceJob:
        if self.batch_size % self.gpus:
            raise ValueError(
                f"field 'batch_size': {self.batch_size} is not divisible by gpus={self.gpus}"
            )
        if self.gpu_ids is not None:
            if len(self.gpu_ids) != self.gpus:
                raise ValueError(
                    f"field 'gpu_ids': lists {len(self.gpu_ids)} GPUs but gpus={self.gpus}"
                )
            if len(set(self.gpu_ids)) != len(self.gpu_ids):
                raise ValueError(f"field 'gpu_ids': GPU indices repeat in {list(self.gpu_ids)}")
        return self

    @property
    def per_gpu_batch(self) -> int:
        """b = B / n: the batch each of the job's GPUs trains per step."""
        return self.batch_size // self.gpus


class Trace(BaseModel):
    """A named list of jobs, sorted by arrival (stable); ``gpus`` is the node's GPU count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(strict=True)] = ""
    description: Annotated[str, Field(strict=True)] = ""
    gpus: _Positive | None = None
    jobs: tuple[TraceJob, ...]

    @field_validator("jobs")
    @classmethod
    def _sorted_unique(cls, jobs: tuple[TraceJob, ...]) -> tuple[TraceJob, ...]:
        if not jobs:
            raise ValueError("the trace has no jobs")
        seen: set[str] = set()
        for job in jobs:
            if job.name in seen:
                raise ValueError(f"job name {job.name!r} appears more than once")
            seen.add(job.name)
        return tuple(sorted(jobs, key=lambda j: j.arrival_s))

    @model_validator(mode="after")
    def _fits_node(self) -> Trace:
        if self.gpus is not None:
            check_fits(self, self.gpus)
        return self

    def to_json(self) -> dict[str, Any]:
        """The trace as a JSON-ready dict (absent optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


def check_fits(trace: Trace, node_gpus: int) -> None:
    """Raise ValueError naming the first job that needs more GPUs than the node has."""
    for job in trace.jobs:
        if job.gpus > node_gpus:
            raise ValueError(
                f"job {job.name!r}: field 'gpus': needs {job.gpus} GPUs "
                f"but the node has {node_gpus}"
            )
        for gpu in job.gpu_ids or ():
            if gpu >= node_gpus:
                raise ValueError(
                    f"job {job.name!r}: field 'gpu_ids': GPU {gpu} does not exist "
                    f"on a node with {node_gpus} GPUs"
                )


# --- one-line errors -------------------------------------------------------------------------

_MESSAGES = {
    "missing": "is missing",
    "extra_forbidden": "is not a known field",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "model_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
}


_SENTENCES = ("missing", "extra_forbidden")


def _describe(err: dict[str, Any]) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    if kind == "greater_than":
        text = f"must be greater than {ctx['gt']}"
    elif kind == "greater_than_equal":
        text = f"must be at least {ctx['ge']}"
    elif kind == "string_too_short":
        text = "must not be empty"
    elif kind in _MESSAGES:
        text = _MESSAGES[kind]
    else:
        text = err["msg"].replace("Input should be", "must be")
    if kind not in ("missing", "extra_forbidden", "model_type", "dict_type"):
        shown = json.dumps(err["input"]) if _jsonable(err["input"]) else repr(err["input"])
        text += f", got {shown[:40]}"
    return text


def _jsonable(value: Any) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, (str, int, float, bool, type(None), list))


def _job_label(data: Any, index: int) -> str:
    jobs = data.get("jobs") if isinstance(data, dict) else None
    job = jobs[index] if isinstance(jobs, list) and index < len(jobs) else None
    name = job.get("name") if isinstance(job, dict) else None
    return f"job {name!r}" if isinstance(name, str) and name else f"job #{index + 1}"


def _one_line(exc: ValidationError, data: Any) -> str:
    """The first of pydantic's errors as 'job NAME: field F: what is wrong'."""
    errors = exc.errors()
    err = errors[0]
    loc = err["loc"]
    parts: list[str] = []
    if len(loc) >= 2 and loc[0] == "jobs" and isinstance(loc[1], int):
        parts.append(_job_label(data, loc[1]))
        loc = loc[2:]
    elif loc == ("jobs",) and err["type"] == "value_error":
        loc = ()
    text = _describe(err)
    if loc and not text.startswith("field "):
        field = "field " + repr(".".join(str(p) for p in loc))
        # "field 'model' is missing" reads as a sentence; other problems follow a colon
        text = f"{field} {text}" if err["type"] in _SENTENCES else f"{field}: {text}"
    parts.append(text)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ": ".join(parts) + more


def parse_trace(data: Any, origin: str = "trace", node_gpus: int | None = None) -> Trace:
    """Validate decoded JSON as a Trace; any problem is a one-line InputError."""
    if isinstance(data, list):
        data = {"name": origin, "jobs": data}
    if not isinstance(data, dict):
        raise InputError(f"{origin}: must be a JSON object or a list of jobs")
    if node_gpus is not None and node_gpus < 1:
        raise InputError(f"{origin}: node gpus must be at least 1, got {node_gpus}")
    try:
        trace = Trace.model_validate(data)
        if node_gpus is not None:
            check_fits(trace, node_gpus)
    except ValidationError as exc:
        raise InputError(f"{origin}: {_one_line(exc, data)}") from None
    except ValueError as exc:
        raise InputError(f"{origin}: {exc}") from None
    return trace


# --- files -----------------------------------------------------------------------------------


def bundled_traces() -> list[str]:
    """Names of the traces shipped in ``workloads/traces/``."""
    folder = resources.files("adloader.sim").joinpath("traces")
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )


def load_trace(path_or_name: str | Path, node_gpus: int | None = None) -> Trace:
    """A bundled trace by name (``paper-static``) or a trace JSON file by path.

    ``node_gpus`` checks every job's ``gpus`` and ``gpu_ids`` against the node.
    """
    key = str(path_or_name)
    if key.removesuffix(".json") in bundled_traces() and not Path(key).exists():
        filename = key.removesuffix(".json") + ".json"
        ref = resources.files("adloader.sim").joinpath("traces", filename)
        text, origin = ref.read_text(), f"trace {filename}"
    else:
        path = Path(key)
        if not path.is_file():
            names = ", ".join(bundled_traces())
            raise InputError(f"trace {key!r}: no such file or bundled trace ({names})")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"trace {key}: cannot read: {exc}") from None
        origin = f"trace {key}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{origin}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if isinstance(data, list):
        data = {"name": Path(key).stem, "jobs": data}
    return parse_trace(data, origin, node_gpus)


def save_trace(trace: Trace, path: str | Path) -> None:
    """Write the trace as JSON atomically (temp file, then rename)."""
    write_json(path, trace.to_json())


def fit_to_gpus(trace: Trace, gpus: int) -> tuple[Trace, int]:
    """The mix on ``gpus`` real GPUs: each job on at most all of them, unpinned, and the
    jobs a GPU that lets every job of the mix start at once."""
    jobs = [job.model_copy(update={"gpus": min(job.gpus, gpus), "gpu_ids": None})
            for job in trace.jobs]
    per_gpu = max(1, -(-sum(j.gpus for j in jobs) // gpus))
    return trace.model_copy(update={"jobs": jobs, "gpus": gpus}), per_gpu


def pinned(trace: Trace, gpu_ids: Mapping[str, Sequence[int]]) -> Trace:
    """The trace with each job named in ``gpu_ids`` pinned to those GPUs (a run's placement
    replayed: another policy's run then co-locates its jobs alike)."""
    return trace.model_copy(update={"jobs": tuple(
        job.model_copy(update={"gpu_ids": tuple(gpu_ids[job.name])})
        if job.name in gpu_ids else job for job in trace.jobs)})
