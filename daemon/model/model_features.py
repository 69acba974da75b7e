"""Model features (f, M) of submitted jobs, counted in a child process when not shipped.

The shipped table (``models/features.json``) answers at once and needs no torch. Any other
zoo name is counted by ``torch.utils.flop_counter`` in a child process of its own, one at a
time and for at most ``timeout_s``: the daemon never imports torch, and a tenant naming a
very deep model costs a core for a few seconds, never the event loop or another request.
What was counted is kept in ``STATE_DIR/model-features.json`` for later lookups.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from dataclasses import asdict
from pathlib import Path

from adloader.errors import InputError
from adloader.host.atomic import write_json
from adloader.models.features import (
    MEASURE_COMMAND,
    ModelFeatures,
    lookup,
    measured,
    remember,
)
from adloader.models.names import parse


class FeatureCounter:
    def __init__(self, cache_path: Path | None = None, timeout_s: float = 120.0):
        self.cache_path, self.timeout_s = cache_path, timeout_s
        self._lock = threading.Lock()
        if cache_path is not None:
            try:
                for row in json.loads(cache_path.read_text()).values():
                    remember(ModelFeatures(**row))
            except (OSError, ValueError, TypeError):
                pass

    def features(self, name: str) -> ModelFeatures:
        """f and M of zoo model ``name``: from the table, or counted in a child process
        (InputError when it cannot be counted in time)."""
        canonical = parse(name).name  # InputError for a name outside the zoo
        found = lookup(canonical)
        if found is not None:
            return found
        with self._lock:  # one count at a time; the others wait (off the event loop)
            found = lookup(canonical)
            if found is None:
                found = self._count(canonical)
                remember(found)
                self._save()
        return found

    def _count(self, name: str) -> ModelFeatures:
        try:
            done = subprocess.run([*MEASURE_COMMAND, name], capture_output=True, text=True,
                                  timeout=self.timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise InputError(f"model {name!r}: counting its FLOPs took over {self.timeout_s:g} s; "
                             "give 'features' (flops_g, params_m) instead") from None
        try:
            data = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise InputError(f"model {name!r}: its FLOPs could not be counted "
                             f"({done.stderr.strip()[-200:] or 'no output'})") from None
        if "error" in data:
            raise InputError(str(data["error"]))
        return ModelFeatures(**data)

    def _save(self) -> None:
        if self.cache_path is None:
            return
        rows = {f"{f.name}@{f.image_size}": asdict(f) for f in measured()}
        with contextlib.suppress(OSError):
            write_json(self.cache_path, rows, indent=None)
