"""The simulated ground truths (adloader.sim.truth, adloader.sim.colocation): the published
truth reads its cited figures back, slows co-located jobs by the published factors, and the
TPM fitted from its noisy samples cannot fit it exactly — an error the benches report."""

import hashlib
import io
import json
import math
from importlib import resources
from pathlib import Path

import pytest
from rich.console import Console

from adloader.bench.sim import report
from adloader.device import synth
from adloader.errors import InputError
from adloader.models import features
from adloader.sim.simulator import SimConfig, SimJob, Simulator, gpu_rates
from adloader.sim.trace import TraceJob, load_trace
from adloader.sim.truth import TRUTHS, load_truth, published_truth, tpm_error

SOURCES = Path(__file__).parents[3] / "docs" / "sources" / "gpu-measurements.md"
STATIC = [(j.model, j.batch_size, j.gpus) for j in load_trace("paper-static").jobs]


def _file(*parts: str) -> bytes:
    return resources.files("adloader.sim").joinpath(*parts).read_bytes()


def _data() -> dict:
    return json.loads(_file("truths", "published-steps.json"))


def _intro(name: str) -> tuple[str, dict]:
    profile, model, config = report.setup("paper", truth=name)
    buffer = io.StringIO()
    facts = report.intro(Console(file=buffer, width=400), profile, config, model, STATIC)
    return buffer.getvalue(), facts


def test_interpolation_returns_each_published_figure_at_its_batch():
    truth = published_truth()
    curve = _data()["step_time"]["batch_curve"]
    for point in curve:
        assert truth.steps.relative_rate(point["batch"]) == pytest.approx(point["images_per_s"])
    # between published batches: linear in log2(batch), not eq. 6's linear-in-b step
    mid = truth.steps.relative_rate(math.sqrt(64 * 128))
    assert mid == pytest.approx((curve[2]["images_per_s"] + curve[3]["images_per_s"]) / 2)
    # the zoo's Resnet18 is the published ResNet-18 (CGN: 1.34 ms/image at 128 on a 2080 Ti)
    assert truth.step_time("Resnet18", 128, 1) == pytest.approx(128 * 1.34e-3)
    assert truth.step_time("VGG16", 56, 1) == pytest.approx(56 / 190)  # Lambda: 190 img/s
    # more GPUs add the all-reduce term, fewer samples per GPU take less time
    assert truth.step_time("Resnet18", 64, 2) > truth.step_time("Resnet18", 64, 1)


def test_every_figure_cites_its_line_in_the_sources_and_the_zoo_table_matches():
    data = _data()
    cited = [a["source"] for a in data["step_time"]["anchors"]]
    cited += [c["source"] for c in data["step_time"]["batch_curve"]]
    cited += [p["source"] for p in data["colocation"]["pairs"]]
    assert all(c.startswith("docs/sources/gpu-measurements.md:") for c in cited)
    lines = SOURCES.read_text().splitlines()

    def line(source: str) -> str:
        return lines[int(source.split(":")[1].split()[0]) - 1]

    for a in data["step_time"]["anchors"]:
        assert any(str(v) in line(a["source"]) for v in (a["ms_per_image"],
                                                         round(a["images_per_s"])))
    for p in data["colocation"]["pairs"]:
        assert line(p["source"]).startswith("| v100 | ResNet-")
    truth = published_truth()
    for name, row in data["zoo"].items():
        feat = features(name)
        anchor = truth.steps.anchor(name, feat.flops_g)
        assert anchor["model"] == row["anchor"], name
        assert feat.flops_g / anchor["flops_g"] == pytest.approx(row["flops_ratio"], abs=1e-6)
        assert truth.colocation.job_class(feat.flops_g) == row["class"], name


def test_co_located_gpu_bound_jobs_run_at_the_published_factor_of_their_solo_rate():
    coloc = published_truth().colocation
    spec = TraceJob(name="a", model="Resnet18", batch_size=64, gpus=1, iterations=10,
                    arrival_s=0)

    def job(name, model, step):
        feat = features(model)
        return SimJob(spec.model_copy(update={"name": name, "model": model}), feat.flops_g,
                      feat.params_m, step, gpu_ids=(0,), colocation=coloc)

    heavy, light = job("heavy", "Resnet18", 0.1), job("light", "mdResnet12", 0.02)
    alone = gpu_rates([heavy], lambda j: 1e9)["heavy"]
    assert alone == pytest.approx(10.0)  # alone: no interference
    both = gpu_rates([heavy, light], lambda j: 1e9)
    # Gavel V100, ResNet-18 bs64 (light) + ResNet-50 bs64 (heavy): 12.439/24.093, 3.553/4.395
    assert both["heavy"] / 10.0 == pytest.approx(3.553 / 4.395, abs=1e-3)
    assert both["light"] / 50.0 == pytest.approx(12.439 / 24.093, abs=1e-3)
    twin = job("twin", "Resnet18", 0.1)
    pair = gpu_rates([heavy, twin], lambda j: 1e9)  # ResNet-50 bs64 twice: 2.189/4.395
    assert pair["heavy"] / 10.0 == pytest.approx(2.189 / 4.395, abs=1e-3)
    # perfect time-slicing (the model truth) gives each half
    plain = [SimJob(j.spec, j.flops_g, j.params_m, j.step_s, gpu_ids=(0,)) for j in (heavy, light)]
    assert gpu_rates(plain, lambda j: 1e9) == pytest.approx({"heavy": 5.0, "light": 25.0})
    # a partner its loader holds back leaves the GPU, and nobody runs faster than alone
    held = gpu_rates([heavy, light], lambda j: 64.0 if j.name == "light" else 1e9)
    assert held["light"] == pytest.approx(1.0) and held["heavy"] <= 10.0 + 1e-9


