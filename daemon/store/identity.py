"""Which state database this is: checked every time the daemon opens its store.

A store is given a random id when it is made, kept inside it (table ``meta``, which a
release without this module leaves alone) and beside it (``adloader.db.id``). At every
start the two are compared: a database deleted while no daemon ran (or whose daemon was
killed before it could write it back) is found missing although its id file is there, and a
database swapped for another has another id. The daemon then starts on what it has and says
so — in its log, in ``/healthz`` (``store``) and as a ``store_lost`` event — rather than
running on quietly with the jobs of the old one unknown. A graceful stop checks the other
way round: a database deleted under the running daemon is written back from its open copy
before it exits (``Store.restore_if_gone``).
"""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from adloader.host.atomic import write_text

META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"


def id_file(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".id")


def check(db: sqlite3.Connection, db_path: Path) -> str | None:
    """The store's id made or read (inside ``db``, under the store's lock), the id file
    written; a note when the database is not the one the folder last had."""
    db.execute(META)
    row = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    made = row is None
    store_id = uuid.uuid4().hex if made else row[0]
    if made:
        db.execute("INSERT INTO meta (key, value) VALUES ('store_id', ?)", (store_id,))
    marker = id_file(db_path)
    try:
        was = marker.read_text().strip()
    except FileNotFoundError:
        was = None
    except (OSError, UnicodeDecodeError):
        was = ""
    note = None
    if was and was != store_id:
        note = (f"{db_path}: the state database was gone when the daemon started (the folder "
                f"had store {was}); a new one was made: jobs of the old one are unknown"
                if made else
                f"{db_path}: another state database ({store_id}) is in place of the one the "
                f"folder had ({was})")
    if was != store_id:
        write_text(marker, store_id + "\n", mode=0o600)
    return note
