"""The held-out set: generator seeds fixed in ``held_out.json`` (beside this module) before
any of their mixes was generated, to be run once per release by ``adloader bench held-out``
and reported as they fall. The development mixes (``adloader.bench.sim.held_out_mixes``, seeds from
``MIX_SEED``, ``adloader bench mixes``) have been looked at while choosing between changes;
these have not.

Nothing else may generate them: ``random_mixes`` refuses their seeds unless this command
asks, tests/conftest.py fails any test that generates one (plumbing tests included), and
tests/unit/bench/test_held_out_set.py fails if their numbers appear anywhere else in the
repository's code, tests or benches."""

from __future__ import annotations

import functools
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
    """Whether ``seed`` is in the committed held-out set (the file read once)."""
    first, last = _committed()
    return first <= seed <= last


@functools.cache
def _committed() -> tuple[int, int]:
    first, last = spec()["seeds"]
    return first, last