def test_the_simulator_runs_on_the_chosen_truth(paper_profile, paper_model):
    trace = load_trace("paper-static")
    published = Simulator(trace, paper_profile, paper_model, SimConfig(truth="published"))
    truth = published_truth()
    for j in published.jobs:
        assert j.step_s == pytest.approx(truth.step_time(j.spec.model,
                                                         j.spec.batch_size / j.spec.gpus,
                                                         j.spec.gpus))
        assert j.colocation is truth.colocation
    model = Simulator(trace, paper_profile, paper_model, SimConfig())
    assert SimConfig().truth == "model" and all(j.colocation is None for j in model.jobs)
    for j in model.jobs:
        feat = features(j.spec.model)
        assert j.step_s == paper_profile.step_time(j.spec.batch_size / j.spec.gpus,
                                                   feat.flops_g, feat.params_m, j.spec.gpus)
    with pytest.raises(InputError, match="model, published, measured"):
        Simulator(trace, paper_profile, paper_model, SimConfig(truth="bogus"))
    with pytest.raises(InputError, match="no loading surface"):  # test_loading_surface.py
        Simulator(trace, paper_profile, paper_model, SimConfig(truth="measured"))


@pytest.mark.slow  # two TPM fits and their errors
def test_the_tpm_fits_the_model_truth_but_not_the_published_one(paper_profile):
    model_truth = load_truth("model", paper_profile)
    exact = tpm_error(model_truth, synth.fitted_model(paper_profile, 0, model_truth), STATIC)
    assert exact["max"] < 0.02  # only the samples' 3 % noise
    published = published_truth()
    jobs = [(m, 128 if "Resnet" in m else 64, n) for m in ("Resnet18", "mdResnet12",
            "smResnet20", "VGG13", "Resnet32", "smVGG7") for n in (1, 2, 4)]
    fitted = synth.fitted_model(paper_profile, 0, published)
    wrong = tpm_error(published, fitted, jobs)
    assert wrong["max"] > 0.05 and wrong["median"] > exact["median"]


@pytest.mark.parametrize("name", [t for t in TRUTHS if t != "measured"])  # the paper profile
# has no surface: `measured`'s intro is in tests/unit/workloads/test_loading_surface.py
def test_the_bench_intro_reports_the_truth_its_hashes_and_the_tpm_error(name):
    text, facts = _intro(name)
    profile_hash = hashlib.sha256(
        resources.files("adloader.device").joinpath("profiles", "paper.json").read_bytes()
    ).hexdigest()
    assert f"truth {name!r}" in text and f"profile sha256 {profile_hash}" in text
    assert facts["profile_sha256"] == profile_hash
    if name == "published":
        digest = hashlib.sha256(_file("truths", "published-steps.json")).hexdigest()
        assert f"sha256 {digest};" in text and facts["truth_sha256"] == digest
    assert "TPM step-time error against truth" in text
    assert facts["tpm_error"]["jobs"] == len(STATIC)
    assert (facts["tpm_error"]["max"] > 0.01) == (name == "published")


def test_an_unknown_truth_is_refused_naming_the_choices():
    with pytest.raises(InputError, match="choose one of model, published, measured"):
        report.setup("paper", truth="bogus")


@pytest.mark.processes  # runs docs/sources/make_published_truth.py
def test_the_published_truth_is_made_from_its_sources_byte_for_byte(tmp_path):
    """docs/sources/make_published_truth.py, run on the quoted sources, writes exactly the
    committed truth file: every figure in it comes from a cited line."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for rel in ("docs/sources/gpu-measurements.md", "models/features.json",
                "docs/sources/make_published_truth.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, tmp_path / rel)
    (tmp_path / "adloader/sim/truths").mkdir(parents=True)
    subprocess.run([sys.executable, "docs/sources/make_published_truth.py"], cwd=tmp_path,
                   check=True, capture_output=True, timeout=60)
    made = (tmp_path / "adloader/sim/truths/published-steps.json").read_bytes()
    assert made == (root / "adloader/sim/truths/published-steps.json").read_bytes()
