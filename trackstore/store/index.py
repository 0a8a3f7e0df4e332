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
Two folder fingerprints stand for what is in them (an entry appears, disappears or is replaced
only by changing its folder's modification time): the run folder for the kind folders that
did not exist, a cursor's folder for the cursor file. What is checked for every run (these
fingerprints, rows per kind, damaged parts, the writers' losses, each cursor's counts) is
kept in plain columns, so a run that did not change costs ``stat`` calls and no JSON.

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

import functools
import json
import os
import secrets
import time
import warnings
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
    outside_store,
    relist,
)
from .meta import RunJsonWarning, parse_run_json
from .ranges import RangeSet

CATALOG_DIR = "_catalog"
CATALOG_FILE = "catalog.sqlite"
CATALOG_VERSION = 3  # 3: cursors gained `staged`
_SEP = os.sep
# each kind's folder inside a run folder (trackstore.store.layout.RunPaths.kind_dir), as text
_KIND_DIRS = {k: (f"{ARTIFACTS_DIR}{os.sep}{MANIFEST_DIR}" if k == "artifacts" else k) for k in KINDS}
RACY_S = 3.0  # a fingerprint younger than this (file-system time vs the clock) is not trusted later
STALE_TEMP_S = 600.0  # a refresher's temp file older than this was left by a process that died

_RUN_COLUMNS = ("project", "run_id", "meta_fp", "unreadable", "problems", "name", "status", "created_at",
                "ended_at", "updated_at", "last_step", "host", "user", "tags", "grp", "job_type", "exit_code",
                "heartbeat_at", "pid", "write_errors", "writers_fp", "writers_lost", "dir_fp", "kind_fps",
                "kind_rows", "damaged", "parts_fp", "bytes_fp", "bytes")
_HEAVY = ("meta", "writers", "parts")
_CURSOR_COLUMNS = ("path", "fp", "dir_fp", "parts_fp", "target", "destination", "project", "run_id", "synced_status",
                   "in_doubt", "remote", "unsettled", "last_sync_at", "last_error", "pending", "acked", "skipped",
                   "remote_id", "staged")
# added within version 2 (a file without them is extended when next written, not rebuilt)
_OVERVIEWS_TABLE = ("CREATE TABLE IF NOT EXISTS run_overviews (project TEXT NOT NULL, run_id TEXT NOT NULL, "
                    "basis TEXT, overview TEXT, PRIMARY KEY (project, run_id)) WITHOUT ROWID")
_PART_FOLDERS_TABLE = "CREATE TABLE IF NOT EXISTS part_folders (folder TEXT PRIMARY KEY, fp TEXT, names TEXT) WITHOUT ROWID"
_SCHEMA = (
    "CREATE TABLE catalog_info (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE runs (project TEXT NOT NULL, run_id TEXT NOT NULL, meta_fp TEXT, unreadable INTEGER, "
    "problems TEXT, name TEXT, status TEXT, created_at TEXT, ended_at TEXT, updated_at TEXT, last_step INTEGER, "
    "host TEXT, user TEXT, tags TEXT, grp TEXT, job_type TEXT, exit_code INTEGER, heartbeat_at TEXT, pid INTEGER, "
    "write_errors TEXT, writers_fp TEXT, writers_lost TEXT, dir_fp TEXT, kind_fps TEXT, kind_rows TEXT, "
    "damaged INTEGER, parts_fp TEXT, bytes_fp TEXT, bytes INTEGER, PRIMARY KEY (project, run_id)) WITHOUT ROWID",
    "CREATE TABLE run_details (project TEXT NOT NULL, run_id TEXT NOT NULL, meta TEXT, writers TEXT, parts TEXT, "
    "PRIMARY KEY (project, run_id))",
    "CREATE TABLE cursors (path TEXT PRIMARY KEY, fp TEXT, dir_fp TEXT, parts_fp TEXT, target TEXT, "
    "destination TEXT, project TEXT, run_id TEXT, synced_status TEXT, in_doubt INTEGER, remote INTEGER, "
    "unsettled INTEGER, last_sync_at TEXT, last_error TEXT, pending TEXT, acked TEXT, skipped TEXT, remote_id TEXT, "
    "staged INTEGER) WITHOUT ROWID",
    "CREATE TABLE part_checks (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, problem TEXT, schema TEXT) "
    "WITHOUT ROWID",
    "CREATE TABLE part_schemas (digest TEXT PRIMARY KEY, columns TEXT) WITHOUT ROWID",
    _OVERVIEWS_TABLE,
    _PART_FOLDERS_TABLE,
)


def catalog_path(root: Path) -> Path:
    return Path(root) / CATALOG_DIR / CATALOG_FILE


# ---------------------------------------------------------------------------- fingerprints
def fingerprint(path: str | os.PathLike, now: float | None = None) -> str | None:
    """``stat`` fingerprint of a file or folder: ``"-"`` when it does not exist, ``""`` when it
    changed too recently to be trusted later (:data:`RACY_S`), None when it cannot be stat-ed."""
    return _fp(path, (time.time() if now is None else now) - RACY_S)


