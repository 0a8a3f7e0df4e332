"""The store's catalog: a cache of what every run folder holds, so a command costs what changed.

``<root>/_catalog/catalog.sqlite`` remembers, per run: the usable fields of its ``run.json``
(and what could not be read), its writer files, and per record kind its part files (name,
size, modification time) with what their footers and ``writer``/``seq`` columns say (rows,
row-id set, largest step, newest time); the bytes of the run folder; and, per sync cursor, what
the cursor says and how many rows are pending against the run's parts. docs/format.md section
11 is the spec.

The promise: **the catalog is a cache, never the truth.** Every entry is stored with the
``stat`` fingerprint (device, inode, size, modification and change times) of what it was
derived from: ``run.json``, the ``_writers`` folder, each kind folder, the cursor file. Before
an entry is used, that file or folder is ``stat``-ed again, and an entry whose fingerprint
differs is derived again from the files. Part files are immutable and every file the store
makes visible arrives by a rename, so a folder's fingerprint changes whenever its listing
does. Fingerprints are taken *before* the files are read (a change in between makes the
stored fingerprint old, never the content), and a fingerprint whose times are less than
:data:`RACY_S` older than the moment it was taken is not stored (a coarse file-system clock
could give the next change the same time: such entries are derived again next time).

A missing, stale, corrupt, truncated or foreign catalog file only costs time: it is read with
``immutable=1`` (no locks: the file is never changed in place), any error reading it counts as
an empty catalog, and the next refresh writes a whole new one (a copy of the old one with the
changes, to a hidden temp file in ``_catalog/``, renamed over the old one). Several processes
may refresh at once, on one host or over a shared file system: the last rename wins and the
others' work is redone when needed. Writers of runs never read or lock it; a store that cannot
be written (a read-only snapshot) is served without a catalog. Deleting ``_catalog/`` is always
safe.

sqlite3 (standard library) is imported only when the catalog is opened; pyarrow only when a
part file must be read.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .layout import (
    ARTIFACTS_DIR,
    KINDS,
    MANIFEST_DIR,
    PROJECT_PREFIX,
    RUN_FILE,
    RUN_PREFIX,
    TMP_SUFFIX,
    WRITERS_DIR,
    RunPaths,
    relist,
)
from .meta import parse_run_json
from .ranges import RangeSet

CATALOG_DIR = "_catalog"
CATALOG_FILE = "catalog.sqlite"
CATALOG_VERSION = 1
_SEP = os.sep
# each kind's folder inside a run folder (trackstore.store.layout.RunPaths.kind_dir), as text
_KIND_DIRS = {k: (f"{ARTIFACTS_DIR}{os.sep}{MANIFEST_DIR}" if k == "artifacts" else k) for k in KINDS}
RACY_S = 3.0  # a fingerprint younger than this (file-system time vs the clock) is not trusted later
STALE_TEMP_S = 600.0  # a refresher's temp file older than this was left by a process that died

_RUN_COLUMNS = ("project", "run_id", "meta_fp", "unreadable", "problems", "name", "status", "created_at",
                "ended_at", "updated_at", "last_step", "host", "user", "tags", "grp", "job_type", "exit_code",
                "heartbeat_at", "pid", "write_errors", "writers_fp", "parts_fp", "bytes_fp", "bytes")
_HEAVY = ("meta", "writers", "parts")
_SCHEMA = (
    "CREATE TABLE catalog_info (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE runs (project TEXT NOT NULL, run_id TEXT NOT NULL, meta_fp TEXT, unreadable INTEGER, "
    "problems TEXT, name TEXT, status TEXT, created_at TEXT, ended_at TEXT, updated_at TEXT, last_step INTEGER, "
    "host TEXT, user TEXT, tags TEXT, grp TEXT, job_type TEXT, exit_code INTEGER, heartbeat_at TEXT, pid INTEGER, "
    "write_errors TEXT, writers_fp TEXT, parts_fp TEXT, bytes_fp TEXT, bytes INTEGER, meta TEXT, writers TEXT, "
    "parts TEXT, PRIMARY KEY (project, run_id)) WITHOUT ROWID",
    "CREATE TABLE cursors (path TEXT PRIMARY KEY, fp TEXT, summary TEXT) WITHOUT ROWID",
)


def catalog_path(root: Path) -> Path:
    return Path(root) / CATALOG_DIR / CATALOG_FILE


# ---------------------------------------------------------------------------- fingerprints
def fingerprint(path: str | os.PathLike, now: float | None = None) -> str | None:
    """``stat`` fingerprint of a file or folder: ``"-"`` when it does not exist, ``""`` when it
    changed too recently to be trusted later (:data:`RACY_S`), None when it cannot be stat-ed."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "-"
    except OSError:
        return None
    now = time.time() if now is None else now
    if max(st.st_mtime, st.st_ctime) > now - RACY_S:
        return ""
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _same(stored: str | None, current: str | None) -> bool:
    """A stored fingerprint still holds: both known, neither racy, and equal."""
    return bool(stored) and bool(current) and stored == current


