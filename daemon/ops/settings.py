"""The daemon's settings: its TOML file read into ``adloader.config.DaemonConfig``; its REST
token file (made 0600 on first start); and the rule that REST stays on loopback unless a
token was provisioned beforehand (the metrics listener's rules: ``daemon.api.metrics_listener``)."""

from __future__ import annotations

import ipaddress
import os
import secrets
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


def ensure_token(path: Path, group_may_read: bool = False) -> tuple[str, bool]:
    """The bearer token, created 0600 if missing; (token, whether it existed before). One
    that exists must be readable by no one else, its group too unless ``group_may_read``
    (the read-only metrics token: a Kubernetes Secret mounted with ``fsGroup`` is 0440)."""
    if path.exists():
        token = path.read_text().strip()
        if not token:
            raise InputError(f"{path}: the token file is empty")
        if path.stat().st_mode & (0o007 if group_may_read else 0o077):
            raise InputError(f"{path}: the token file must not be readable by others (chmod "
                             f"{'640' if group_may_read else '600'})")
        return token, True
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return token, False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