def _fp(path: str | os.PathLike, limit: float) -> str | None:
    """:func:`fingerprint` with its racy limit (``now - RACY_S``) computed by the caller once."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "-"
    except OSError:
        return None
    if st.st_mtime > limit or st.st_ctime > limit:
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

    from .parts import read_columns

    if not path.exists():
        raise FileNotFoundError(path)
    last_ts: float | None = None
    last_step = None
    try:
        md = pq.read_metadata(path)
        ts = column_max_time(md, "ts")
        last_ts = ts if ts is not None else st.st_mtime
        if kind == "metrics":
            last_step = column_max(md, "step")
    except FileNotFoundError:
        raise
    except (OSError, ValueError):
        pass
    rows = ids = None
    try:
        t = read_columns(path, ["writer", "seq"])
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
    return _stats_max(md, idx, raw=False)


def _stats_max(md, idx: int, *, raw: bool):
    """The largest ``max`` statistic of column ``idx`` over the row groups (``raw``: as stored,
    ``max_raw``); None without statistics."""
    best = None
    for rg in range(md.num_row_groups):
        st = md.row_group(rg).column(idx).statistics
        if st is not None and st.has_min_max:
            value = st.max_raw if raw else st.max
            best = value if best is None else max(best, value)
    return best


_TIME_UNITS = {"milliseconds": 1e3, "microseconds": 1e6, "nanoseconds": 1e9}


def column_max_time(md, column: str) -> float | None:
    """The newest value of a timestamp ``column`` over a file's row groups, as a Unix time, from
    the raw statistics (None if absent, or not a UTC timestamp). ``statistics.max`` would make
    a datetime, for which pyarrow imports pandas (0.2-0.3 s)."""
    try:
        idx = md.schema.names.index(column)
        logical = json.loads(md.schema.column(idx).logical_type.to_json())
    except (ValueError, TypeError):
        return None
    per_s = _TIME_UNITS.get(logical.get("timeUnit"))
    if logical.get("Type") != "Timestamp" or not logical.get("isAdjustedToUTC") or per_s is None:
        return None
    best = _stats_max(md, idx, raw=True)
    return None if best is None else best / per_s


def parts_digest(parts: dict[str, list[PartRecord]]) -> str:
    """One string naming every part of a run (kind, name, size, mtime): equal strings, same rows."""
    import hashlib

    h = hashlib.sha256()
    for kind in KINDS:
        for p in parts.get(kind, ()):
            h.update(f"{kind}\0{p.name}\0{p.size}\0{p.mtime_ns}\n".encode())
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class PartsSummary:
    """A run's parts in short (:meth:`Catalog.parts_summary`): ``fp`` their digest
    (:func:`parts_digest`; None when a folder changed within :data:`RACY_S`), ``rows`` the
    readable rows per kind, ``damaged`` how many parts cannot be read; ``records`` the part
    records when they had to be listed (else None: :meth:`Catalog.parts` gives them)."""

    fp: str | None
    rows: dict[str, int]
    damaged: int
    records: dict[str, list[PartRecord]] | None


@dataclass(frozen=True)
class QuietRun:
    """A run that did not change since the catalog's row of it was made, and has ended
    (:meth:`Catalog.quiet_run`): what ``status`` shows of it, from that row alone."""

    status: str  # as recorded: final, so also the effective status
    created_at: str | None
    parts: PartsSummary
    bytes: int
    write_errors: str | None  # what run.json recorded
    writers_lost: list[dict]  # the writer files that recorded write_errors


_FINAL = ("finished", "failed", "crashed")


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

    def meta_json(self) -> str:
        """:attr:`meta` as JSON text (what the catalog keeps, not parsed when not parsed yet)."""
        if self._meta is None:
            text = self._meta_text if self._meta_text is not None else self.catalog.heavy(self, "meta")
            if text is not None:
                return text
        return _dumps(self.meta)


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
        # what the file holds (listing columns), as read: a tuple in the order of _RUN_COLUMNS
        # until a caller asks for the row (then a dict; see _stored)
        self._rows: dict[tuple[str, str], dict | tuple | None] = {}
        self._cursors: dict[str, tuple | None] = {}  # cursor rows of the file (without the path), as read
        self._all = False  # every row of the file read (prefetch): a run not in _rows has none
        self._all_cursors = False
        self._metas: dict[tuple[str, str], str | None] | None = None  # run_details.meta of every run (prefetch_meta)
        self._fresh: dict[tuple[str, str], dict] = {}  # rows derived again by this process (all columns)
        self._fresh_cursors: dict[str, tuple] = {}
        self._folder_fps: dict[str, str | None] = {}  # cursor folders stat-ed by this process
        self._writers_now: dict[tuple[str, str], str | None] = {}  # _writers folders stat-ed by this process
        self._meta_now: dict[tuple[str, str], str] = {}  # run.json fingerprints listed() found as stored
        self._quiet: dict[tuple[str, str], tuple | None] = {}  # quiet(): the answer per run, once per command
        self._overviews: dict[tuple[str, str], tuple[str, str]] = {}  # fresh run overviews to write (put_overview)
        self._part_checks: dict[str, tuple] | None = None  # fresh part checks to write (see put_part_checks)
        self._part_checks_all = False
        self._part_folders: dict[str, tuple[str, list[str]]] | None = None  # fresh folder listings (put_part_checks)
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
                db.execute("SELECT 1 FROM run_details LIMIT 1").fetchall()
                db.execute("SELECT 1 FROM part_checks LIMIT 1").fetchall()
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
        rows = self._rows
        for r in found:
            rows[(r[0], r[1])] = r

    def prefetch_meta(self) -> None:
        """Read every run's kept ``run.json`` fields (JSON text) in one query, for :meth:`heavy`."""
        if self._metas is None:
            self._metas = dict.fromkeys(self._rows) if self._all else {}
            self._metas.update({(p, r): m for p, r, m in self._query("SELECT project, run_id, meta FROM run_details")})

    def prefetch_cursors(self) -> None:
        if not self._all_cursors:
            self._cursors.update({r[0]: r[1:] for r in self._query(f"SELECT {', '.join(_CURSOR_COLUMNS)} FROM cursors")})
            self._all_cursors = True

    def _stored(self, key: tuple[str, str]) -> dict | None:
        if key in self._rows:
            row = self._rows[key]
            if isinstance(row, tuple):
                row = self._rows[key] = dict(zip(_RUN_COLUMNS, row))
            return row
        if self._all or self._db is None:
            return None
        found = self._query(f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs WHERE project = ? AND run_id = ?", key)
        row = dict(zip(_RUN_COLUMNS, found[0])) if found else None
        self._rows[key] = row
        return row

    def _stored_cursor(self, rel: str) -> tuple | None:
        if rel in self._cursors or self._all_cursors:
            return self._cursors.get(rel)
        found = self._query(f"SELECT {', '.join(_CURSOR_COLUMNS[1:])} FROM cursors WHERE path = ?", (rel,))
        self._cursors[rel] = found[0] if found else None
        return self._cursors[rel]

    def heavy(self, entry: RunEntry | tuple[str, str], column: str) -> str | None:
        """A large column (``meta``, ``writers``, ``parts``) of a run, as stored."""
        key = (entry.project, entry.run_id) if isinstance(entry, RunEntry) else entry
        fresh = self._fresh.get(key)
        if fresh is not None and column in fresh:
            return fresh[column]
        if column == "meta" and self._metas is not None and key in self._metas:
            return self._metas[key]
        if self._db is None:
            return None
        try:
            found = self._db.execute(f"SELECT {column} FROM run_details WHERE project = ? AND run_id = ?",
                                     key).fetchone()
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
        """Whether the run's folder exists in the store (not through a link leading outside it)."""
        run_dir = RunPaths(self.root, project, run_id).dir
        if not os.path.isdir(run_dir):
            return False
        if not (os.path.islink(run_dir) or os.path.islink(run_dir.parent)):
            return True
        return outside_store(run_dir, os.path.realpath(self.root)) is None

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

    def listed(self, project: str | None = None) -> list[tuple[tuple[str, str], tuple | None]]:
        """Every run folder (of ``project``), sorted, with the row the file holds for it when that
        row answers a listing as it is: ``run.json`` keeps the fingerprint stored with the row,
        the file was read whole (nothing unreadable), and the recorded status is ``finished`` or
        ``failed`` (a running run's status depends on its writers, a crashed run's last step
        and end on its parts). The row is a tuple in the order of :data:`LISTED_COLUMNS`; None:
        ask :meth:`entry`. What :meth:`entry` checks, in one loop of one ``stat`` per run (the
        listing of a store of thousands of runs that did not change)."""
        self.prefetch(project)
        rows, fresh = self._rows, self._fresh
        limit = self._now - RACY_S
        prefix = self._prefix
        out: list[tuple[tuple[str, str], tuple | None]] = []
        for key in self.run_keys(project):
            row = rows.get(key)
            if type(row) is not tuple or key in fresh or row[_I_STATUS] not in _LISTED_FINAL or row[_I_UNREADABLE] \
                    or row[_I_PROBLEMS] not in (None, "", "[]") or not row[_I_META_FP] or row[_I_META_FP] == "-":
                out.append((key, None))
                continue
            if _fp(f"{prefix}{key[0]}{_SEP}{RUN_PREFIX}{key[1]}{_SEP}{RUN_FILE}", limit) != row[_I_META_FP]:
                out.append((key, None))  # changed, gone, racy ("") or not stat-able (None)
                continue
            self._meta_now[key] = row[_I_META_FP]
            out.append((key, row))
        return out

    def listed_entry(self, key: tuple[str, str], row: tuple) -> RunEntry:
        """The :class:`RunEntry` of a row :meth:`listed` handed out (what :meth:`entry` gives)."""
        return RunEntry(self, key[0], key[1], _light_of_tuple(row), None, None, False, [])

    def writers(self, project: str, run_id: str) -> list[dict]:
        """The run's writer files (``_writers/*.json``), checked against the folder."""
        from .meta import read_writer_files

        key = (project, run_id)
        current = self._writers_now[key] = fingerprint(f"{self._run_dir(project, run_id)}{_SEP}{WRITERS_DIR}", self._now)
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
            self._update(key, writers_fp=current, writers=text, writers_lost=_writers_lost(found))
        return found

    def _writers_fp(self, key: tuple[str, str]) -> str | None:
        """The ``_writers`` folder's fingerprint, taken once per catalog (one command)."""
        if key not in self._writers_now:
            self._writers_now[key] = fingerprint(f"{self._run_dir(*key)}{_SEP}{WRITERS_DIR}", self._now)
        return self._writers_now[key]

    def writer_losses(self, project: str, run_id: str) -> list[dict]:
        """Of the run's writer files, those that recorded ``write_errors`` (``writer_id`` and
        ``write_errors`` only): one ``stat`` of the ``_writers`` folder while it is unchanged,
        no JSON read when none did."""
        key = (project, run_id)
        quiet = self._quiet.get(key)
        if quiet is not None:  # its _writers folder was checked by quiet() in this command
            text = quiet[_I_WRITERS_LOST]
            return json.loads(text) if text else []
        row = self._row(key)
        current = self._writers_fp(key)
        if row is not None and "writers_lost" in row and _same(row.get("writers_fp"), current):
            text = row["writers_lost"]
            return json.loads(text) if text else []
        return [w for w in self.writers(project, run_id) if w.get("write_errors")]

    def parts(self, project: str, run_id: str) -> tuple[dict[str, list[PartRecord]], bool]:
        """Every part of the run per kind, checked against each kind folder; and whether the
        listing is trustworthy later (no folder changed within :data:`RACY_S`)."""
        key = (project, run_id)
        run_dir = self._run_dir(project, run_id)
        dir_fp = fingerprint(run_dir, self._now)  # before the kind folders: see _kinds_unchanged
        has_artifacts = os.path.isdir(f"{run_dir}{_SEP}{ARTIFACTS_DIR}")
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
        if row is not None:
            kind_fps = "|".join([*(fps[k] or "" for k in KINDS), "+" if has_artifacts else "-"]) if stable else ""
            quick = {"dir_fp": dir_fp or "", "kind_fps": kind_fps,
                     "kind_rows": "|".join(str(sum(p.rows or 0 for p in out[k] if not p.damaged)) for k in KINDS),
                     "damaged": sum(p.damaged for k in KINDS for p in out[k])}
            if changed:
                self._update(key, parts=_dumps({k: [fps[k], [p.to_json() for p in out[k]]] for k in KINDS}),
                             parts_fp=parts_digest(out) if stable else "", **quick)
            elif any(row.get(c) != v for c, v in quick.items()):
                self._update(key, **quick)
        return out, stable

    def _kinds_unchanged(self, row: dict, run_dir: str) -> bool:
        """Whether every kind folder still has the fingerprint stored with the run's part list,
        from ``stat`` calls only. A kind folder that did not exist still does not while the run
        folder keeps its fingerprint (a folder made in it would change it), so only the kind
        folders that existed are ``stat``-ed; the run folder's fingerprint was taken before
        theirs (:meth:`parts`)."""
        stored = row.get("kind_fps")
        if not stored or not row.get("parts_fp"):
            return False
        fps = stored.split("|")
        dir_fp = fingerprint(run_dir, self._now)
        dir_same = _same(row.get("dir_fp"), dir_fp)
        has_artifacts = None if dir_same else os.path.isdir(f"{run_dir}{_SEP}{ARTIFACTS_DIR}")
        for i, kind in enumerate(KINDS):
            old = fps[i]
            if old == "-" and dir_same and (kind != "artifacts" or fps[-1] == "-"):
                continue
            if not _same(old, fingerprint(f"{run_dir}{_SEP}{_KIND_DIRS[kind]}", self._now)):
                return False
        if not dir_same and dir_fp:  # every kind folder checked after the run folder's fingerprint: keep it
            self._update((row["project"], row["run_id"]), dir_fp=dir_fp,
                         kind_fps="|".join([*fps[:-1], "+" if has_artifacts else "-"]))
        return True

    def quiet(self, project: str, run_id: str) -> tuple | None:
        """The run's row as the file holds it (a tuple in :data:`LISTED_COLUMNS` order) when
        nothing of the run changed since the row was made: its ``run.json``, its folder, its
        kind folders and its ``_writers`` folder keep the fingerprints stored with the row, the
        row holds no problem of run.json, its recorded status is final, and its parts digest and
        bytes were derived from exactly these. Else None (ask :meth:`entry`,
        :meth:`parts_summary` and the others). One loop of ``stat`` calls and string
        comparisons, no object per field: what ``status``, ``sync_state`` and the no-change
        check of a sync cost for a run that did not change, nearly all of a store. A kind folder
        that did not exist still does not while the run folder keeps its fingerprint (see
        :meth:`_kinds_unchanged`)."""
        key = (project, run_id)
        if key in self._quiet:
            return self._quiet[key]
        self._quiet[key] = None
        row = self._rows.get(key)
        if type(row) is not tuple or key in self._fresh or row[_I_STATUS] not in _FINAL or row[_I_UNREADABLE] \
                or row[_I_PROBLEMS] not in (None, "", "[]") or not row[_I_KIND_FPS] or not row[_I_PARTS_FP] \
                or row[_I_BYTES] is None or not row[_I_DIR_FP] or not row[_I_META_FP] or not row[_I_WRITERS_FP]:
            return None  # (a stored fingerprint "" was racy when taken: never trusted, see _same)
        limit = self._now - RACY_S
        run_dir = f"{self._prefix}{project}{_SEP}{RUN_PREFIX}{run_id}"
        meta_fp = self._meta_now.get(key) or _fp(f"{run_dir}{_SEP}{RUN_FILE}", limit)
        if meta_fp != row[_I_META_FP] or _fp(run_dir, limit) != row[_I_DIR_FP]:
            return None
        fps = row[_I_KIND_FPS].split("|")
        for i, kind in enumerate(KINDS):
            old = fps[i]
            if old == "-" and (kind != "artifacts" or fps[-1] == "-"):
                continue  # did not exist, and its parent folder did not change
            if not old or _fp(f"{run_dir}{_SEP}{_KIND_DIRS[kind]}", limit) != old:
                return None
        writers_fp = self._writers_now.get(key) or _fp(f"{run_dir}{_SEP}{WRITERS_DIR}", limit)
        self._writers_now[key] = writers_fp
        if writers_fp != row[_I_WRITERS_FP] or row[_I_BYTES_FP] != f"{meta_fp}|{writers_fp}|{row[_I_PARTS_FP]}":
            return None
        self._quiet[key] = row
        return row

    def quiet_run(self, project: str, run_id: str) -> QuietRun | None:
        """:meth:`quiet` as what ``status`` shows of the run."""
        row = self.quiet(project, run_id)
        if row is None:
            return None
        lost = row[_I_WRITERS_LOST]
        return QuietRun(row[_I_STATUS], row[_I_CREATED_AT], self._quiet_parts(row), int(row[_I_BYTES]),
                        row[_I_WRITE_ERRORS], json.loads(lost) if lost else [])

    @staticmethod
    def _quiet_parts(row: tuple) -> PartsSummary:
        return PartsSummary(row[_I_PARTS_FP], dict(zip(KINDS, _counts(row[_I_KIND_ROWS]))), int(row[_I_DAMAGED]), None)

    def parts_summary(self, project: str, run_id: str) -> PartsSummary:
        """What ``status`` and the no-change check need of a run's parts (their digest, readable
        rows per kind, damaged parts), from ``stat`` calls only while no kind folder changed;
        else from :meth:`parts`."""
        key = (project, run_id)
        quiet = self._quiet.get(key)  # checked already in this command (quiet() takes two more stat calls)
        if quiet is not None:
            return self._quiet_parts(quiet)
        row = self._row(key)
        if row is not None and self._kinds_unchanged(row, self._run_dir(project, run_id)):
            return PartsSummary(row["parts_fp"], dict(zip(KINDS, _counts(row["kind_rows"]))),
                                int(row["damaged"]), None)
        found, stable = self.parts(project, run_id)
        return PartsSummary(parts_digest(found) if stable else None,
                            {k: sum(p.rows or 0 for p in found[k] if not p.damaged) for k in KINDS},
                            sum(p.damaged for k in KINDS for p in found[k]), found)

    def run_bytes(self, project: str, run_id: str, meta_fp: str | None, parts_fp: str | None) -> int:
        """Bytes of the run folder, derived again when its run.json, its writer files or any kind
        folder changed."""
        from .files import tree_bytes

        key = (project, run_id)
        row = self._row(key)
        writers_fp = self._writers_fp(key)
        basis = f"{meta_fp}|{writers_fp}|{parts_fp}" if meta_fp and parts_fp and writers_fp else ""
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
    def _rel(self, path: Path | str) -> str:
        text = str(path)
        head = f"{self.root}{_SEP}"
        return text[len(head):] if text.startswith(head) else os.path.relpath(text, self.root)

    def _folder_fp(self, folder: str) -> str | None:
        if folder not in self._folder_fps:
            self._folder_fps[folder] = fingerprint(folder, self._now)
        return self._folder_fps[folder]

    def cursor_summary(self, path: Path | str) -> tuple[str | None, dict | None]:
        """``(fingerprint now, the stored summary if it still holds)`` of a cursor file.

        Cursor files are replaced whole by a rename into their folder, so while the folder keeps
        the fingerprint it had when the file's was taken, the file keeps its own: one ``stat``
        per folder, not per file (the file is ``stat``-ed only when its folder changed)."""
        rel = self._rel(path)
        stored = self._fresh_cursors.get(rel) or self._stored_cursor(rel)
        folder_fp = self._folder_fp(os.path.dirname(str(path)))  # before the file's: see put_cursor_summary
        if stored is not None and _same(stored[1], folder_fp) and stored[0] and stored[0] != "-":
            return stored[0], _summary_of(stored)
        current = fingerprint(path, self._now)
        if stored is not None and _same(stored[0], current):
            return current, _summary_of(stored)
        return current, None

    def put_cursor_summary(self, path: Path | str, fp: str | None, summary: dict) -> None:
        """Remember ``summary`` (with its ``parts_fp``) for the cursor file whose fingerprint,
        taken by :meth:`cursor_summary` before the file was read, is ``fp``."""
        if fp and fp != "-":
            folder = os.path.dirname(str(path))
            try:
                values = _cursor_values(summary)
            except (ValueError, TypeError, KeyError):  # a value the columns cannot hold: not cached
                return
            self._fresh_cursors[self._rel(path)] = (fp, self._folder_fp(folder) or "", *values)
            self._dirty = True

    # ------------------------------------------------------------------ run overviews (show)
    def overview(self, project: str, run_id: str) -> tuple[str | None, Any]:
        """``(basis, overview)``: the digest of the run's parts now (None when a kind folder changed
        within :data:`RACY_S` or a part is damaged: nothing may be kept), and the overview kept for
        exactly those parts (None if none was). An overview is whatever a reader derived from
        the run's part files alone (:func:`trackstore.read.overview.run_overview`); parts are
        immutable and their digest names every one (name, size, mtime), so it holds while the
        digest does. From ``stat`` calls only while no kind folder changed."""
        summary = self.parts_summary(project, run_id)
        if not summary.fp or summary.damaged:
            return None, None
        key = (project, run_id)
        kept = self._overviews.get(key)
        if kept is None and self._db is not None:
            try:  # a version-2 file written before the table existed has none: nothing kept
                kept = self._db.execute("SELECT basis, overview FROM run_overviews WHERE project = ? AND run_id = ?",
                                        key).fetchone()
            except Exception:
                kept = None
        if kept is None or kept[0] != summary.fp:
            return summary.fp, None
        try:
            return summary.fp, json.loads(kept[1])
        except ValueError:
            return summary.fp, None

    def put_overview(self, project: str, run_id: str, basis: str | None, overview: Any) -> None:
        """Keep ``overview`` for the run's parts whose digest :meth:`overview` gave as ``basis``
        (taken before the files were read; None: not kept)."""
        if basis:
            self._overviews[(project, run_id)] = (basis, _dumps(overview))
            self._dirty = True

    # ------------------------------------------------------------------ part checks (views)
    def part_checks(self) -> dict[str, tuple[int, int, str | None, tuple | None]]:
        """What the views' check of each part file found (:func:`trackstore.read.views.scan_parts`):
        path relative to the root -> ``(size, mtime_ns, problem, columns)``. Valid while the
        file has that size and modification time (parts are immutable), as the per-process
        caches of :mod:`trackstore.store.parts` are."""
        schemas = {d: tuple(tuple(c) for c in json.loads(cols))
                   for d, cols in self._query("SELECT digest, columns FROM part_schemas")}
        return {path: (size, mtime, problem, schemas.get(digest) if digest else None)
                for path, size, mtime, problem, digest in
                self._query("SELECT path, size, mtime_ns, problem, schema FROM part_checks")}

    def part_folders(self) -> dict[str, tuple[str, list[str]]]:
        """The part names of each kind folder the views' check listed: folder path relative to
        the root -> ``(fingerprint, names)``. Valid while the folder has that fingerprint:
        parts arrive and leave by renames, which change it, so the names and (parts being
        immutable) their :meth:`part_checks` still hold without a ``stat`` of each part."""
        if self._db is None:
            return {}
        try:  # a version-2 file written before the table existed has none
            found = self._db.execute("SELECT folder, fp, names FROM part_folders").fetchall()
        except Exception:
            return {}
        return {folder: (fp, json.loads(names)) for folder, fp, names in found}

    def put_part_checks(self, checks: dict[str, tuple], *, complete: bool,
                        folders: dict[str, tuple[str, list[str]]] | None = None) -> None:
        """Remember part checks (as :meth:`part_checks` gives them) and the listings of the
        folders they are in (as :meth:`part_folders` gives them); ``complete``: these are every
        part and folder of the store (the others are forgotten)."""
        self._part_checks = dict(checks)
        self._part_folders = dict(folders or {})
        self._part_checks_all = complete
        self._dirty = True

    def _write_part_checks(self, db: Any) -> None:
        if self._part_checks is None:
            return
        db.execute(_PART_FOLDERS_TABLE)
        if self._part_checks_all:
            db.execute("DELETE FROM part_checks")
            db.execute("DELETE FROM part_schemas")
            db.execute("DELETE FROM part_folders")
        db.executemany("INSERT OR REPLACE INTO part_folders VALUES (?, ?, ?)",
                       [(folder, fp, _dumps(names)) for folder, (fp, names) in (self._part_folders or {}).items()])
        rows, schemas = [], {}
        for path, (size, mtime, problem, columns) in self._part_checks.items():
            digest = None
            if columns is not None:
                text = _dumps([list(c) for c in columns])
                digest = _digest(text)
                schemas[digest] = text
            rows.append((path, size, mtime, problem, digest))
        db.executemany("INSERT OR REPLACE INTO part_schemas VALUES (?, ?)", list(schemas.items()))
        db.executemany("INSERT OR REPLACE INTO part_checks VALUES (?, ?, ?, ?, ?)", rows)

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
                    for table in ("catalog_info", "runs", "run_details", "cursors", "part_checks", "part_schemas",
                                  "run_overviews", "part_folders"):
                        db.execute(f"DROP TABLE IF EXISTS {table}")
                    for stmt in _SCHEMA:
                        db.execute(stmt)
                    db.execute("INSERT INTO catalog_info VALUES ('version', ?)", (str(CATALOG_VERSION),))
                    db.execute("INSERT INTO catalog_info VALUES ('root', ?)", (str(self.root),))
                put_run = (f"INSERT OR REPLACE INTO runs ({', '.join(_RUN_COLUMNS)}) "
                           f"VALUES ({', '.join('?' for _ in _RUN_COLUMNS)})")
                details = ("project", "run_id", *_HEAVY)
                put_details = (f"INSERT OR REPLACE INTO run_details ({', '.join(details)}) "
                               f"VALUES ({', '.join('?' for _ in details)})")
                if fresh_file:
                    # a new file keeps what this process knows that is still valid, from the old rows
                    keep = {k: self._stored(k) for k, r in list(self._rows.items())
                            if r is not None and k not in self._fresh}
                    for key, r in keep.items():
                        db.execute(put_run, [r.get(c) for c in _RUN_COLUMNS])  # type: ignore[union-attr]
                        db.execute(put_details, [*key, *(self.heavy(key, c) for c in _HEAVY)])
                db.executemany(put_run, [[row.get(c) for c in _RUN_COLUMNS] for row in self._fresh.values()])
                db.executemany(put_details, [[row.get(c) for c in details] for row in self._fresh.values()])
                gone = self._gone()
                db.executemany("DELETE FROM runs WHERE project = ? AND run_id = ?", gone)
                db.executemany("DELETE FROM run_details WHERE project = ? AND run_id = ?", gone)
                self._write_part_checks(db)
                db.execute(_OVERVIEWS_TABLE)
                db.executemany("INSERT OR REPLACE INTO run_overviews VALUES (?, ?, ?, ?)",
                               [(*key, basis, text) for key, (basis, text) in self._overviews.items()])
                db.executemany("DELETE FROM run_overviews WHERE project = ? AND run_id = ?", gone)
                db.executemany(f"INSERT OR REPLACE INTO cursors ({', '.join(_CURSOR_COLUMNS)}) "
                               f"VALUES ({', '.join('?' for _ in _CURSOR_COLUMNS)})",
                               [(p, *values) for p, values in self._fresh_cursors.items()])
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


def _summary_of(stored: tuple) -> dict:
    """A cursor summary (:func:`trackstore.store.ledger.summarize_cursor`) from its row (no JSON)."""
    (_fp, _dir_fp, parts_fp, target, destination, project, run_id, synced_status, in_doubt, remote, unsettled,
     last_sync_at, last_error, pending, acked, skipped, remote_id, staged) = stored
    return {"target": target, "destination": destination, "project": project, "run_id": run_id,
            "synced_status": synced_status, "in_doubt": bool(in_doubt), "remote": bool(remote),
            "last_sync_at": last_sync_at, "last_error": last_error, "unsettled": bool(unsettled),
            "pending": dict(zip(KINDS, _counts(pending))), "parts_fp": parts_fp,
            "acked": dict(zip(KINDS, _counts(acked))), "skipped": dict(zip(KINDS, _counts(skipped))),
            "remote_id": remote_id, "staged": bool(staged)}


@functools.lru_cache(maxsize=4096)
def _counts(text: str) -> tuple[int, ...]:
    """Counts per kind as stored (``"0|12|0|0|0"``); most runs share a few such strings."""
    return tuple(map(int, text.split("|")))


def _cursor_values(summary: dict) -> tuple:
    """The columns after ``fp`` and ``dir_fp`` of a cursor's row, from its summary."""
    pending = summary["pending"]
    return (summary.get("parts_fp"), summary["target"], summary["destination"], summary["project"],
            summary["run_id"], summary["synced_status"], int(bool(summary["in_doubt"])), int(bool(summary["remote"])),
            int(bool(summary["unsettled"])), summary["last_sync_at"], summary["last_error"],
            "|".join(str(int(pending.get(k, 0))) for k in KINDS),
            "|".join(str(int(summary["acked"].get(k, 0))) for k in KINDS),
            "|".join(str(int(summary["skipped"].get(k, 0))) for k in KINDS), summary["remote_id"],
            int(bool(summary["staged"])))


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _writers_lost(writers: list[dict]) -> str | None:
    """The writer files that recorded ``write_errors``, as stored (None: none did)."""
    lost = [{"writer_id": str(w.get("writer_id", "?")), "write_errors": str(w["write_errors"])}
            for w in writers if w.get("write_errors")]
    return _dumps(lost) if lost else None


def _light_columns(light: dict) -> dict:
    out = {k: v for k, v in light.items() if k not in ("tags", "group")}
    out["grp"] = light.get("group")
    out["tags"] = _dumps(light["tags"]) if light.get("tags") is not None else None
    return out


@functools.lru_cache(maxsize=1024)
def _tags(text: str) -> tuple:
    """A stored tag list (runs of a store share a few: parsed once each)."""
    return tuple(json.loads(text))


#: the columns of a row :meth:`Catalog.listed` hands out, in order
LISTED_COLUMNS = _RUN_COLUMNS
_I = {c: i for i, c in enumerate(_RUN_COLUMNS)}
_I_STATUS, _I_UNREADABLE, _I_PROBLEMS, _I_META_FP = _I["status"], _I["unreadable"], _I["problems"], _I["meta_fp"]
_I_KIND_FPS, _I_PARTS_FP, _I_BYTES, _I_BYTES_FP = _I["kind_fps"], _I["parts_fp"], _I["bytes"], _I["bytes_fp"]
_I_DIR_FP, _I_WRITERS_FP, _I_WRITERS_LOST, _I_KIND_ROWS = _I["dir_fp"], _I["writers_fp"], _I["writers_lost"], _I["kind_rows"]
_I_DAMAGED, _I_CREATED_AT, _I_WRITE_ERRORS = _I["damaged"], _I["created_at"], _I["write_errors"]
_LISTED_FINAL = ("finished", "failed")
_LIGHT_END = _I["write_errors"] + 1  # the columns up to write_errors are the listing's fields


def _light_of_tuple(row: tuple) -> dict:
    """The fields listings use (:attr:`RunEntry.light`) of a row as the file holds it (a tuple
    in :data:`_RUN_COLUMNS` order)."""
    (_p, _r, _fp, _u, _pr, name, status, created_at, ended_at, updated_at, last_step, host, user, tags, grp,
     job_type, exit_code, heartbeat_at, pid, write_errors) = row[:_LIGHT_END]
    return {"name": name, "status": status, "created_at": created_at, "ended_at": ended_at,
            "updated_at": updated_at, "last_step": last_step, "host": host, "user": user,
            "tags": list(_tags(tags)) if tags is not None else None, "group": grp, "job_type": job_type,
            "exit_code": exit_code, "heartbeat_at": heartbeat_at, "pid": pid, "write_errors": write_errors}


def _light_of_row(row: dict) -> dict:
    """:func:`_light_of_tuple` of a row held as a dict."""
    return _light_of_tuple(tuple(row[c] for c in _RUN_COLUMNS[:_LIGHT_END]))


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
    no ``stat`` and no catalog (folders only say which runs exist). A project or run folder that
    is a symbolic link leading outside the store is not a run of it and is left out
    (:func:`trackstore.store.layout.outside_store`)."""
    return sorted(_scan_runs(Path(root)))


def _scan_runs(root: Path) -> Iterator[tuple[str, str]]:
    """``(project, run_id)`` of every run folder (names from two levels of ``scandir``)."""
    real_root: list[str] = []  # realpath of the root, taken at the first link met

    def inside(e: os.DirEntry) -> bool:
        if not e.is_symlink():  # from the directory entry: no system call
            return True
        if not real_root:
            real_root.append(os.path.realpath(root))
        problem = outside_store(e.path, real_root[0])
        if problem is not None:
            warnings.warn(f"{e.path} is {problem}: it is not a run of this store, and its run.json is not read",
                          RunJsonWarning, stacklevel=2)
        return problem is None

    try:
        top = os.scandir(root)
    except OSError:
        return
    with top:
        projects = [e for e in top if e.name.startswith(PROJECT_PREFIX) and e.is_dir() and inside(e)]
    for pe in projects:
        project = pe.name[len(PROJECT_PREFIX):]
        try:
            inner = os.scandir(pe.path)
        except OSError:
            continue
        with inner:
            for e in inner:
                if e.name.startswith(RUN_PREFIX) and e.is_dir() and inside(e):
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


__all__ = ["CATALOG_DIR", "CATALOG_FILE", "CATALOG_VERSION", "RACY_S", "Catalog", "PartRecord", "PartsSummary", "QuietRun",
           "RunEntry",
           "catalog_path", "column_max", "column_max_time", "fingerprint", "open_catalog", "parts_digest", "read_part_record", "RUN_FILE"]