# ---------------------------------------------------------------------------- one part file
@dataclass(frozen=True)
class PartRecord:
    """What the catalog knows of one part file (names, sizes and mtimes are its fingerprint).

    ``rows`` and ``ids`` are None when its ``writer``/``seq`` columns cannot be read (a damaged
    part: its rows can be neither counted nor synced); ``last_ts`` is None when its footer
    cannot be read; ``last_step`` is the largest metrics ``step`` in its footer statistics.
    """

    name: str
    size: int
    mtime_ns: int
    rows: int | None
    ids: dict | None
    last_step: int | None
    last_ts: float | None

    def to_json(self) -> list:
        return [self.name, self.size, self.mtime_ns, self.rows, self.ids, self.last_step, self.last_ts]

    @classmethod
    def from_json(cls, v: list) -> PartRecord:
        return cls(*v)

    @property
    def damaged(self) -> bool:
        return self.ids is None

    def range_set(self) -> RangeSet:
        return RangeSet.from_json(self.ids or {})


def read_part_record(path: Path, kind: str, st: os.stat_result) -> PartRecord:
    """Read a part's footer and its ``writer``/``seq`` columns (raises FileNotFoundError if it vanished)."""
    import pyarrow.parquet as pq

    if not path.exists():
        raise FileNotFoundError(path)
    last_ts: float | None = None
    last_step = None
    try:
        md = pq.read_metadata(path)
        ts = column_max(md, "ts")
        last_ts = ts.timestamp() if ts is not None else st.st_mtime
        if kind == "metrics":
            last_step = column_max(md, "step")
    except FileNotFoundError:
        raise
    except (OSError, ValueError):
        pass
    rows = ids = None
    try:
        t = pq.read_table(path, columns=["writer", "seq"])
        got = RangeSet()
        got.add_table(t)
        rows, ids = t.num_rows, got.to_json()
    except FileNotFoundError:
        raise
    except Exception:  # damaged: doctor reports it; it cannot be counted or synced either
        pass
    return PartRecord(path.name, st.st_size, st.st_mtime_ns, rows, ids,
                      int(last_step) if last_step is not None else None, last_ts)


def column_max(md, column: str):
    """The largest value of ``column`` over a file's row groups, from their statistics (None if absent)."""
    try:
        idx = md.schema.names.index(column)
    except ValueError:
        return None
    best = None
    for rg in range(md.num_row_groups):
        st = md.row_group(rg).column(idx).statistics
        if st is not None and st.has_min_max:
            best = st.max if best is None else max(best, st.max)
    return best


def parts_digest(parts: dict[str, list[PartRecord]]) -> str:
    """One string naming every part of a run (kind, name, size, mtime): equal strings, same rows."""
    import hashlib

    h = hashlib.sha256()
    for kind in KINDS:
        for p in parts.get(kind, ()):
            h.update(f"{kind}\0{p.name}\0{p.size}\0{p.mtime_ns}\n".encode())
    return h.hexdigest()[:24]


# ---------------------------------------------------------------------------- the catalog
class RunEntry:
    """One run as the catalog has it (validated by ``run.json``'s fingerprint when handed out).

    ``light`` holds the fields listings need (name, recorded status, times, ...); ``meta`` (every
    usable field of run.json) is parsed only when asked for.
    """

    __slots__ = ("catalog", "project", "run_id", "light", "_meta", "_meta_text", "unreadable", "problems")

    def __init__(self, catalog: Catalog, project: str, run_id: str, light: dict, meta: dict | None,
                 meta_text: str | None, unreadable: bool, problems: list[str]):
        self.catalog = catalog
        self.project = project
        self.run_id = run_id
        self.light = light
        self._meta = meta
        self._meta_text = meta_text
        self.unreadable = unreadable
        self.problems = problems

    @property
    def paths(self) -> RunPaths:
        return RunPaths(self.catalog.root, self.project, self.run_id)

    @property
    def meta(self) -> dict:
        if self._meta is None:
            text = self._meta_text if self._meta_text is not None else self.catalog.heavy(self, "meta")
            self._meta = json.loads(text) if text else {}
            self._meta_text = None
        return self._meta


