"""The catalog file on disk: opened read-only, replaced whole, never locked.

The file is read with ``immutable=1`` (no locks: it is never changed in place); a missing,
stale, corrupt, truncated or foreign file, or one of another :data:`~.rows.CATALOG_VERSION`,
opens as None (an empty catalog). A refresh writes a whole new file: a copy of the old one
(or a new one) in a hidden temp file in ``_catalog/``, changed, then renamed over the old one.
Several processes may refresh at once, on one host or over a shared file system: the last
rename wins and the others' work is redone when needed. Temp files a dead refresher left are
removed after :data:`STALE_TEMP_S`. sqlite3 (standard library) is imported only here, and
only when the file is opened or written.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable

from ..layout import TMP_SUFFIX
from .rows import CATALOG_FILE, CATALOG_VERSION, SCHEMA, TABLES

STALE_TEMP_S = 600.0  # a refresher's temp file older than this was left by a process that died


def open_file(path: Path) -> Any:
    """The catalog file at ``path``, opened read-only (a ``sqlite3.Connection``), or None when
    it is missing or unusable."""
    import sqlite3

    try:
        if not path.is_file():
            return None
        db = sqlite3.connect(f"file:{path}?immutable=1", uri=True, check_same_thread=False)
        try:
            version = db.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchone()
            for table in ("runs", "run_details", "part_checks", "cursors"):
                db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchall()
        except Exception:
            db.close()
            raise
        if version is None or version[0] != str(CATALOG_VERSION):
            db.close()
            return None
        return db
    except Exception:  # corrupt, truncated, foreign, unreadable: an empty catalog
        return None


def replace_file(path: Path, root: Path, copy: bool, fill: Callable[[Any, bool], None]) -> None:
    """Write a new catalog file over ``path``: the old one's tables (``copy``, when it was
    opened) or new ones, changed by ``fill(db, new)`` (``new``: the tables are empty, so
    ``fill`` must put back what is still valid), then renamed into place. Raises on any error
    (the caller passes over it: the catalog is a cache)."""
    import shutil
    import sqlite3

    folder = path.parent
    folder.mkdir(exist_ok=True)
    remove_stale_temps(folder)
    tmp = folder / f".{CATALOG_FILE}.{secrets.token_hex(4)}{TMP_SUFFIX}"
    try:
        new = not copy
        if copy:
            shutil.copyfile(path, tmp)
        db = sqlite3.connect(f"file:{tmp}?vfs=unix-none", uri=True)  # a private file: no locks
        try:
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            if not new:
                ok = db.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchone()
                new = ok is None or ok[0] != str(CATALOG_VERSION)
            if new:
                for table in TABLES:
                    db.execute(f"DROP TABLE IF EXISTS {table}")
                for stmt in SCHEMA:
                    db.execute(stmt)
                db.execute("INSERT INTO catalog_info VALUES ('version', ?)", (str(CATALOG_VERSION),))
                db.execute("INSERT INTO catalog_info VALUES ('root', ?)", (str(root),))
            fill(db, new)
            db.commit()
        finally:
            db.close()
        os.replace(tmp, path)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def remove_stale_temps(folder: Path) -> None:
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for e in entries:
        if e.name.startswith(".") and e.name.endswith(TMP_SUFFIX):
            try:
                if now - e.stat().st_mtime > STALE_TEMP_S:
                    os.unlink(e.path)
            except OSError:
                pass
