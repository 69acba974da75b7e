"""The REST contract, shared by the daemon's API and every client: a job as a user submits it
(``JobSpec``), a job as the daemon shows it (``JobView``), and the paths.

A JobSpec says what to run, and what the TPM needs to predict it (eq. 6).

``model`` names a zoo network (its FLOPs f and size M come from the features table);
``features`` gives f and M directly for a model outside the zoo. ``batch_size`` is the
global batch B (b = B/n on each GPU), ``gpus`` is n, ``workers`` the count the user asked
for (the daemon may give another). Every malformed spec becomes one InputError line naming
the field. Every field is bounded (``adloader.limits``): a spec is a tenant's input on a
shared node, and nothing in it may be too large to store, show or launch (no NUL byte, no
50 MB command).
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePath
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from adloader import limits
from adloader.errors import InputError

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
JOB_STATES = ("queued", "buffered", "running", "paused", "finished", "failed", "lost",
              "cancelled")  # fmt: skip
JobState = Literal[JOB_STATES]  # type: ignore[valid-type]
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,255}$")
JOB_FILE = "job_file"  # validation context: a job file's spec (a string command is split,
# a model name is taken in any case); over REST a spec is exactly what the schema says
_MODEL_PATTERN = (r"^(md|sm)?(Resnet(?:[1-9][02468]|[1-9][0-9][02468]|1000)"
                  r"|VGG(?:[4-9]|[1-9][0-9]|[1-9][0-9]{2}|1000))$")  # models.names.parse's
_SHOULD = re.compile(r"^(Input|String|List|Value|Dictionary|Tuple|Set|Object) should ")


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError("must not contain a NUL byte")
    return value


_NO_NUL = r"^[^\x00]*$"  # the schema's words for _no_nul (an argument, a path, a value)
_ABSOLUTE = r"^/[^\x00]*$"
Arg = Annotated[str, Field(max_length=limits.MAX_ARG, pattern=_NO_NUL),
                AfterValidator(_no_nul)]
AbsolutePath = Annotated[str, Field(max_length=limits.MAX_ARG, pattern=_ABSOLUTE),
                         AfterValidator(_no_nul)]


SPEC_TOO_LARGE = "spec_too_large"  # the error type of a spec over limits.MAX_SPEC_BYTES


def _given(field: str, json_type: str) -> dict:
    """JSON Schema: ``field`` is present and not null."""
    return {"required": [field], "properties": {field: {"type": json_type}}}


class SpecFeatures(BaseModel):
    """A model's features given by hand: f GFLOPs forward per sample, M million parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    flops_g: float = Field(gt=0, le=limits.MAX_FLOPS_G, allow_inf_nan=False)
    params_m: float = Field(gt=0, le=limits.MAX_PARAMS_M, allow_inf_nan=False)


