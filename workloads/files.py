"""Writing result and settings files atomically (a temp file beside, then a rename)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json(path: str | Path, data, indent: int | None = 2) -> Path:
    return write_text(path, json.dumps(data, indent=indent) + "\n")
