"""H5Rows (SOLAR's aggregated chunk loading on HDF5) under torch's and adloader's loaders."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from adloader.client.data.chunked import H5Rows, measure_threshold
from adloader.client.loader.loader import ElasticDataLoader
from adloader.datapath.chunk_runs import ChunkThreshold
from adloader.errors import InputError

h5py = pytest.importorskip("h5py")
ROWS = 300


@pytest.fixture
def h5file(tmp_path):
    path = tmp_path / "rows.h5"
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=rng.integers(0, 256, (ROWS, 3, 4, 4), dtype=np.uint8),
                         chunks=(8, 3, 4, 4))
        f.create_dataset("y", data=np.arange(ROWS, dtype=np.int64) * 10)
        f.create_dataset("short", data=np.zeros(5))
    return str(path)


class Tagged(H5Rows):
    """Says which path read each sample: 1 for ``__getitems__``, 0 for ``__getitem__``."""

    def __getitem__(self, index):
        return super().__getitem__(index), 0

    def __getitems__(self, indices):
        return [(s, 1) for s in super().__getitems__(indices)]


class PerSample(H5Rows):
    __getitems__ = None


def test_rows_equal_h5py_in_the_samplers_order(h5file):
    ds = H5Rows(h5file, ("x", "y"), threshold=3)
    assert len(ds) == ROWS and ds.threshold.max_gap == 3
    with h5py.File(h5file, "r") as f:
        x, y = f["x"][:], f["y"][:]
    indices = [17, 3, 3, 299, 5, 4, 0, 16, 150]
    for (xi, yi), i in zip(ds.__getitems__(indices), indices, strict=True):
        assert torch.equal(xi, torch.from_numpy(x[i])) and int(yi) == y[i]
    assert torch.equal(ds[7][0], torch.from_numpy(x[7]))
    assert ds.__getitems__([]) == []
    one = H5Rows(h5file, "x", threshold=ChunkThreshold(0, 2), transform=lambda r: r.sum())
    assert one.__getitems__([2, 1]) == [x[2].sum(), x[1].sum()]
    with pytest.raises(IndexError):
        ds[ROWS]
    with pytest.raises(IndexError):
        ds.__getitems__([1, -1])
    with pytest.raises(InputError):
        H5Rows(h5file, "missing")
    with pytest.raises(InputError):
        H5Rows(h5file, ("x", "short"))
    with pytest.raises(InputError):
        H5Rows(h5file + ".nope", "x")


def test_threshold_is_measured_once_per_file(h5file):
    first = measure_threshold(h5file, "x")
    assert isinstance(first, ChunkThreshold) and first.max_run >= 1
    assert measure_threshold(h5file, "x") is first
    assert isinstance(measure_threshold(h5file, "x", refresh=True), ChunkThreshold)
    assert H5Rows(h5file, "x").threshold == measure_threshold(h5file, "x")


@pytest.mark.parametrize("loader", ["torch", "elastic", "elastic-inline"])
def test_loaders_fetch_a_batch_with_getitems_and_match_per_sample(h5file, loader):
    ds = Tagged(h5file, ("x", "y"), threshold=2)
    ds[0]  # the parent holds a handle now: a fork must not share it
    assert ds._handle is not None
    kw = dict(batch_size=16, num_workers=0 if loader == "elastic-inline" else 2, timeout=30)
    if loader == "torch":
        make = lambda d: DataLoader(d, shuffle=True,  # noqa: E731
                                    generator=torch.Generator().manual_seed(4), **kw)
    else:
        make = lambda d: ElasticDataLoader(d, shuffle=True, seed=4, **kw)  # noqa: E731
    batches = list(make(ds))
    if kw["num_workers"]:
        assert ds._handle is None  # closed before the workers forked
    reference = list(make(PerSample(h5file, ("x", "y"), threshold=2)))
    assert len(batches) == len(reference) == -(-ROWS // 16)
    for ((x, y), tag), (rx, ry) in zip(batches, reference, strict=True):
        assert bool(tag.all())  # every sample came through __getitems__
        assert torch.equal(x, rx) and torch.equal(y, ry)
    assert sorted(torch.cat([y for (_, y), _ in batches]).tolist()) == list(range(0, ROWS * 10,
                                                                                  10))
    assert int(ds[1][0][1]) == 10  # the parent reopens after the fork


def test_a_pickled_dataset_opens_its_own_handle(h5file):
    ds = H5Rows(h5file, "x", threshold=1)
    ds[0]
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._handle is None and torch.equal(copy[3], ds[3])
    ds.close()
    assert ds._handle is None and torch.equal(copy[3], ds[3])