def _light(meta: dict) -> dict:
    tags = meta.get("tags")
    return {"name": meta.get("name"), "status": meta.get("status"), "created_at": meta.get("created_at"),
            "ended_at": meta.get("ended_at"), "updated_at": meta.get("updated_at"),
            "last_step": meta.get("last_step"), "host": meta.get("host"), "user": meta.get("user"),
            "tags": list(tags) if isinstance(tags, list) else None, "group": meta.get("group"),
            "job_type": meta.get("job_type"), "exit_code": meta.get("exit_code"),
            "heartbeat_at": meta.get("heartbeat_at"), "pid": meta.get("pid"),
            "write_errors": str(meta["write_errors"]) if meta.get("write_errors") else None}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True, separators=(",", ":"))


class Catalog:
    """The catalog of one store, for one command. Use :func:`open_catalog`; call :meth:`save`
    when done (it writes only if something was derived again)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.path = catalog_path(self.root)
        self._db: Any = None  # the file, opened read-only and immutable (sqlite3.Connection)
        self._rows: dict[tuple[str, str], dict | None] = {}  # what the file holds (listing columns), as read
        self._cursors: dict[str, tuple[str, str] | None] = {}
        self._all = False  # every row of the file read (prefetch): a run not in _rows has none
        self._all_cursors = False
        self._fresh: dict[tuple[str, str], dict] = {}  # rows derived again by this process (all columns)
        self._fresh_cursors: dict[str, tuple[str, str]] = {}
        self._dir_keys: list[tuple[str, str]] | None = None
        self._dirty = False
        self._prefix = f"{self.root}{_SEP}{PROJECT_PREFIX}"
        self._now = time.time()  # one clock reading for the racy rule of a whole listing (older is stricter)
        self._load()

    # ------------------------------------------------------------------ reading the file
    def _load(self) -> None:
        import sqlite3

        try:
            if not self.path.is_file():
                return
            db = sqlite3.connect(f"file:{self.path}?immutable=1", uri=True, check_same_thread=False)
            try:
                version = db.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchone()
                db.execute("SELECT 1 FROM runs LIMIT 1").fetchall()
                db.execute("SELECT 1 FROM cursors LIMIT 1").fetchall()
            except Exception:
                db.close()
                raise
            if version is None or version[0] != str(CATALOG_VERSION):
                db.close()
                return
            self._db = db
        except Exception:  # corrupt, truncated, foreign, unreadable: an empty catalog
            self._db = None

    def _query(self, sql: str, args: tuple = ()) -> list:
        """Rows of a query on the file; none when it fails (then the file is of no further use)."""
        if self._db is None:
            return []
        try:
            return self._db.execute(sql, args).fetchall()
        except Exception:
            self._db = None
            return []

    def prefetch(self, project: str | None = None) -> None:
        """Read the listing columns of every run (of one project) in one query."""
        if self._db is None or self._all:
            return
        cols = ", ".join(_RUN_COLUMNS)
        if project is None:
            found = self._query(f"SELECT {cols} FROM runs")
            self._all = self._db is not None
        else:
            found = self._query(f"SELECT {cols} FROM runs WHERE project = ?", (project,))
        for r in found:
            self._rows[(r[0], r[1])] = dict(zip(_RUN_COLUMNS, r))

    def prefetch_cursors(self) -> None:
        if not self._all_cursors:
            self._cursors.update({p: (fp, s) for p, fp, s in self._query("SELECT path, fp, summary FROM cursors")})
            self._all_cursors = True

    def _stored(self, key: tuple[str, str]) -> dict | None:
        if key in self._rows:
            return self._rows[key]
        if self._all or self._db is None:
            return None
        found = self._query(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE project = ? AND run_id = ?", key)
        row = dict(zip(_RUN_COLUMNS, found[0])) if found else None
        self._rows[key] = row
        return row

    def _stored_cursor(self, rel: str) -> tuple[str, str] | None:
        if rel in self._cursors or self._all_cursors:
            return self._cursors.get(rel)
        found = self._query("SELECT fp, summary FROM cursors WHERE path = ?", (rel,))
        self._cursors[rel] = found[0] if found else None
        return self._cursors[rel]

    def heavy(self, entry: RunEntry | tuple[str, str], column: str) -> str | None:
        """A large column (``meta``, ``writers``, ``parts``) of a run, as stored."""
        key = (entry.project, entry.run_id) if isinstance(entry, RunEntry) else entry
        fresh = self._fresh.get(key)
        if fresh is not None and column in fresh:
            return fresh[column]
        if self._db is None:
            return None
        try:
            found = self._db.execute(f"SELECT {column} FROM runs WHERE project = ? AND run_id = ?", key).fetchone()
        except Exception:
            return None
        return found[0] if found else None

    def _row(self, key: tuple[str, str]) -> dict | None:
        return self._fresh.get(key) or self._stored(key)

    def _update(self, key: tuple[str, str], **values: Any) -> None:
        row = self._fresh.get(key)
        if row is None:
            row = dict(self._stored(key) or {"project": key[0], "run_id": key[1]})
            for col in _HEAVY:  # carry the stored large columns into the rewritten row
                if col not in values:
                    row[col] = self.heavy(key, col)
            self._fresh[key] = row
        row.update(values)
        self._dirty = True

    # ------------------------------------------------------------------ the folders
    def run_keys(self, project: str | None = None) -> list[tuple[str, str]]:
        """Every ``(project, run_id)`` folder of the store, sorted (a directory scan: no stat)."""
        if self._dir_keys is None:
            self._dir_keys = run_folders(self.root)
        if project is None:
            return self._dir_keys
        return [k for k in self._dir_keys if k[0] == project]

    def _run_dir(self, project: str, run_id: str) -> str:
        return f"{self._prefix}{project}{_SEP}{RUN_PREFIX}{run_id}"

    def has_run_dir(self, project: str, run_id: str) -> bool:
        return os.path.isdir(RunPaths(self.root, project, run_id).dir)

    # ------------------------------------------------------------------ runs
    def entry(self, project: str, run_id: str) -> RunEntry | None:
        """The run's ``run.json`` as the catalog has it, checked against the file; None without one."""
        key = (project, run_id)
        current = fingerprint(f"{self._prefix}{project}{_SEP}{RUN_PREFIX}{run_id}{_SEP}{RUN_FILE}", self._now)
        if current == "-":
            return None
        row = self._row(key)
        if row is not None and _same(row.get("meta_fp"), current):
            problems = row["problems"]
            return RunEntry(self, project, run_id, _light_of_row(row), None, None, bool(row["unreadable"]),
                            json.loads(problems) if problems and problems != "[]" else [])
        paths = RunPaths(self.root, project, run_id)
        # derived again: the fingerprint was taken first, so a change meanwhile leaves it old
        try:
            raw = paths.run_file.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            return RunEntry(self, project, run_id, _light({}), {}, None, True,
                            [f"cannot be read: {exc.strerror or exc}"])
        doc = parse_run_json(raw)
        light = _light(doc.meta)
        try:
            text = _dumps(doc.meta)
        except (ValueError, TypeError):  # nothing the checks let through; never cache what cannot be stored
            return RunEntry(self, project, run_id, light, doc.meta, None, doc.unreadable, doc.problems)
        self._update(key, meta_fp=current, unreadable=int(doc.unreadable), problems=_dumps(doc.problems),
                     meta=text, **_light_columns(light))
        return RunEntry(self, project, run_id, light, doc.meta, None, doc.unreadable, doc.problems)

    def writers(self, project: str, run_id: str) -> list[dict]:
        """The run's writer files (``_writers/*.json``), checked against the folder."""
        from .meta import read_writer_files

        key = (project, run_id)
        current = fingerprint(f"{self._run_dir(project, run_id)}{_SEP}{WRITERS_DIR}", self._now)
        row = self._row(key)
        if row is not None and _same(row.get("writers_fp"), current):
            text = self.heavy(key, "writers")
            if text is not None:
                return json.loads(text)
        found = read_writer_files(RunPaths(self.root, project, run_id))
        try:
            text = _dumps(found)
        except (ValueError, TypeError):
            return found
        if row is not None:  # only runs with a run.json have a row
            self._update(key, writers_fp=current, writers=text)
        return found

    def parts(self, project: str, run_id: str) -> tuple[dict[str, list[PartRecord]], bool]:
        """Every part of the run per kind, checked against each kind folder; and whether the
        listing is trustworthy later (no folder changed within :data:`RACY_S`)."""
        key = (project, run_id)
        run_dir = self._run_dir(project, run_id)
        row = self._row(key)
        stored: dict = {}
        if row is not None:
            text = self.heavy(key, "parts")
            stored = json.loads(text) if text else {}
        out: dict[str, list[PartRecord]] = {}
        fps: dict[str, str | None] = {}
        changed = False
        for kind in KINDS:
            kdir = f"{run_dir}{_SEP}{_KIND_DIRS[kind]}"
            current = fingerprint(kdir, self._now)
            fps[kind] = current
            old = stored.get(kind)
            if old is not None and _same(old[0], current):
                out[kind] = [PartRecord.from_json(p) for p in old[1]]
                continue
            changed = True
            known = {(p[0], p[1], p[2]): PartRecord.from_json(p) for p in (old[1] if old else [])}
            out[kind] = _list_parts(Path(kdir), kind, known) if current != "-" else []
        stable = all(fps.values())
        if changed and row is not None:
            self._update(key, parts=_dumps({k: [fps[k], [p.to_json() for p in out[k]]] for k in KINDS}),
                         parts_fp=parts_digest(out) if stable else "")
        return out, stable

    def run_bytes(self, project: str, run_id: str, meta_fp: str | None, parts_fp: str | None) -> int:
        """Bytes of the run folder, derived again when its run.json or any kind folder changed."""
        from .files import tree_bytes

        key = (project, run_id)
        row = self._row(key)
        basis = f"{meta_fp}|{parts_fp}" if meta_fp and parts_fp else ""
        if row is not None and basis and row.get("bytes_fp") == basis and row.get("bytes") is not None:
            return int(row["bytes"])
        n = tree_bytes(RunPaths(self.root, project, run_id).dir)
        if row is not None:
            self._update(key, bytes_fp=basis, bytes=n)
        return n

    def row_value(self, project: str, run_id: str, column: str) -> Any:
        row = self._row((project, run_id))
        return None if row is None else row.get(column)

    # ------------------------------------------------------------------ cursors
    def cursor_summary(self, path: Path) -> tuple[str | None, dict | None]:
        """``(fingerprint now, the stored summary if it still holds)`` of a cursor file."""
        rel = os.path.relpath(path, self.root)
        current = fingerprint(path)
        stored = self._fresh_cursors.get(rel) or self._stored_cursor(rel)
        if stored is not None and _same(stored[0], current):
            try:
                return current, json.loads(stored[1])
            except ValueError:
                pass
        return current, None

    def put_cursor_summary(self, path: Path, fp: str | None, summary: dict) -> None:
        if fp:
            self._fresh_cursors[os.path.relpath(path, self.root)] = (fp, _dumps(summary))
            self._dirty = True

    # ------------------------------------------------------------------ writing the file
    def save(self) -> None:
        """Write what was derived again, if anything (never raises: the catalog is a cache)."""
        if not self._dirty and not self._gone():
            return
        try:
            self._write()
        except Exception:  # a read-only store, a full disk, a race on the temp name: only time is lost
            pass
        self._dirty = False
        if self._dir_keys is not None and self._all:
            for key in self._gone():
                del self._rows[key]

    def _gone(self) -> list[tuple[str, str]]:
        """Runs the file holds whose folders are gone (known only after a full prefetch and scan)."""
        if self._dir_keys is None or not self._all:
            return []
        present = set(self._dir_keys)
        return [k for k, r in self._rows.items() if r is not None and k not in present]

    def _write(self) -> None:
        import shutil
        import sqlite3

        folder = self.path.parent
        folder.mkdir(exist_ok=True)
        _remove_stale_temps(folder)
        tmp = folder / f".{CATALOG_FILE}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        try:
            fresh_file = self._db is None
            if not fresh_file:
                shutil.copyfile(self.path, tmp)
            db = sqlite3.connect(f"file:{tmp}?vfs=unix-none", uri=True)  # a private file: no locks
            try:
                db.execute("PRAGMA journal_mode = OFF")
                db.execute("PRAGMA synchronous = OFF")
                if not fresh_file:
                    ok = db.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchone()
                    fresh_file = ok is None or ok[0] != str(CATALOG_VERSION)
                if fresh_file:
                    for table in ("catalog_info", "runs", "cursors"):
                        db.execute(f"DROP TABLE IF EXISTS {table}")
                    for stmt in _SCHEMA:
                        db.execute(stmt)
                    db.execute("INSERT INTO catalog_info VALUES ('version', ?)", (str(CATALOG_VERSION),))
                    db.execute("INSERT INTO catalog_info VALUES ('root', ?)", (str(self.root),))
                cols = (*_RUN_COLUMNS, *_HEAVY)
                marks = ", ".join("?" for _ in cols)
                if fresh_file:
                    # a new file keeps what this process knows that is still valid, from the old rows
                    keep = {k: r for k, r in self._rows.items() if r is not None and k not in self._fresh}
                    for key, r in keep.items():
                        heavy = {c: self.heavy(key, c) for c in _HEAVY}
                        db.execute(f"INSERT OR REPLACE INTO runs ({', '.join(cols)}) VALUES ({marks})",
                                   [r.get(c) for c in _RUN_COLUMNS] + [heavy[c] for c in _HEAVY])
                db.executemany(f"INSERT OR REPLACE INTO runs ({', '.join(cols)}) VALUES ({marks})",
                               [[row.get(c) for c in cols] for row in self._fresh.values()])
                db.executemany("DELETE FROM runs WHERE project = ? AND run_id = ?", self._gone())
                db.executemany("INSERT OR REPLACE INTO cursors VALUES (?, ?, ?)",
                               [(p, fp, s) for p, (fp, s) in self._fresh_cursors.items()])
                db.commit()
            finally:
                db.close()
            os.replace(tmp, self.path)
        finally:
            try:
                tmp.unlink()
            except OSError:
                pass

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _light_columns(light: dict) -> dict:
    out = {k: v for k, v in light.items() if k not in ("tags", "group")}
    out["grp"] = light.get("group")
    out["tags"] = _dumps(light["tags"]) if light.get("tags") is not None else None
    return out


