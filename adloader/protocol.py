"""The control channel's messages (A-Dloader §III-C), shared by the daemon and the master.

Frames are UTF-8 JSON objects of at most MAX_FRAME bytes with a ``type`` field. Every
message from a job carries its ``job`` id and ``token``: the daemon judges it by that pair
alone, whoever sent it. The daemon stamps each command with a sequence number ``seq`` so a
master drops stale ones queued while it was away. Every field is bounded
(``adloader.limits``) and every float finite, so nothing a job sends can reach the
scheduler or the TPM out of range. ``decode`` turns anything malformed, oversized, of an
unknown type or out of bounds (NaN and Infinity included) into a ProtocolError.

Versions. A daemon is upgraded while jobs train, and jobs re-attach to the new one; a job
started later may run a newer library than its daemon; a daemon may be rolled back. So a
field this release does not know is ignored, not refused (the frame stays bounded by
MAX_FRAME; the daemon counts them): this is protocol 1 (``PROTOCOL``). Release 0, before it,
refuses unknown fields, so this release sends none that release 0 does not know — a daemon
rolled back to it still takes this release's jobs, and its jobs this daemon's messages.
``Register.protocol`` is read (absent: 0) so that a later release's master can say its
version; this release's master does not send it yet (release 0 would refuse it). The rule
from here: add fields freely; send a field an older peer cannot ignore only to a peer whose
version says it knows it. Tested with frames from newer and older masters
(``tests/unit/test_protocol_versions.py``) and with the release before this one, a job and
a daemon of each, restarted under each other (``tests/integration/test_upgrade.py``).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, TypeAdapter, ValidationError

from adloader import limits

MAX_FRAME = 64 * 1024
PROTOCOL = 1  # this release's: unknown fields ignored both ways (0: refused)

JobId = Annotated[str, Field(min_length=1, max_length=limits.MAX_JOB_ID,
                             pattern=limits.JOB_ID_PATTERN)]
Token = Annotated[str, Field(min_length=1, max_length=limits.MAX_TOKEN)]
Count = Annotated[int, Field(ge=0, le=limits.MAX_COUNTER)]
Workers = Annotated[int, Field(ge=0, le=limits.MAX_WORKERS)]
Seconds = Annotated[float, Field(ge=0, le=limits.MAX_STEP_S, allow_inf_nan=False)]
ExitCode = Annotated[int, Field(ge=limits.EXIT_CODE_RANGE[0], le=limits.EXIT_CODE_RANGE[1])]
Text = Annotated[str, Field(max_length=limits.MAX_TEXT)]
SUPERVISORS = ("launcher", "run")  # who reports a job's exit status besides its master


class ProtocolError(ValueError):
    """A frame that is not a valid message; the receiver logs and drops it."""


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # a newer peer's fields: dropped
    _unknown: int = PrivateAttr(default=0)  # how many were, in a decoded frame

    @property
    def unknown_fields(self) -> int:
        """Fields of the frame this message was decoded from (nested ones included) that
        this release does not know (ignored; the daemon counts them:
        ``adloader_unknown_fields``)."""
        return self._unknown


class JobFeatures(_Msg):
    """What the TPM needs of a job (eq. 6): model, batch B, GPUs n, FLOPs f, size M."""

    model: str = Field(default="", max_length=limits.MAX_NAME)
    batch_size: int = Field(gt=0, le=limits.MAX_BATCH)
    gpus: int = Field(default=1, gt=0, le=limits.MAX_GPUS)
    flops_g: float = Field(gt=0, le=limits.MAX_FLOPS_G, allow_inf_nan=False)
    params_m: float = Field(gt=0, le=limits.MAX_PARAMS_M, allow_inf_nan=False)
    iterations: int | None = Field(default=None, gt=0, le=limits.MAX_ITERATIONS)


class DataSpec(_Msg):
    """What the node cache needs of a job's data (issue 14): the dataset it reads (jobs
    naming the same ``dataset`` of the same ``size`` share one node cache), its mean sample
    size, and its access stream: the loader's ``seed``, ``epochs`` and global ``batch``."""

    dataset: str = Field(min_length=1, max_length=limits.MAX_NAME,
                         pattern=limits.JOB_ID_PATTERN)
    size: int = Field(gt=0, le=limits.MAX_SAMPLES)
    sample_bytes: int = Field(gt=0, le=limits.MAX_SAMPLE_BYTES)
    seed: int = Field(default=0, ge=0, le=limits.MAX_SEED)
    epochs: int = Field(default=1, gt=0, le=limits.MAX_EPOCHS)
    batch: int = Field(gt=0, le=limits.MAX_BATCH)


