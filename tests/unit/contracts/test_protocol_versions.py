"""Frames between releases: a newer peer's unknown fields are ignored (a daemon is upgraded
under running jobs, and a job may run a newer library than its daemon); an older master that
says no version is still understood; the scheduler keeps each job's version."""

from __future__ import annotations

import json
import time

import pytest

from adloader.protocol import (
    PROTOCOL,
    Heartbeat,
    JobFeatures,
    ProtocolError,
    Register,
    decode_from_job,
    decode_to_job,
    encode,
)

# Register's fields in release 0 (commit 140a4ce, the last before protocol versions)
RELEASE_0_REGISTER = {"type", "job", "token", "pid", "cpu_group", "features", "workers",
                      "requested", "world_size", "supervisor", "name", "data"}


def _register(**extra) -> bytes:
    msg = Register(job="j-000001", token="t" * 16, features=JobFeatures(
        batch_size=32, gpus=1, flops_g=1.0, params_m=10.0, iterations=100), workers=1)
    return json.dumps({**json.loads(encode(msg)), **extra}).encode()


def test_a_newer_master_s_unknown_fields_are_ignored_not_refused():
    msg = decode_from_job(_register(protocol=PROTOCOL + 1, resumable=True,
                                    gpu_model={"name": "H200"}))
    assert isinstance(msg, Register) and msg.protocol == PROTOCOL + 1
    assert not hasattr(msg, "resumable") and msg.unknown_fields == 2  # counted, not kept
    beat = json.loads(encode(Heartbeat(job="j-000001", token="t" * 16, iteration=3,
                                       step_s=0.1, data_wait_s=0.0, samples_per_s=10.0,
                                       workers=1)))
    assert decode_from_job(json.dumps({**beat, "gpu_util": 0.9}).encode()).iteration == 3


def test_a_master_that_says_no_version_is_0_and_this_release_sends_only_release_0_s_fields():
    """This release's Register carries no field release 0 lacks (release 0 refuses unknown
    fields: a daemon rolled back to it must still take this release's jobs)."""
    assert decode_from_job(_register()).protocol is None  # the daemon keeps 0
    assert decode_from_job(_register()).unknown_fields == 0
    sent = json.loads(_register())
    assert "protocol" not in sent
    assert set(sent) <= RELEASE_0_REGISTER, set(sent) - RELEASE_0_REGISTER


def test_a_newer_daemon_s_unknown_fields_reach_a_master_as_the_known_ones():
    frame = json.dumps({"type": "resize", "seq": 4, "workers": 3, "reason": "plan"}).encode()
    assert decode_to_job(frame).workers == 3


@pytest.mark.parametrize("frame", [
    {"type": "teleport", "job": "j-000001", "token": "t"},  # an unknown type: refused
    {"type": "heartbeat", "job": "j-000001", "token": "t", "iteration": -1, "step_s": 0.1,
     "data_wait_s": 0, "samples_per_s": 1, "workers": 1},  # a known field out of bounds
])
def test_what_stays_refused(frame):
    with pytest.raises(ProtocolError):
        decode_from_job(json.dumps(frame).encode())


def test_the_scheduler_keeps_each_job_s_version():
    """A job started by hand attaches with its Register: the daemon keeps its version."""
    from adloader.daemon.control.scheduler import Scheduler
    from adloader.daemon.control.tokens import TokenDigest
    from adloader.device import synth
    from adloader.device.device_profile import load_profile

    sched = Scheduler(capacity=4, gpus=2, policy="balance",
                      model=synth.fitted_model(load_profile("paper"), 0),
                      tokens=TokenDigest(b"k" * 32), clock=time.monotonic)
    for job, version in (("mine-new", PROTOCOL), ("mine-old", None)):
        extra = {"job": job} | ({} if version is None else {"protocol": version})
        out = sched.message(job.encode(), decode_from_job(_register(**extra)))
        assert not out.reply, out.reply
    assert sched.jobs["mine-new"].protocol == PROTOCOL and sched.jobs["mine-old"].protocol == 0
