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
(``tests/unit/contracts/test_protocol_versions.py``) and with the release before this one, a job and
a daemon of each, restarted under each other (``tests/integration/ops/test_upgrade.py``).

The messages are msgspec Structs, not pydantic models: every job imports this module as it
starts, beside two or three others on a node whose cores are already its bottleneck, and
the master's import cost 0.155 CPU-s after torch's with pydantic, 0.031 with msgspec
(docs/benchmarks.md, "A job's start without pydantic"). A message is checked against its
bounds when it is built, as when it is decoded; the REST API keeps pydantic (FastAPI).
"""

from __future__ import annotations

import json
import threading
from typing import Annotated, Literal, get_args

import msgspec
from msgspec import Meta

from adloader import limits

MAX_FRAME = 64 * 1024
PROTOCOL = 1  # this release's: unknown fields ignored both ways (0: refused)

JobId = Annotated[str, Meta(min_length=1, max_length=limits.MAX_JOB_ID,
                            pattern=limits.JOB_ID_PATTERN)]
Token = Annotated[str, Meta(min_length=1, max_length=limits.MAX_TOKEN)]
Count = Annotated[int, Meta(ge=0, le=limits.MAX_COUNTER)]
Workers = Annotated[int, Meta(ge=0, le=limits.MAX_WORKERS)]
Seconds = Annotated[float, Meta(ge=0, le=limits.MAX_STEP_S)]  # bounded: no NaN, no infinity
ExitCode = Annotated[int, Meta(ge=limits.EXIT_CODE_RANGE[0], le=limits.EXIT_CODE_RANGE[1])]
Text = Annotated[str, Meta(max_length=limits.MAX_TEXT)]
Name = Annotated[str, Meta(max_length=limits.MAX_NAME)]
Short = Annotated[str, Meta(max_length=64)]
SUPERVISORS = ("launcher", "run")  # who reports a job's exit status besides its master

_checking = threading.local()  # set while a message is checked (or decoded): no check again


class ProtocolError(ValueError):
    """A frame that is not a valid message, or a message built out of its bounds; the
    receiver logs and drops it."""


def _why(exc: msgspec.ValidationError, kind: str) -> ProtocolError:
    """``kind: where: what`` of msgspec's ``Expected `int` <= 1024 - at `$.workers```."""
    text, _, where = str(exc).partition(" - at `$")
    where = where.strip("`.") or "message"
    return ProtocolError(f"{kind[:32]!r}: {where}: {text}")


# every message kw_only=True: built by keyword, its fields in the order its frames always had
class _Msg(msgspec.Struct, frozen=True, dict=True):  # dict: room for what decode counted
    def __post_init__(self) -> None:
        if getattr(_checking, "on", False):
            return
        _checking.on = True
        try:  # built in code: held to the bounds a decoded frame is held to
            checked = msgspec.convert(msgspec.to_builtins(self), type(self))
        except msgspec.ValidationError as exc:
            raise _why(exc, type(self).__name__) from None
        finally:
            _checking.on = False
        for name in self.__struct_fields__:  # and given its types: a dict its message, an
            msgspec.structs.force_setattr(self, name, getattr(checked, name))  # int its float

    @property
    def unknown_fields(self) -> int:
        """Fields of the frame this message was decoded from (nested ones included) that
        this release does not know (ignored; the daemon counts them:
        ``adloader_unknown_fields``)."""
        return self.__dict__.get("_unknown", 0)


def replaced(message: _Msg, **changes) -> _Msg:
    """``message`` with ``changes``, checked as a new message is."""
    return type(message)(**{**msgspec.structs.asdict(message), **changes})


class JobFeatures(_Msg, kw_only=True):
    """What the TPM needs of a job (eq. 6): model, batch B, GPUs n, FLOPs f, size M."""

    model: Name = ""
    batch_size: Annotated[int, Meta(gt=0, le=limits.MAX_BATCH)]
    gpus: Annotated[int, Meta(gt=0, le=limits.MAX_GPUS)] = 1
    flops_g: Annotated[float, Meta(gt=0, le=limits.MAX_FLOPS_G)]
    params_m: Annotated[float, Meta(gt=0, le=limits.MAX_PARAMS_M)]
    iterations: Annotated[int, Meta(gt=0, le=limits.MAX_ITERATIONS)] | None = None


class DataSpec(_Msg, kw_only=True):
    """What the node cache needs of a job's data: the dataset it reads (jobs
    naming the same ``dataset`` of the same ``size`` share one node cache), its mean sample
    size, and its access stream: the loader's ``seed``, ``epochs`` and global ``batch``."""

    dataset: Annotated[str, Meta(min_length=1, max_length=limits.MAX_NAME,
                                 pattern=limits.JOB_ID_PATTERN)]
    size: Annotated[int, Meta(gt=0, le=limits.MAX_SAMPLES)]
    sample_bytes: Annotated[int, Meta(gt=0, le=limits.MAX_SAMPLE_BYTES)]
    seed: Annotated[int, Meta(ge=0, le=limits.MAX_SEED)] = 0
    epochs: Annotated[int, Meta(gt=0, le=limits.MAX_EPOCHS)] = 1
    batch: Annotated[int, Meta(gt=0, le=limits.MAX_BATCH)]


