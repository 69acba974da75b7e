"""The state database copied before its schema is migrated, and the way back to that copy.

A daemon upgraded to a release with a newer schema migrates its store when it opens it, and
a daemon rolled back cannot read what the newer one wrote. So before any migration the store
is copied whole, its WAL included (SQLite's online backup, not a file copy), to
``adloader.db.schema<OLD>.bak`` beside it: written under another name, synced, checked
(it opens, at schema OLD) and only then put in place; a store that cannot be backed up is
not migrated. A backup already in place is kept, never overwritten: a migration tried again
after a crash must not replace the good copy. A daemon rolled back to schema N finds a store
newer than it and refuses it in one line that names ``adloader.db.schema<N>.bak`` and the
steps back (``newer_than_code``). The rules, for operators: README.md, "Upgrades and
rollbacks of the store".
"""

from __future__ import annotations

import logging
import os
import sqlite3
from contextlib import closing, suppress
from datetime import datetime
from pathlib import Path

from adloader.errors import StorageError
from adloader.host.atomic import fsync_path

from .fault import CAUSES, diagnose

log = logging.getLogger("adloader.daemon")


def backup_path(db_path: Path, version: int) -> Path:
    """Where the store at schema ``version`` is kept before it is migrated."""
    return db_path.with_name(f"{db_path.name}.schema{version}.bak")


def before_migration(db: sqlite3.Connection, db_path: Path, version: int, to: int) -> Path:
    """Back up the store ``db`` (at schema ``version``, about to be migrated to ``to``), or
    keep the backup already there; a StorageError (nothing migrated) when neither can be."""
    target = backup_path(db_path, version)
    refused = f"{db_path}: not migrated from schema {version} to {to}"
    if target.is_file():
        why = _unusable(target, version)
        if why:
            raise StorageError(f"{refused}: {target} is there but is not a backup of a schema "
                               f"{version} store ({why}); move it aside and start again")
        made = datetime.fromtimestamp(target.stat().st_mtime).isoformat(" ", "seconds")
        log.info("%s: migrating it from schema %d to %d; its backup %s (made %s) is kept",
                 db_path, version, to, target, made)
        return target
    partial = target.with_name(target.name + ".partial")
    try:
        _write(db, partial)
        why = _unusable(partial, version)
        if why:
            raise sqlite3.DatabaseError(f"the copy does not read back: {why}")
        os.replace(partial, target)
        fsync_path(target.parent)
    except (OSError, sqlite3.Error) as exc:
        with suppress(OSError):
            if partial.is_file():
                partial.unlink()
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        cause = diagnose(target)
        todo = CAUSES[cause] if cause else "make room for it and start again"
        raise StorageError(f"{refused}: cannot back it up to {target} first ({text}); the "
                           f"store is left as it was: {todo}") from None
    log.info("%s: backed up to %s before migrating it from schema %d to %d",
             db_path, target, version, to)
    return target


def newer_than_code(db_path: Path, version: int, ours: int) -> str:
    """The one line a daemon of schema ``ours`` says of a store at a newer ``version``."""
    line = (f"{db_path}: the state database has schema version {version}, newer than this "
            f"adloader's {ours} (a newer release migrated it)")
    backup = backup_path(db_path, ours)
    if backup.is_file():
        return (f"{line}; to run this release on the store as it was before that upgrade: "
                f"stop the daemon, move {db_path} and its -wal and -shm files aside, copy "
                f"{backup} to {db_path}, restart (jobs finished since the upgrade are then "
                "lost from the history)")
    return (f"{line}; run the newer release again, or move {db_path} aside to start with an "
            f"empty history (there is no backup {backup.name} beside it)")


def _write(db: sqlite3.Connection, partial: Path) -> None:
    """``db`` copied to ``partial`` (0600, one file in rollback-journal mode), synced."""
    for leftover in (partial, *(Path(f"{partial}{s}") for s in ("-journal", "-wal", "-shm"))):
        leftover.unlink(missing_ok=True)  # of a try that crashed
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with closing(sqlite3.connect(str(partial), isolation_level=None)) as copy:
        db.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # the copy is one file, no WAL beside it
    fsync_path(partial)


def _unusable(path: Path, version: int) -> str:
    """Why ``path`` is not a sound store at schema ``version``; "" when it is."""
    try:
        with closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)) as db:
            check = db.execute("PRAGMA quick_check(1)").fetchone()[0]
            found = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        return str(exc)
    if check != "ok":
        return check
    return "" if found == version else f"it is at schema {found}"
