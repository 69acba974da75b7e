"""Sample sources: a folder's files, and a remote storage whose bandwidth the node shares."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from adloader.client.data.storage import LocalDirectorySource, RemoteStorageSource, SampleReadError
from adloader.errors import InputError

CTX = multiprocessing.get_context("fork")
DEADLINE_S = 10


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "samples"
    root.mkdir()
    for i in range(6):
        (root / f"s{i:02d}.bin").write_bytes(bytes([i]) * (10_000 + i))
    (root / "notes.txt").write_text("not a sample")
    return root


def test_local_source_reads_files_in_name_order(folder):
    src = LocalDirectorySource(folder, "s*.bin")
    assert len(src) == 6
    assert src.read(3) == bytes([3]) * 10_003
    assert src.path(3).endswith("s03.bin")
    assert src.sizes().tolist() == [10_000 + i for i in range(6)]
    cyc = LocalDirectorySource(folder, "s*.bin", size=14)  # cycles like SyntheticJPEGDataset
    assert cyc.read(13) == cyc.read(1) and cyc.sizes().size == 14
    with pytest.raises(IndexError):
        src.read(6)


def test_local_source_bad_folders(tmp_path, folder):
    with pytest.raises(InputError, match="does not exist"):
        LocalDirectorySource(tmp_path / "nope")
    with pytest.raises(InputError, match=r"no file matches '\*.jpg'"):
        LocalDirectorySource(folder, "*.jpg")


def test_an_unreadable_sample_names_itself_and_its_path(folder):
    src = LocalDirectorySource(folder, "s*.bin")
    os.unlink(folder / "s04.bin")
    with pytest.raises(SampleReadError, match=r"sample 4: cannot read .*s04\.bin: No such file"):
        src.read(4)
    remote = RemoteStorageSource(src, bandwidth_mb_s=0.001, latency_ms=5000)
    t0 = time.monotonic()
    with pytest.raises(SampleReadError, match="sample 4"):
        remote.read(4)  # at once: a failed read never books the (very slow) link
    assert time.monotonic() - t0 < 1
    assert isinstance(SampleReadError("x"), OSError)  # an I/O failure, not bad input
    remote.close()


def test_remote_bad_settings(tmp_path, folder):
    src = LocalDirectorySource(folder, "s*.bin")
    with pytest.raises(InputError, match="bandwidth must be > 0"):
        RemoteStorageSource(src, 0)
    with pytest.raises(InputError, match="latency must be >= 0"):
        RemoteStorageSource(src, 1, latency_ms=-1)
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="cannot create the state folder"):
        RemoteStorageSource(src, 1, state_dir=tmp_path / "f" / "link")


def test_latency_is_paid_per_read(folder):
    remote = RemoteStorageSource(LocalDirectorySource(folder, "s*.bin"), 1000, latency_ms=80)
    t0 = time.monotonic()
    remote.read(0)
    elapsed = time.monotonic() - t0
    assert 0.08 <= elapsed < 0.08 + 0.5
    remote.close()


def _reader(remote, indices, start, out) -> None:
    start.wait(DEADLINE_S)
    t0 = time.monotonic()
    for i in indices:
        remote.read(i)
    out.put(time.monotonic() - t0)


def test_two_processes_share_the_bandwidth(folder):
    """6 samples × ~10 kB over 0.2 MB/s: one process needs ~0.3 s; two reading them all
    (together 120 kB) need ~0.6 s on a shared link, not 0.3 s."""
    remote = RemoteStorageSource(LocalDirectorySource(folder, "s*.bin"), bandwidth_mb_s=0.2)
    total = 2 * sum(10_000 + i for i in range(6))
    start, out = CTX.Event(), CTX.Queue()
    procs = [CTX.Process(target=_reader, args=(remote, list(range(6)), start, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    start.set()
    for p in procs:
        p.join(DEADLINE_S)
        assert not p.is_alive(), "a reader hung"
    wall = time.monotonic() - t0
    each = [out.get(timeout=1) for _ in procs]
    ideal = total / 0.2e6
    assert wall >= 0.95 * ideal, f"{total} B in {wall:.2f} s beats the link ({ideal:.2f} s)"
    assert max(each) < ideal * 1.5 + 0.3
    link = remote.link()
    assert link["bytes"] == total and link["reads"] == 12
    remote.close()
    assert not os.path.exists(remote.state_dir)


def test_sources_given_one_state_folder_share_one_link(tmp_path, folder):
    local = LocalDirectorySource(folder, "s*.bin")
    a = RemoteStorageSource(local, 0.2, state_dir=tmp_path / "link")
    b = RemoteStorageSource(local, 0.2, state_dir=tmp_path / "link")
    a.read(0)
    b.read(1)
    assert a.link()["reads"] == b.link()["reads"] == 2
    a.close()
    b.close()
    assert (tmp_path / "link").is_dir()  # a folder the user gave stays