def _light_of_row(row: dict) -> dict:
    return {"name": row["name"], "status": row["status"], "created_at": row["created_at"],
            "ended_at": row["ended_at"], "updated_at": row["updated_at"], "last_step": row["last_step"],
            "host": row["host"], "user": row["user"],
            "tags": json.loads(row["tags"]) if row["tags"] is not None else None, "group": row["grp"],
            "job_type": row["job_type"], "exit_code": row["exit_code"], "heartbeat_at": row["heartbeat_at"],
            "pid": row["pid"], "write_errors": row["write_errors"]}


def _list_parts(kdir: Path, kind: str, known: dict[tuple, PartRecord]) -> list[PartRecord]:
    """Every complete part of a kind folder, from one consistent listing (the relist policy):
    known parts (same name, size and mtime) are reused, others are read."""
    def one(path: Path) -> PartRecord:
        st = os.stat(path)  # FileNotFoundError: swapped meanwhile, relist lists again
        rec = known.get((path.name, st.st_size, st.st_mtime_ns))
        return rec if rec is not None else read_part_record(path, kind, st)

    found, vanished = relist(kdir, one)
    # parts still vanishing at the last attempt are not listed: the stored folder fingerprint,
    # taken before, no longer matches, so the next look lists the folder again
    return [r for r in found if isinstance(r, PartRecord)]


