"""Job tokens, kept as keyed hashes: the store never holds a token a reader could replay.

Each job proves itself with a random token that only it was handed. The daemon keeps
``HMAC-SHA256(key, token)`` with a key of its own (``STATE_DIR/secret``, 0600), compares in
constant time (``hmac.compare_digest``), and so a copy of the state database — or a
process that reads it — learns nothing it could speak with.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from adloader.errors import InputError

PREFIX = "hmac-sha256:"
KEY_BYTES = 32


class TokenDigest:
    """``digest(token)`` to store, ``verify(token, digest)`` to check a message."""

    def __init__(self, key: bytes):
        if len(key) < 16:
            raise ValueError("the token key must be at least 16 bytes")
        self._key = key

    @classmethod
    def load(cls, path: str | os.PathLike) -> TokenDigest:
        """The daemon's key from ``path``, created (0600) on first start."""
        path = Path(path)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            key = path.read_bytes()
            if len(key) < 16:
                raise InputError(f"{path}: the token key is damaged ({len(key)} bytes); "
                                 "remove it and restart (running jobs must then be "
                                 "resubmitted)") from None
            return cls(key)
        key = secrets.token_bytes(KEY_BYTES)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
            fh.flush()
            os.fsync(fh.fileno())
        return cls(key)

    def digest(self, token: str) -> str:
        return PREFIX + hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()

    def verify(self, token: object, digest: str) -> bool:
        """Whether ``token`` is the one ``digest`` was made from (constant time)."""
        if not isinstance(token, str) or not token or not digest:
            return False
        return hmac.compare_digest(self.digest(token).encode(), digest.encode())


def new_token() -> str:
    return secrets.token_urlsafe(24)