class JobSpec(BaseModel):
    """One training job: command, model (or its features), batch b, GPUs n and its length."""

    # strict: a field is its type or refused ("128" is not a batch size), as the schema says;
    # what the validators below require of two fields together is said in the schema too
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, json_schema_extra={
        "allOf": [{"anyOf": [_given(f, t) for f, t in (("model", "string"),
                                                        ("features", "object"))]},
                  {"anyOf": [_given(f, "integer") for f in ("iterations", "epochs")]}]})

    _length_required: ClassVar[bool] = True  # a submitted job states it: the daemon plans on it

    name: str = Field(max_length=limits.MAX_NAME, pattern=_NAME.pattern)
    command: list[Arg] = Field(min_length=1, max_length=limits.MAX_ARGS, json_schema_extra={
        "prefixItems": [{"type": "string", "minLength": 1, "maxLength": limits.MAX_ARG,
                         "pattern": _NO_NUL}]})  # the program: an Arg, not empty
    cwd: AbsolutePath | None = None
    env: dict[Annotated[str, Field(pattern=_ENV_KEY.pattern)], Arg] = Field(
        default_factory=dict, max_length=limits.MAX_ENV,
        json_schema_extra={"additionalProperties": False})
    model: str | None = Field(default=None, max_length=limits.MAX_NAME, pattern=_MODEL_PATTERN,
                              description="a zoo name: (md|sm)?Resnet<even 10-1000> or "
                                          "(md|sm)?VGG<4-1000>")
    features: SpecFeatures | None = None
    batch_size: int = Field(gt=0, le=limits.MAX_BATCH)
    gpus: int = Field(default=1, gt=0, le=limits.MAX_GPUS)
    iterations: int | None = Field(default=None, gt=0, le=limits.MAX_ITERATIONS)
    epochs: int | None = Field(default=None, gt=0, le=limits.MAX_EPOCHS)
    workers: int | None = Field(default=None, ge=0, le=limits.MAX_WORKERS)

    @field_validator("batch_size", "gpus", "iterations", "epochs", "workers", mode="before")
    @classmethod
    def _integral(cls, value: Any) -> Any:
        """JSON's 128.0 is the integer 128 (JSON Schema says so); "128", true and 1.5 are
        not, and strict refuses them."""
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be 1..64 letters, digits, '.', '_' or '-'")
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any, info: ValidationInfo) -> Any:
        # a job file's string is split like a shell would (``parse_jobspec``); over REST the
        # command is the array the schema says
        if isinstance(value, str) and (info.context or {}).get(JOB_FILE):
            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split command: {exc}") from None
        if isinstance(value, list) and value and value[0] == "":
            raise ValueError("program (first element) is empty")
        return value

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None) -> str | None:
        if value is not None and not PurePath(value).is_absolute():
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid variable name")
        return value

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value
        from adloader.models.names import parse

        try:
            name = parse(value).name
        except InputError as exc:
            raise ValueError(str(exc)) from None
        if name != value and not (info.context or {}).get(JOB_FILE):
            raise ValueError(f"unknown model {value!r}: did you mean {name!r}?")
        return name

    @model_validator(mode="after")
    def _complete(self) -> JobSpec:
        if self.model is None and self.features is None:
            raise ValueError("field 'model': required unless 'features' is given")
        if self.iterations is None and self.epochs is None and self._length_required:
            raise ValueError("field 'iterations': required unless 'epochs' is given")
        size = sum(len(a) for a in self.command) + sum(len(k) + len(v) for k, v in
                                                       self.env.items())
        if size > limits.MAX_SPEC_BYTES:  # a size limit, as a body over its own (REST: 413)
            raise PydanticCustomError(SPEC_TOO_LARGE, "command and env together must be at "
                                      "most {limit} characters, got {size}",
                                      {"limit": limits.MAX_SPEC_BYTES, "size": size})
        return self


# what each pattern of the schema means, in the words an error uses (the cursors': below)
_SAYS = {_NAME.pattern: "must be 1..64 letters, digits, '.', '_' or '-'",
         _ENV_KEY.pattern: "must be a valid variable name",
         _NO_NUL: "must not contain a NUL byte",
         _ABSOLUTE: "must be an absolute path with no NUL byte"}


def describe_error(error: dict, skip: int = 0) -> str:
    """One pydantic error as ``field 'a.b': must ...`` (``skip`` drops leading loc parts)."""
    loc = [str(x) for x in error.get("loc", ())[skip:]]
    kind = error.get("type", "")
    if kind == "missing":
        text = "is required"
    elif kind == "extra_forbidden":
        text = "is not a known field"
    elif kind == "string_pattern_mismatch" and error.get("ctx", {}).get("pattern") in _SAYS:
        text = _SAYS[error["ctx"]["pattern"]]
        if loc and loc[-1] == "[key]":  # a mapping's key: name it, as a value is named
            loc, text = loc[:-2], f"{loc[-2]!r} {text.replace('must be', 'is not')}"
    elif kind in ("value_error", "assertion_error") and "error" in error.get("ctx", {}):
        text = str(error["ctx"]["error"])
    else:
        text = _SHOULD.sub("must ", str(error.get("msg", "is invalid")))
    if text.startswith("Value error, "):
        text = text[len("Value error, "):]
    return f"field '{'.'.join(loc)}': {text}" if loc else text


def parse_jobspec(data: Any, origin: str = "job") -> JobSpec:
    """Validate ``data`` (a mapping) as a JobSpec; InputError ``ORIGIN: field 'x': ...``."""
    if not isinstance(data, dict):
        raise InputError(f"{origin}: a job must be a table/object, got {type(data).__name__}")
    try:
        return JobSpec.model_validate(data, context={JOB_FILE: True})
    except ValidationError as exc:
        raise InputError(f"{origin}: {describe_error(exc.errors()[0])}") from None


