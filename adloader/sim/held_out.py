"""The held-out set: generator seeds fixed in ``held_out.json`` (beside this module) before
any of their mixes was generated, to be run once per release by ``adloader bench held-out``
and reported as they fall. The development mixes (``adloader.sim.held_out_mixes``, seeds from
``MIX_SEED``, ``adloader bench mixes``) have been looked at while choosing between changes;
these have not.

Nothing else may generate them: ``random_mixes`` refuses their seeds unless this command
asks, tests/conftest.py fails any test that generates one (plumbing tests included), and
tests/unit/test_held_out_set.py fails if their numbers appear anywhere else in the
repository's code, tests or benches."""

from __future__ import annotations

import json
from pathlib import Path

from adloader.errors import InputError

PATH = Path(__file__).with_name("held_out.json")


def spec(path: Path | None = None) -> dict:
    """The committed held-out set: seeds [first, last], jobs, mix, rate_per_s, command,
    written, rule."""
    data = json.loads(Path(path or PATH).read_text())
    first, last = data["seeds"]
    if not (isinstance(first, int) and isinstance(last, int) and 0 <= first <= last):
        raise InputError(f"{path or PATH}: seeds must be [first, last], got {data['seeds']}")
    return data


def seeds(path: Path | None = None) -> list[int]:
    """Every generator seed of the held-out set, first to last."""
    first, last = spec(path)["seeds"]
    return list(range(first, last + 1))


def is_held_out(seed: int) -> bool:
    """Whether ``seed`` is in the committed held-out set."""
    first, last = spec()["seeds"]
    return first <= seed <= last


def held_out_benchmark(profile, model, config, json_path=None,
                       floor_slot: float | None = None, path: Path | None = None) -> int:
    """``adloader bench held-out``: ``bench mixes`` on exactly the held-out seeds, with the
    set's jobs, mix and rate, printed as ``bench mixes`` prints (every policy against no
    reallocation and balance; the default policy against no daemon, its best fixed settings
    in hindsight, the autotuner and the queues). ``path``: another set's file (tests)."""
    from adloader.sim import report
    from adloader.sim.output import console

    data = spec(path)
    first, last = data["seeds"]
    console().print(
        f"the held-out set ({path or PATH}): generator seeds {first}–{last}, fixed "
        f"{data['written']}; rule: {data['rule']}")
    return report.mixes_benchmark(profile, model, config, jobs=data["jobs"],
                                  rate=data["rate_per_s"], json_path=json_path,
                                  floor_slot=floor_slot, seeds=seeds(path), mix=data["mix"],
                                  label="held-out", allow_held_out=True,
                                  about={"file": str(path or PATH), **data})
