"""Messages built in code are held to what a decoded frame is held to (msgspec Structs, as the
pydantic models before them): out of bounds is a ProtocolError naming the field, a nested
dict becomes its message and an int its float, and the frame is the one the pydantic release
sent, field for field."""

from __future__ import annotations

import json

import pytest

from adloader.protocol import (
    Allocation,
    DataSpec,
    Heartbeat,
    JobFeatures,
    ProtocolError,
    Register,
    decode_from_job,
    encode,
    replaced,
)

FEATURES = {"batch_size": 32, "flops_g": 1.0, "params_m": 10.0}


@pytest.mark.parametrize(("build", "field"), [
    (lambda: JobFeatures(batch_size=0, flops_g=1.0, params_m=1.0), "batch_size"),
    (lambda: JobFeatures(batch_size=1, flops_g=float("nan"), params_m=1.0), "flops_g"),
    (lambda: JobFeatures(batch_size=1, flops_g=float("inf"), params_m=1.0), "flops_g"),
    (lambda: Register(job="", token="t", features=JobFeatures(**FEATURES)), "job"),
    (lambda: Register(job="a b", token="t", features=JobFeatures(**FEATURES)), "job"),
    (lambda: Register(job="j", token="t", features=JobFeatures(**FEATURES), workers=-1),
     "workers"),
    (lambda: Register(job="j", token="t", features={**FEATURES, "batch_size": "32"}),
     "features.batch_size"),
    (lambda: Heartbeat(job="j", token="t", iteration=1, step_s=-1.0, data_wait_s=0.0,
                       samples_per_s=1.0, workers=1), "step_s"),
    (lambda: Allocation(seq=1, workers=2, cache="../x"), "cache"),
])
def test_a_message_built_out_of_its_bounds_is_refused_naming_the_field(build, field):
    with pytest.raises(ProtocolError, match=rf": {field}: "):
        build()


def test_a_message_built_in_code_has_the_types_a_decoded_one_has():
    msg = Register(job="j", token="t", features=dict(FEATURES),
                   data={"dataset": "d", "size": 10, "sample_bytes": 3, "batch": 4})
    assert isinstance(msg.features, JobFeatures) and isinstance(msg.data, DataSpec)
    beat = Heartbeat(job="j", token="t", iteration=1, step_s=1, data_wait_s=0,
                     samples_per_s=3, workers=1)
    assert isinstance(beat.step_s, float) and isinstance(beat.samples_per_s, float)
    assert decode_from_job(encode(msg)) == msg and decode_from_job(encode(beat)) == beat
    moved = replaced(msg, pid=42)
    assert moved.pid == 42 and moved.features == msg.features
    with pytest.raises(ProtocolError, match=": pid: "):
        replaced(msg, pid=-1)


def test_the_frame_is_the_pydantic_release_s_field_for_field():
    """What the release before (pydantic, ``exclude_none``) sent for the same messages."""
    msg = Register(job="j1", token="t", pid=3, workers=2, features=JobFeatures(
        model="Resnet18é", batch_size=32, flops_g=1.8, params_m=11.0),
        data=DataSpec(dataset="d", size=10, sample_bytes=3, batch=4))
    assert encode(msg) == (
        '{"type":"register","job":"j1","token":"t","pid":3,"features":{"model":"Resnet18é",'
        '"batch_size":32,"gpus":1,"flops_g":1.8,"params_m":11.0},"workers":2,"world_size":1,'
        '"data":{"dataset":"d","size":10,"sample_bytes":3,"seed":0,"epochs":1,"batch":4}}'
    ).encode()
    beat = Heartbeat(job="j", token="t", iteration=1, step_s=0.1, data_wait_s=0.0,
                     samples_per_s=3, workers=2)
    assert json.loads(encode(beat)) == {"type": "heartbeat", "job": "j", "token": "t",
                                        "iteration": 1, "step_s": 0.1, "data_wait_s": 0.0,
                                        "samples_per_s": 3.0, "workers": 2, "applied_seq": 0}
    assert encode(beat).count(b'"samples_per_s":3.0') == 1
    assert encode(Allocation(seq=1, workers=2)) == \
        b'{"type":"allocation","seq":1,"workers":2,"heartbeat_s":1.0}'