# -- job (application master, or the `adloader run` supervisor) -> daemon -----------
class Register(_Msg):
    type: Literal["register"] = "register"
    job: JobId
    token: Token
    pid: int = Field(default=0, ge=0, le=limits.MAX_PID)
    cpu_group: str | None = Field(default=None, max_length=64)  # its kernel autogroup
    features: JobFeatures
    workers: Workers = 0  # the count the job runs with now
    requested: Workers | None = None
    world_size: int = Field(default=1, gt=0, le=limits.MAX_GPUS)
    supervisor: Literal["launcher", "run"] | None = None  # who will report its exit status
    name: str | None = Field(default=None, max_length=limits.MAX_NAME)  # what to call it
    data: DataSpec | None = None  # asks for the node cache of its dataset
    # its version; None: not said (release 0, and this one: encode leaves None out)
    protocol: int | None = Field(default=None, ge=0, le=limits.MAX_COUNTER)


class Heartbeat(_Msg):
    type: Literal["heartbeat"] = "heartbeat"
    job: JobId
    token: Token
    iteration: Count
    step_s: Seconds  # mean GPU step (1/μ) over the interval
    data_wait_s: Seconds  # mean wait for a batch over the interval
    samples_per_s: float = Field(ge=0, le=limits.MAX_RATE, allow_inf_nan=False)
    workers: Workers
    applied_seq: Count = 0  # the last command applied


class Paused(_Msg):
    type: Literal["paused"] = "paused"
    job: JobId
    token: Token
    seq: Count
    checkpoint: Text | None = None


class Finish(_Msg):
    """The master's last word: training ended (``exit_code`` as the master saw it: 0, or
    1 after an uncaught exception, -2 after Ctrl-C; ``error`` its last line)."""

    type: Literal["finish"] = "finish"
    job: JobId
    token: Token
    iterations: Count
    exit_code: ExitCode = 0
    error: Text | None = None
    # who asked it to stop, when not the daemon ("slurm": the SIGTERM of scancel or a time
    # limit): the daemon records the ending as cancelled (an older one ignores it)
    stopped_by: str | None = Field(default=None, max_length=64)


class Exit(_Msg):
    """The supervisor's word (``adloader run``): the job's process ended with ``exit_code``,
    or was killed by ``signal``."""

    type: Literal["exit"] = "exit"
    job: JobId
    token: Token
    exit_code: ExitCode | None = None
    signal: int | None = Field(default=None, ge=1, le=128)


# -- daemon -> job --------------------------------------------------------------------
class Allocation(_Msg):
    """The answer to Register: the workers to run with (0 = load in the main process), and
    the node cache segment of its dataset when it asked for one and the node has one."""

    type: Literal["allocation"] = "allocation"
    seq: Count
    workers: Workers
    heartbeat_s: float = Field(default=1.0, gt=0, le=3600, allow_inf_nan=False)
    cache: str | None = Field(default=None, max_length=limits.MAX_NAME,
                              pattern=r"^[A-Za-z0-9_.-]+$")


class Resize(_Msg):
    type: Literal["resize"] = "resize"
    seq: Count
    workers: Workers


class Pause(_Msg):
    type: Literal["pause"] = "pause"
    seq: Count
    checkpoint: bool = False


class Resume(_Msg):
    type: Literal["resume"] = "resume"
    seq: Count
    workers: Workers


class Stop(_Msg):
    """Cancel: stop at the next batch boundary; after ``grace_s`` the job ends itself."""

    type: Literal["stop"] = "stop"
    seq: Count
    grace_s: Seconds = 10.0


class Refused(_Msg):
    """The daemon would not take a message (bad token, unknown job); says why."""

    type: Literal["refused"] = "refused"
    reason: Text


FromJob = Annotated[Register | Heartbeat | Paused | Finish | Exit, Field(discriminator="type")]
ToJob = Annotated[Allocation | Resize | Pause | Resume | Stop | Refused,
                  Field(discriminator="type")]
_FROM_JOB = TypeAdapter(FromJob)
_TO_JOB = TypeAdapter(ToJob)


def encode(message: _Msg) -> bytes:
    return message.model_dump_json(exclude_none=True).encode()


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _decode(frame: bytes, adapter: TypeAdapter):
    if not isinstance(frame, bytes | bytearray | memoryview):
        raise ProtocolError("frame is not bytes")
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME}")
    try:
        data = json.loads(bytes(frame).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from None
    if not isinstance(data, dict) or "type" not in data:
        raise ProtocolError("frame has no message type")
    try:
        msg = adapter.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "message"
        raise ProtocolError(f"{str(data.get('type'))[:32]!r}: {where}: {err['msg']}") from None
    msg._unknown = _unknown_in(data, msg)
    return msg


def _unknown_in(data: dict, model: BaseModel) -> int:
    """Fields of ``data`` that ``model``'s class does not know, nested messages included."""
    known = type(model).model_fields
    count = len(data.keys() - known.keys())
    for name in data.keys() & known.keys():
        value = getattr(model, name)
        if isinstance(value, BaseModel) and isinstance(data[name], dict):
            count += _unknown_in(data[name], value)
    return count


def decode_from_job(frame: bytes) -> Register | Heartbeat | Paused | Finish | Exit:
    return _decode(frame, _FROM_JOB)


def decode_to_job(frame: bytes) -> Allocation | Resize | Pause | Resume | Stop | Refused:
    return _decode(frame, _TO_JOB)