def run_folders(root: str | os.PathLike) -> list[tuple[str, str]]:
    """``(project, run_id)`` of every run folder of the store, sorted: two levels of ``scandir``,
    no ``stat`` and no catalog (folders only say which runs exist)."""
    return sorted(_scan_runs(Path(root)))


def _scan_runs(root: Path) -> Iterator[tuple[str, str]]:
    """``(project, run_id)`` of every run folder (names from two levels of ``scandir``)."""
    try:
        top = os.scandir(root)
    except OSError:
        return
    with top:
        projects = [e for e in top if e.name.startswith(PROJECT_PREFIX) and e.is_dir()]
    for pe in projects:
        project = pe.name[len(PROJECT_PREFIX):]
        try:
            inner = os.scandir(pe.path)
        except OSError:
            continue
        with inner:
            for e in inner:
                if e.name.startswith(RUN_PREFIX) and e.is_dir():
                    yield project, e.name[len(RUN_PREFIX):]


def _remove_stale_temps(folder: Path) -> None:
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


def open_catalog(root: str | os.PathLike) -> Catalog:
    """The catalog of the store at ``root`` (an empty one when the file is missing or unusable)."""
    return Catalog(Path(root))


def is_catalog_path(name: str) -> bool:
    """Whether a root entry is the catalog's folder (never data; doctor and bundles skip it)."""
    return name == CATALOG_DIR


__all__ = ["CATALOG_DIR", "CATALOG_FILE", "CATALOG_VERSION", "RACY_S", "Catalog", "PartRecord", "RunEntry",
           "catalog_path", "fingerprint", "open_catalog", "parts_digest", "read_part_record", "RUN_FILE"]
