"""Reading the daemon's settings file (TOML) into ``adloader.config.DaemonConfig``."""

from __future__ import annotations

import tomllib
from pathlib import Path

from adloader.config import DaemonConfig, config_from
from adloader.errors import InputError


def load_config(path: str | Path | None = None, environ=None) -> DaemonConfig:
    """Defaults, then the TOML file at ``path`` (if any), then ADLOADER_* variables."""
    data = None
    if path:
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"{path}: not valid TOML: {exc}") from None
    return config_from(data, environ, str(path) if path else "config")
