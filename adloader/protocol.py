"""The control channel's messages (A-Dloader §III-C), shared by the daemon and the master.

Frames are UTF-8 JSON objects of at most MAX_FRAME bytes with a ``type`` field. Every
message from a job carries its ``job`` id and ``token``; the daemon stamps each command
with a sequence number ``seq`` so a master drops stale ones queued while it was away.
``decode`` turns anything malformed, oversized or unknown into a ProtocolError.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

MAX_FRAME = 64 * 1024


class ProtocolError(ValueError):
    """A frame that is not a valid message; the receiver logs and drops it."""


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobFeatures(_Msg):
    """What the TPM needs of a job (eq. 6): model, batch B, GPUs n, FLOPs f, size M."""

    model: str = ""
    batch_size: int = Field(gt=0)
    gpus: int = Field(default=1, gt=0)
    flops_g: float = Field(gt=0)
    params_m: float = Field(gt=0)
    iterations: int | None = Field(default=None, gt=0)


# -- job (application master) -> daemon ------------------------------------------------
class Register(_Msg):
    type: Literal["register"] = "register"
    job: str
    token: str
    pid: int = 0
    cpu_group: str | None = Field(default=None, max_length=64)  # its kernel autogroup
    features: JobFeatures
    workers: int = Field(default=0, ge=0)  # the count the job runs with now
    requested: int | None = Field(default=None, ge=0)
    world_size: int = Field(default=1, gt=0)


class Heartbeat(_Msg):
    type: Literal["heartbeat"] = "heartbeat"
    job: str
    token: str
    iteration: int = Field(ge=0)
    step_s: float = Field(ge=0)  # mean GPU step (1/μ) over the interval
    data_wait_s: float = Field(ge=0)  # mean wait for a batch over the interval
    samples_per_s: float = Field(ge=0)
    workers: int = Field(ge=0)
    applied_seq: int = Field(default=0, ge=0)  # the last command applied


class Paused(_Msg):
    type: Literal["paused"] = "paused"
    job: str
    token: str
    seq: int = Field(ge=0)
    checkpoint: str | None = None


class Finish(_Msg):
    type: Literal["finish"] = "finish"
    job: str
    token: str
    iterations: int = Field(ge=0)
    exit_code: int = 0


# -- daemon -> job --------------------------------------------------------------------
class Allocation(_Msg):
    """The answer to Register: the workers to run with (0 = load in the main process)."""

    type: Literal["allocation"] = "allocation"
    seq: int = Field(ge=0)
    workers: int = Field(ge=0)
    heartbeat_s: float = Field(default=1.0, gt=0)


class Resize(_Msg):
    type: Literal["resize"] = "resize"
    seq: int = Field(ge=0)
    workers: int = Field(ge=0)


class Pause(_Msg):
    type: Literal["pause"] = "pause"
    seq: int = Field(ge=0)
    checkpoint: bool = False


class Resume(_Msg):
    type: Literal["resume"] = "resume"
    seq: int = Field(ge=0)
    workers: int = Field(ge=0)


class Refused(_Msg):
    """The daemon would not take a message (bad token, unknown job); says why."""

    type: Literal["refused"] = "refused"
    reason: str


FromJob = Annotated[Register | Heartbeat | Paused | Finish, Field(discriminator="type")]
ToJob = Annotated[Allocation | Resize | Pause | Resume | Refused, Field(discriminator="type")]
_FROM_JOB = TypeAdapter(FromJob)
_TO_JOB = TypeAdapter(ToJob)


def encode(message: _Msg) -> bytes:
    return message.model_dump_json(exclude_none=True).encode()


def _decode(frame: bytes, adapter: TypeAdapter):
    if not isinstance(frame, bytes | bytearray | memoryview):
        raise ProtocolError("frame is not bytes")
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME}")
    try:
        data = json.loads(bytes(frame).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from None
    if not isinstance(data, dict) or "type" not in data:
        raise ProtocolError("frame has no message type")
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "message"
        raise ProtocolError(f"{data.get('type')!r}: {where}: {err['msg']}") from None


def decode_from_job(frame: bytes) -> Register | Heartbeat | Paused | Finish:
    return _decode(frame, _FROM_JOB)


def decode_to_job(frame: bytes) -> Allocation | Resize | Pause | Resume | Refused:
    return _decode(frame, _TO_JOB)
