"""The contention surface measured for real (workloads/contention.py): pipelines side by side,
each a process with its own DataLoader over the same small JPEGs, and `adloader profile
--contention` writing it into a profile the `measured` truth replays."""

from __future__ import annotations

import json

import pytest

from adloader.cli import main
from adloader.device.device_profile import load_profile
from adloader.errors import InputError
from adloader.sim.truth import load_truth
from adloader.workloads.contention import measure_contention
from adloader.workloads.dataset import SyntheticJPEGDataset
from adloader.workloads.measure import measure_loading


def small_dataset(root, size=10_000):
    return SyntheticJPEGDataset(root, size, image_size=(64, 48), num_classes=10, crop=32,
                                images=5)


def test_two_pipelines_of_one_worker_side_by_side(tmp_path):
    seen = []
    points = measure_contention(small_dataset(tmp_path / "img"), [(1, 1), (1,)], batch_size=4,
                                window_s=0.3, progress=seen.append)
    assert [p.workers for p in points] == [(1, 1), (1,)]
    assert all(len(p.rates) == len(p.workers) and min(p.rates) > 0 for p in points)
    assert len(seen) == 2 and "side by side d=1,1" in seen[0]


def test_pipelines_start_after_a_loader_ran_in_the_measuring_process(tmp_path):
    """The parent's own DataLoader (``measure_loading``, as ``bench live`` runs it first) ran
    torch's randperm on its OpenMP threads; a forked pipeline must not wait for them."""
    dataset = small_dataset(tmp_path / "img", size=100_000)
    measure_loading(dataset, [1], batch_size=4, batches=2)
    points = measure_contention(dataset, [(1, 1)], batch_size=4, window_s=0.3)
    assert min(points[0].rates) > 0


def test_a_pipeline_that_fails_fails_the_point_by_name(tmp_path):
    with pytest.raises(InputError, match="ran out of samples"):
        measure_contention(small_dataset(tmp_path / "img", size=8), [(1, 1)], batch_size=4,
                           window_s=0.3)


def test_profile_contention_writes_the_surface_the_measured_truth_replays(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["profile", "--quick", "-o", str(out), "--contention", "--grid", "1;1,1",
                 "--window", "0.3"]) == 0
    printed = capsys.readouterr().out
    assert "Contention surface" in printed and "side by side d=1,1" in printed
    data = json.loads((out / "profile.json").read_text())
    assert [p["workers"] for p in data["loading_surface"]] == [[1], [1, 1]]
    profile = load_profile(str(out / "profile.json"))
    surface = load_truth("measured", profile).surface
    for p in profile.loading_surface:
        names = [f"j{i}" for i in range(len(p.workers))]
        assert list(surface.rates(dict(zip(names, p.workers, strict=True))).values()) == list(
            p.rates)