# -- job (application master, or the `adloader run` supervisor) -> daemon -----------
class Register(_Msg, kw_only=True):
    type: Literal["register"] = "register"
    job: JobId
    token: Token
    pid: Annotated[int, Meta(ge=0, le=limits.MAX_PID)] = 0
    cpu_group: Short | None = None  # its kernel autogroup
    features: JobFeatures
    workers: Workers = 0  # the count the job runs with now
    requested: Workers | None = None
    world_size: Annotated[int, Meta(gt=0, le=limits.MAX_GPUS)] = 1
    supervisor: Literal["launcher", "run"] | None = None  # who will report its exit status
    name: Name | None = None  # what to call it
    data: DataSpec | None = None  # asks for the node cache of its dataset
    # its version; None: not said (release 0, and this one: encode leaves None out)
    protocol: Count | None = None


class Heartbeat(_Msg, kw_only=True):
    type: Literal["heartbeat"] = "heartbeat"
    job: JobId
    token: Token
    iteration: Count
    step_s: Seconds  # mean GPU step (1/μ) over the interval
    data_wait_s: Seconds  # mean wait for a batch over the interval
    samples_per_s: Annotated[float, Meta(ge=0, le=limits.MAX_RATE)]
    workers: Workers
    applied_seq: Count = 0  # the last command applied


class Paused(_Msg, kw_only=True):
    type: Literal["paused"] = "paused"
    job: JobId
    token: Token
    seq: Count
    checkpoint: Text | None = None


class Finish(_Msg, kw_only=True):
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
    stopped_by: Short | None = None


class Exit(_Msg, kw_only=True):
    """The supervisor's word (``adloader run``): the job's process ended with ``exit_code``,
    or was killed by ``signal``."""

    type: Literal["exit"] = "exit"
    job: JobId
    token: Token
    exit_code: ExitCode | None = None
    signal: Annotated[int, Meta(ge=1, le=128)] | None = None


# -- daemon -> job --------------------------------------------------------------------
class Allocation(_Msg, kw_only=True):
    """The answer to Register: the workers to run with (0 = load in the main process), and
    the node cache segment of its dataset when it asked for one and the node has one."""

    type: Literal["allocation"] = "allocation"
    seq: Count
    workers: Workers
    heartbeat_s: Annotated[float, Meta(gt=0, le=3600)] = 1.0
    cache: Annotated[str, Meta(max_length=limits.MAX_NAME,
                               pattern=r"^[A-Za-z0-9_.-]+$")] | None = None


class Resize(_Msg, kw_only=True):
    type: Literal["resize"] = "resize"
    seq: Count
    workers: Workers


class Pause(_Msg, kw_only=True):
    type: Literal["pause"] = "pause"
    seq: Count
    checkpoint: bool = False


class Resume(_Msg, kw_only=True):
    type: Literal["resume"] = "resume"
    seq: Count
    workers: Workers


class Stop(_Msg, kw_only=True):
    """Cancel: stop at the next batch boundary; after ``grace_s`` the job ends itself."""

    type: Literal["stop"] = "stop"
    seq: Count
    grace_s: Seconds = 10.0


class Refused(_Msg, kw_only=True):
    """The daemon would not take a message (bad token, unknown job); says why."""

    type: Literal["refused"] = "refused"
    reason: Text


FromJob = Register | Heartbeat | Paused | Finish | Exit
ToJob = Allocation | Resize | Pause | Resume | Stop | Refused


def _by_type(union) -> dict[str, type[_Msg]]:
    """Each message of ``union`` by its ``type`` (the default its class gives the field)."""
    return {next(f.default for f in msgspec.structs.fields(cls) if f.name == "type"): cls
            for cls in get_args(union)}


_FROM_JOB = _by_type(FromJob)
_TO_JOB = _by_type(ToJob)


def _no_none(value):
    if isinstance(value, dict):
        return {k: _no_none(v) for k, v in value.items() if v is not None}
    return value


def encode(message: _Msg) -> bytes:
    """The message's frame: its fields as JSON, those that are None left out."""
    return json.dumps(_no_none(msgspec.to_builtins(message)), separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False).encode()


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _decode(frame: bytes, kinds: dict[str, type[_Msg]]):
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
    kind = data["type"]
    cls = kinds.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"{str(kind)[:32]!r}: type: not a message this peer takes "
                            f"({', '.join(kinds)})")
    _checking.on = True
    try:
        msg = msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise _why(exc, kind) from None
    finally:
        _checking.on = False
    msg.__dict__["_unknown"] = _unknown_in(data, msg)
    return msg


def _unknown_in(data: dict, message: _Msg) -> int:
    """Fields of ``data`` that ``message``'s class does not know, nested messages included."""
    known = set(type(message).__struct_fields__)
    count = len(data.keys() - known)
    for name in data.keys() & known:
        value = getattr(message, name)
        if isinstance(value, _Msg) and isinstance(data[name], dict):
            count += _unknown_in(data[name], value)
    return count


def decode_from_job(frame: bytes) -> FromJob:
    return _decode(frame, _FROM_JOB)


def decode_to_job(frame: bytes) -> ToJob:
    return _decode(frame, _TO_JOB)
