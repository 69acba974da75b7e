"""The REST API's answers, typed: what each operation returns besides a job (``rest.JobView``),
and the one error body every operation may return (``Problem``, RFC 9457).

Shared by the daemon (its routes declare them, so the OpenAPI document says what a client
gets) and its clients. The answers are open to fields a later release adds (``extra``
allowed): a client reads what it knows and ignores the rest, as the control protocol does.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "urn:adloader:problem:"  # each problem's ``type``: this and its slug

# status -> (slug, title): the problems the API answers with, one per status it uses
PROBLEMS: dict[int, tuple[str, str]] = {
    400: ("bad-request", "The request is malformed"),
    401: ("unauthorized", "A bearer token is missing or wrong"),
    404: ("not-found", "No such resource"),
    405: ("method-not-allowed", "The path does not take this method"),
    409: ("conflict", "The request conflicts with the node's state"),
    413: ("body-too-large", "The request body is too large"),
    422: ("invalid", "A field or parameter is invalid"),
    500: ("internal", "The daemon failed (a bug: see its log)"),
    503: ("unavailable", "The node cannot serve this now (its store, say)"),
}


def problem_type(status: int) -> str:
    """The ``type`` URI of the API's problem for ``status`` (``about:blank`` for another)."""
    slug = PROBLEMS.get(status, (None, None))[0]
    return PROBLEM_BASE + slug if slug else "about:blank"


def problem(status: int, detail: str, instance: str | None = None) -> dict:
    """The body of an error answer: RFC 9457 problem details."""
    title = PROBLEMS.get(status, (None, "Error"))[1]
    out = {"type": problem_type(status), "title": title, "status": status, "detail": detail}
    if instance:
        out["instance"] = instance
    return out


class Problem(BaseModel):
    """An error (RFC 9457): ``type`` names the kind for a program, ``detail`` says in one line
    what was wrong with this request (the field, the job, the cause read from the node)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="a URI naming the kind of problem, "
                                  f"{PROBLEM_BASE}SLUG (see PROBLEMS)")
    title: str
    status: int = Field(ge=400, le=599)
    detail: str
    instance: str | None = Field(default=None, description="the request's path")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Allocations(_Open):
    """``GET /v1/allocations``: the policy, the node's loading capacity and each active
    job's workers."""

    policy: str
    capacity: int
    gpus: int
    jobs: dict[str, int] = Field(description="job id -> its loading workers")
    node_workers: int


class CacheSummary(_Open):
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    split: dict[str, int]
    datasets: list[str]


class NodeSummary(_Open):
    """``GET /v1/node``: what this node offers a cluster scheduler."""

    capacity: int
    node_workers: int
    free_workers: int
    idle_workers: int
    predicted_rate: float = Field(description="Σ predicted samples/s of its jobs")
    marginal_gain: float = Field(description="samples/s one more worker would add")
    spare_rate: float = Field(description="what a new job could load now, samples/s")
    jobs: int
    cache: CacheSummary | None = None


class FitterUsage(_Open):
    starts: int
    startup_cpu_s: float
    fits: int
    fit_cpu_s: float


class SampleCounts(_Open):
    training: int
    loading: int


class TrainingPart(_Open):
    regressor: str
    r2: dict[str, float] = Field(description="each regressor's held-out R²")


class LoadingPart(TrainingPart):
    contention_from: int
    saturation_at: int
    slopes: list[float]


class ModelView(_Open):
    """``GET /v1/model``: the throughput prediction model (TPM) in use."""

    source: str = Field(description="prior | online")
    refits_skipped: int
    refit_interval_s: float = Field(description="seconds between refits now: doubled after "
                                    "each fit the model still mispredicts after")
    fitter: FitterUsage | None = None
    samples: SampleCounts
    training: TrainingPart
    loading: LoadingPart


class StoreFault(_Open):
    cause: str
    message: str
    since: float
    for_s: float


class Health(_Open):
    """``GET /healthz``: ``ok``, or ``degraded`` with why (writes fail, records wait)."""

    status: str = Field(description="ok | degraded")
    version: str
    uptime_s: float
    capacity: int
    gpus: int
    pid: int
    store: str | None = None
    store_fault: StoreFault | None = None
    unwritten_jobs: int | None = None


class Event(_Open):
    """One event: ``data`` as the daemon recorded it for that ``kind``."""

    id: int
    t: float
    job: str | None
    kind: str
    data: dict | list | str | int | float | bool | None