class RecordedSpec(JobSpec):
    """A job's spec as the daemon recorded it: a submitted job's, or that of a job started by
    hand (``command`` ``["(started by hand)"]``), whose length may be unknown (``iterations``
    and ``epochs`` both null)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, json_schema_extra={
        "allOf": [{"anyOf": [_given(f, t) for f, t in (("model", "string"),
                                                        ("features", "object"))]}]})
    _length_required: ClassVar[bool] = False


class JobView(BaseModel):
    """A job as the API shows it: its record, plus its live throughput and iteration."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    state: JobState
    workers: int | None = None
    pid: int | None = None  # the job's own process (the training command): what to signal
    uid: int | None = None  # the user whose process registered it (what the kernel said)
    supervisor_pid: int | None = None  # a launched job's supervisor, its process group's leader
    exit_code: int | None = None  # negative: killed by that signal
    reason: str | None = None  # how it ended ("exit code 3", "killed by SIGKILL", ...)
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    spec: RecordedSpec
    throughput: float | None = None  # samples/s over the last heartbeat interval
    iteration: int | None = None
    cpu_percent: float | None = None  # a launched job's processes, workers included

    @field_validator("spec", mode="before")
    @classmethod
    def _recorded(cls, value: Any) -> Any:
        """A submitted ``JobSpec`` is a recorded one as it is (it was checked when taken)."""
        if isinstance(value, JobSpec) and not isinstance(value, RecordedSpec):
            return RecordedSpec.model_construct(**dict(value))
        return value

    @classmethod
    def from_record(cls, record: Any, throughput: float | None = None,
                    iteration: int | None = None, cpu_percent: float | None = None,
                    pid: int | None = None) -> JobView:
        """A view of a ``daemon.store.store.JobRecord`` (or anything with the same attributes; its
        ``pid`` is the supervisor's) and ``pid``, the job's own process when known."""
        fields = ("id", "name", "state", "workers", "exit_code", "reason",
                  "submitted_at", "started_at", "finished_at", "uid")  # fmt: skip
        return cls(**{f: getattr(record, f, None) for f in fields}, spec=record.spec,
                   throughput=throughput,
                   iteration=iteration, cpu_percent=cpu_percent, pid=pid,
                   supervisor_pid=getattr(record, "pid", None))  # fmt: skip


# signals whose default action does not end a process: no way to cancel a job
_NOT_ENDING = ("SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG",
               "SIGWINCH")  # fmt: skip


def signal_number(name: str) -> int:
    """A signal that ends a process, from ``KILL``, ``SIGKILL`` or ``9`` (InputError if it
    is none: ``cancel --signal`` ends a job, it does not pause or poke it)."""
    import signal

    text = str(name).strip().upper()
    try:
        sig = signal.Signals(int(text)) if text.isdigit() else signal.Signals[
            text if text.startswith("SIG") else f"SIG{text}"]
    except (KeyError, ValueError):
        raise InputError(f"signal {name!r}: not a signal (e.g. TERM, INT, KILL or 9)") from None
    if sig.name in _NOT_ENDING:
        raise InputError(f"signal {name!r}: {sig.name} does not end a process")
    return int(sig)


def _ending_signals() -> tuple[str, ...]:
    import signal

    names = [s.name for s in signal.Signals if s.name not in _NOT_ENDING]
    return (*(n[3:] for n in names), *names, *(str(int(signal.Signals[n])) for n in names))


# what ``POST /v1/jobs/{id}/cancel?signal=`` takes: each signal that ends a process, as
# ``KILL``, ``SIGKILL`` or ``9`` (clients send the number: ``str(signal_number(name))``)
ENDING_SIGNALS = _ending_signals()
SignalName = Literal[ENDING_SIGNALS]  # type: ignore[valid-type]


# -- pages ----------------------------------------------------------------------------
# GET /v1/jobs and GET /v1/events answer one page, in id order (jobs: submit order). The
# header NEXT_CURSOR carries the cursor of the next page; a request that names no ``limit``
# gets PAGE_DEFAULT items, so an old client that never pages still gets a list (every job,
# on a node that keeps at most that many).
PAGE_DEFAULT = 500
PAGE_MAX = 5000
NEXT_CURSOR = "X-Next-Cursor"
MAX_CURSOR = 200  # characters: a cursor is a few dozen; anything longer is not one of ours
# A cursor names the last item of the page before it: ``j.`` and a job id (jobs), ``e.`` and
# an event id (events). Each string of its pattern is one: the page after it (after the
# last item there is, the end of the list). The daemon's header is the one to pass on.
JOB_CURSOR = "j."
EVENT_CURSOR = "e."
JOB_CURSOR_PATTERN = r"^j\." + limits.JOB_ID_PATTERN[1:]
EVENT_CURSOR_PATTERN = r"^e\.[0-9]{1,19}$"  # past 2^63 - 1: no event follows
MAX_KINDS = 32  # ``kind=`` given at most this often, each value at most MAX_KIND characters
MAX_KIND = 64
Limit = Annotated[int, Field(ge=1, le=PAGE_MAX)]
Time = Annotated[float | None, Field(ge=0, allow_inf_nan=False)]  # seconds since the epoch
JobCursor = Annotated[str | None, Field(max_length=MAX_CURSOR, pattern=JOB_CURSOR_PATTERN,
                                        description=f"the {NEXT_CURSOR} of the page before")]
