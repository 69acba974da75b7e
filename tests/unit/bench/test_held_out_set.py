"""The held-out set (bench/sim/held_out.json, ``adloader bench held-out``): its seeds are
fixed in one committed file, run once per release, and nothing else may read them — no test
(the conftest guard, plumbing tests included), no bench and no code names their numbers, and
``bench mixes`` refuses them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from adloader.bench.sim import held_out, held_out_mixes, report
from adloader.errors import InputError
from adloader.sim import generator

ROOT = Path(__file__).resolve().parents[3]
# the only places the held-out numbers may appear: the set's file and its command's module
ALLOWED = {Path(held_out.PATH).resolve(), Path(held_out.__file__).resolve()}
SEARCHED = ("tests", "bench", "adloader")
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def test_the_set_is_one_committed_file():
    spec = held_out.spec()
    assert set(spec) >= {"seeds", "jobs", "mix", "rate_per_s", "command", "written", "rule"}
    first, last = spec["seeds"]
    seeds = held_out.seeds()
    assert seeds[0] == first and seeds[-1] == last and len(seeds) == last - first + 1
    assert spec["command"] == "adloader bench held-out"
    assert spec["rule"] == "run once per release; report as it falls"
    # apart from the development mixes any `bench mixes --mixes N --seed S` of a usual size
    # draws (MIX_SEED + S·N + i for S < 100, N ≤ 60) and from the tests' seeds
    assert first >= held_out_mixes.MIX_SEED + 100 * 60 and all(
        held_out_mixes.held_out(s) for s in seeds)
    assert json.loads(held_out.PATH.read_text())["seeds"] == [first, last]


def _files():
    for top in SEARCHED:
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and not SKIPPED_DIRS & set(path.parts) \
                    and path.resolve() not in ALLOWED and path.stat().st_size < 4_000_000:
                yield path


def test_no_code_test_or_bench_names_a_held_out_seed():
    """A future test or bench cannot read the held-out mixes by their numbers: each of them,
    as a whole number, appears nowhere under tests/, bench/ or adloader/ but in the set's
    file and its command's module."""
    numbers = "|".join(str(s) for s in held_out.seeds())
    pattern = re.compile(rf"(?<![\d.])({numbers})(?!\d)".encode())
    found = []
    for path in _files():
        data = path.read_bytes()
        for match in pattern.finditer(data):
            line = data.count(b"\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group().decode()}")
    assert not found, "held-out seeds named outside bench/sim/held_out.json:\n" + \
        "\n".join(found[:20])


def test_a_test_that_generates_a_held_out_seed_fails():
    for seed in (held_out.seeds()[0], held_out.seeds()[-1]):
        assert held_out.is_held_out(seed)
        with pytest.raises(AssertionError, match="held-out set"):
            generator.generate(3, seed)
    assert not held_out.is_held_out(held_out_mixes.MIX_SEED)


@pytest.mark.held_out_plumbing
def test_a_plumbing_test_may_not_generate_one_either():
    """The marker lets `bench mixes`'s plumbing tests generate development mixes, never the
    held-out set."""
    with pytest.raises(AssertionError, match="held-out set"):
        generator.generate(3, held_out.seeds()[0])


def test_bench_mixes_refuses_the_held_out_seeds(run, paper_profile, paper_model):
    count = len(held_out.seeds())
    offset = (held_out.seeds()[0] - held_out_mixes.MIX_SEED) // count
    assert held_out_mixes.mix_seeds(count, offset)[0] == held_out.seeds()[0]
    with pytest.raises(InputError, match="held-out set"):  # before any mix is generated
        held_out_mixes.random_mixes(paper_profile, paper_model, count=count, seed=offset)
    with pytest.raises(InputError, match="held-out set"):
        held_out_mixes.random_mixes(paper_profile, paper_model, seeds=held_out.seeds()[-1:])
    code, _, err = run("bench", "mixes", "--mixes", str(count), "--seed", str(offset))
    assert code == 2 and "held-out set" in err


def test_bench_held_out_reads_its_seeds_from_the_file(run, monkeypatch):
    """The command runs the file's seeds: in a test the guard stops it at the first (and a
    second check here stops it, generating nothing more, were the guard gone)."""
    guarded, asked = generator.generate, []

    def stop(jobs, seed, *args, **kwargs):
        asked.append(seed)
        guarded(jobs, seed, *args, **kwargs)
        raise AssertionError("held-out set: the conftest guard let a held-out seed through")

    monkeypatch.setattr(generator, "generate", stop)
    with pytest.raises(AssertionError, match="held-out set"):
        run("bench", "held-out")
    assert asked == held_out.seeds()[:1]


@pytest.mark.slow  # the held-out bench over two mixes
def test_bench_held_out_on_another_sets_file(tmp_path, capsys, paper_profile, paper_model):
    """Plumbing on a set of a test's own seeds: the file's seeds, jobs, mix and rate, printed
    as `bench mixes` prints, and saved with the set's file."""
    from adloader.sim.simulator import SimConfig

    other = tmp_path / "set.json"
    other.write_text(json.dumps({**held_out.spec(), "seeds": [3, 4], "jobs": 3,
                                 "rate_per_s": 0.05}))
    saved = tmp_path / "out.json"
    assert report.held_out_benchmark(paper_profile, paper_model, SimConfig(), str(saved),
                                       path=other) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps its lines
    assert "2 held-out mixes, generator seeds 3–4" in out and "3 jobs each" in out
    assert "rule: run once per release" in out
    result = json.loads(saved.read_text())
    assert result["seeds"] == [3, 4] and result["jobs"] == 3 and result["rate_per_s"] == 0.05
    assert result["set"]["file"] == str(other)
    assert [m["seed"] for m in result["no_daemon"]["per_mix"]] == [3, 4]