EventCursor = Annotated[str | None, Field(max_length=MAX_CURSOR, pattern=EVENT_CURSOR_PATTERN,
                                          description=f"the {NEXT_CURSOR} of the page before")]


def _listed(value: Any) -> Any:
    """``state=a,b``, ``state=a&state=b`` or both: one flat list, blanks dropped."""
    return _split(value) if isinstance(value, list | str) else value


def _split(value: list[str] | str) -> list[str]:
    """Each value's comma-separated parts, blanks dropped, each once, in order."""
    values = [value] if isinstance(value, str) else value
    parts = (part.strip() for item in values if isinstance(item, str)
             for part in item.split(","))
    return list(dict.fromkeys(part for part in parts if part))


def _as_list(value: Any) -> Any:
    """One value, as a repeated parameter of one (it is split after the bounds apply)."""
    return [value] if isinstance(value, str) else value


class PageQuery(BaseModel):
    """A page: at most ``limit`` items after ``cursor`` (the last page's NEXT_CURSOR)."""

    model_config = ConfigDict(frozen=True)

    limit: Limit = PAGE_DEFAULT
    cursor: str | None = None


class JobQuery(PageQuery):
    """``GET /v1/jobs``: a page of the jobs that pass every filter given — ``state`` (one of
    JOB_STATES, repeated or comma-separated), ``name`` (exact), submitted in [since, until)."""

    cursor: JobCursor = None
    state: Annotated[list[JobState], BeforeValidator(_listed)] = []
    name: str | None = Field(default=None, max_length=limits.MAX_NAME)
    since: Time = None
    until: Time = None


class EventQuery(PageQuery):
    """``GET /v1/events``: a page of events, oldest first — after the ``cursor`` (or after
    event id ``since``, what clients before cursors send), of one ``job``, of the ``kind``s
    given, of jobs named ``name``, at a time in [t_since, t_until). ``kind`` is bounded as
    given (MAX_KINDS values of MAX_KIND characters, the schema's maxItems and maxLength),
    then each value split at its commas."""

    cursor: EventCursor = None
    since: int = Field(default=0, ge=0, le=2**63 - 1)
    job: str | None = Field(default=None, max_length=limits.MAX_JOB_ID)
    kind: Annotated[list[Annotated[str, Field(max_length=MAX_KIND)]],
                    Field(max_length=MAX_KINDS), BeforeValidator(_as_list),
                    AfterValidator(_split)] = []
    name: str | None = Field(default=None, max_length=limits.MAX_NAME)
    t_since: Time = None
    t_until: Time = None


# -- paths ----------------------------------------------------------------------------
# Every path of the REST API, for the daemon's routes (``adloader.daemon.api.app``) and its
# clients alike. ``{job_id}`` in a route is filled in by ``job_path``.
V1 = "/v1"  # the versioned API's prefix: every path but METRICS and HEALTH
JOBS = f"{V1}/jobs"
JOB = f"{JOBS}/{{job_id}}"
CANCEL, PAUSE, RESUME = "cancel", "pause", "resume"  # a job's actions: job_path(id, PAUSE)
LOG = "log"
JOB_CANCEL = f"{JOB}/{CANCEL}"
JOB_PAUSE = f"{JOB}/{PAUSE}"
JOB_RESUME = f"{JOB}/{RESUME}"
JOB_LOG = f"{JOB}/{LOG}"
ALLOCATIONS = f"{V1}/allocations"
NODE = f"{V1}/node"
EVENTS = f"{V1}/events"
MODEL = f"{V1}/model"
MODEL_FIT = f"{MODEL}/fit"
METRICS = "/metrics"
HEALTH = "/healthz"

# what a cursor's pattern means, in the words an error uses
_SAYS[JOB_CURSOR_PATTERN] = (f"must be a cursor of GET {JOBS} ('{JOB_CURSOR}' and a job id: "
                             f"pass on its answer's {NEXT_CURSOR} header)")
_SAYS[EVENT_CURSOR_PATTERN] = (f"must be a cursor of GET {EVENTS} ('{EVENT_CURSOR}' and an "
                               f"event id: pass on its answer's {NEXT_CURSOR} header)")


def job_path(job_id: str, action: str = "") -> str:
    """``/v1/jobs/ID`` (or ``/v1/jobs/ID/ACTION``), the id quoted for a URL."""
    from urllib.parse import quote

    return f"{JOBS}/{quote(job_id, safe='')}" + (f"/{action}" if action else "")
