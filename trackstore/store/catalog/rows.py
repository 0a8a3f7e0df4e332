"""The catalog file's tables and the one type of each of its rows.

A run's row (:class:`RunRow`), its large columns (:class:`RunDetails`) and a cursor's row
(:class:`CursorRow`) are named tuples whose fields are the columns of their tables, in the
order the tables hold them: a row read from the file is made into its type once
(:meth:`RunRow.from_values`) and every reader takes its fields by name. The SQL of the tables, the
file's version and the encodings of the columns that are not plain values (counts per kind as
``"0|12|0|0|0"``, tags and problems as JSON text) live here and nowhere else; docs/format.md
section 11 is the spec.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, NamedTuple

from ..layout import KINDS
from .part_records import MetricFacts

CATALOG_DIR = "_catalog"
CATALOG_FILE = "catalog.sqlite"
CATALOG_VERSION = 5  # 5: metrics facts for alerts; 4: the images kind (six per-kind counts); 3: cursors gained `staged`


class RunRow(NamedTuple):
    """One run's row of the ``runs`` table: the usable fields of its ``run.json`` that listings
    show, the fingerprints each group of fields was derived under, and what was derived.

    ``meta_fp`` holds ``name`` ... ``write_errors``; ``writers_fp`` holds ``writers_lost``;
    ``dir_fp`` and ``kind_fps`` hold ``kind_rows``, ``damaged`` and ``parts_fp``; ``bytes_fp``
    (``meta_fp|writers_fp|parts_fp``) holds ``bytes`` (:mod:`.freshness` checks them);
    ``metrics_fp`` holds ``nonfinite`` ... ``metric_step`` (:meth:`~.cache.Catalog.metric_facts`)."""

    project: str
    run_id: str
    meta_fp: str | None = None
    unreadable: int | None = None
    problems: str | None = None  # JSON list of what of run.json could not be read
    name: str | None = None
    status: str | None = None  # as recorded in run.json
    created_at: str | None = None
    ended_at: str | None = None
    updated_at: str | None = None
    last_step: int | None = None
    host: str | None = None
    user: str | None = None
    tags: str | None = None  # JSON list
    grp: str | None = None
    job_type: str | None = None
    exit_code: int | None = None
    heartbeat_at: str | None = None
    pid: int | None = None
    write_errors: str | None = None
    writers_fp: str | None = None
    writers_lost: str | None = None  # JSON list of the writer files that recorded write_errors
    dir_fp: str | None = None
    kind_fps: str | None = None  # each kind folder's fingerprint, then "+"/"-": an artifacts folder
    kind_rows: str | None = None  # readable rows per kind, "|"-joined in KINDS order
    damaged: int | None = None  # parts that cannot be read
    parts_fp: str | None = None  # parts_digest of every part
    bytes_fp: str | None = None
    bytes: int | None = None
    metrics_fp: str | None = None  # the metrics folder's fingerprint the facts below were derived under
    nonfinite: int | None = None  # NaN and infinite metric values (None: not derived)
    nonfinite_keys: str | None = None  # JSON {key: [nan, inf, first step]}
    metric_last_ts: float | None = None  # the newest metric row's ts
    metric_interval: float | None = None  # the usual seconds between log times (trackstore.read.alerts)
    metric_step: int | None = None  # the largest metrics step in the parts' footers

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The table's columns, in order (the fields)."""
        return cls._fields

    @classmethod
    def from_values(cls, values: Any) -> RunRow:
        """The row of the values a query gave, in column order."""
        return cls._make(values)

    def replaced(self, **values: Any) -> RunRow:
        """This row with some fields changed."""
        return self._replace(**values)

    @property
    def key(self) -> tuple[str, str]:
        return (self.project, self.run_id)

    @property
    def read_whole(self) -> bool:
        """run.json was parsed, and every field of it could be used."""
        return not self.unreadable and self.problems in (None, "", "[]")

    def problem_list(self) -> list[str]:
        return json.loads(self.problems) if self.problems and self.problems != "[]" else []

    def light(self) -> dict:
        """The recorded fields listings use (:attr:`~.cache.RunEntry.light`)."""
        tags = self.tags
        return {"name": self.name, "status": self.status, "created_at": self.created_at,
                "ended_at": self.ended_at, "updated_at": self.updated_at, "last_step": self.last_step,
                "host": self.host, "user": self.user, "tags": list(_tags(tags)) if tags is not None else None,
                "group": self.grp, "job_type": self.job_type, "exit_code": self.exit_code,
                "heartbeat_at": self.heartbeat_at, "pid": self.pid, "write_errors": self.write_errors}

    def rows_per_kind(self) -> dict[str, int]:
        return dict(zip(KINDS, counts(self.kind_rows or "")))

    def metric_facts(self) -> MetricFacts | None:
        """What the metrics parts say for alerts, as kept (None: not derived)."""
        if self.nonfinite is None:
            return None
        return MetricFacts(int(self.nonfinite), json.loads(self.nonfinite_keys) if self.nonfinite_keys else {},
                           self.metric_last_ts, self.metric_interval, self.metric_step)

    def losses(self) -> list[dict]:
        """The writer files that recorded ``write_errors`` (``writer_id`` and ``write_errors``)."""
        return json.loads(self.writers_lost) if self.writers_lost else []


class RunDetails(NamedTuple):
    """One run's row of the ``run_details`` table (after its key): the large columns, JSON
    text read only when asked for."""

    meta: str | None = None  # every usable field of run.json
    writers: str | None = None  # the writer files
    parts: str | None = None  # per kind: [folder fingerprint, [PartRecord.to_json(), ...]]

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The table's columns, in order (the fields)."""
        return cls._fields

    def replaced(self, **values: Any) -> RunDetails:
        """This row with some fields changed."""
        return self._replace(**values)


class CursorRow(NamedTuple):
    """One cursor file's row of the ``cursors`` table (after its ``path``): the file's and its
    folder's fingerprints and the summary (:func:`trackstore.store.ledger.summarize_cursor`)
    made from the file, with ``parts_fp`` the parts its pending counts were made against."""

    fp: str | None
    dir_fp: str | None
    parts_fp: str | None
    target: str
    destination: str
    project: str
    run_id: str
    synced_status: str | None
    in_doubt: int
    remote: int
    unsettled: int
    last_sync_at: str | None
    last_error: str | None
    pending: str  # counts per kind, "|"-joined
    acked: str
    skipped: str
    remote_id: str | None
    staged: int

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The table's columns, in order (the fields)."""
        return cls._fields

    @classmethod
    def from_values(cls, values: Any) -> CursorRow:
        """The row of the values a query gave, in column order."""
        return cls._make(values)

    @classmethod
    def from_summary(cls, fp: str, dir_fp: str, summary: dict) -> CursorRow:
        """The row of a cursor summary (raises ValueError, TypeError or KeyError for a value
        the columns cannot hold)."""
        return cls(fp, dir_fp, summary.get("parts_fp"), summary["target"], summary["destination"],
                   summary["project"], summary["run_id"], summary["synced_status"], int(bool(summary["in_doubt"])),
                   int(bool(summary["remote"])), int(bool(summary["unsettled"])), summary["last_sync_at"],
                   summary["last_error"], _joined(summary["pending"]), _joined(summary["acked"]),
                   _joined(summary["skipped"]), summary["remote_id"], int(bool(summary["staged"])))

    def summary(self) -> dict:
        """The cursor summary this row holds (no JSON)."""
        return {"target": self.target, "destination": self.destination, "project": self.project,
                "run_id": self.run_id, "synced_status": self.synced_status, "in_doubt": bool(self.in_doubt),
                "remote": bool(self.remote), "last_sync_at": self.last_sync_at, "last_error": self.last_error,
                "unsettled": bool(self.unsettled), "pending": dict(zip(KINDS, counts(self.pending))),
                "parts_fp": self.parts_fp, "acked": dict(zip(KINDS, counts(self.acked))),
                "skipped": dict(zip(KINDS, counts(self.skipped))), "remote_id": self.remote_id,
                "staged": bool(self.staged)}


RUN_COLUMNS = RunRow.columns()
DETAIL_COLUMNS = RunDetails.columns()
CURSOR_COLUMNS = ("path", *CursorRow.columns())

# added within version 2 (a file without them is extended when next written, not rebuilt)
OVERVIEWS_TABLE = ("CREATE TABLE IF NOT EXISTS run_overviews (project TEXT NOT NULL, run_id TEXT NOT NULL, "
                   "basis TEXT, overview TEXT, PRIMARY KEY (project, run_id)) WITHOUT ROWID")
PART_FOLDERS_TABLE = "CREATE TABLE IF NOT EXISTS part_folders (folder TEXT PRIMARY KEY, fp TEXT, names TEXT) WITHOUT ROWID"
TABLES = ("catalog_info", "runs", "run_details", "cursors", "part_checks", "part_schemas", "run_overviews",
          "part_folders")
SCHEMA = (
    "CREATE TABLE catalog_info (key TEXT PRIMARY KEY, value TEXT)",
    "CREATE TABLE runs (project TEXT NOT NULL, run_id TEXT NOT NULL, meta_fp TEXT, unreadable INTEGER, "
    "problems TEXT, name TEXT, status TEXT, created_at TEXT, ended_at TEXT, updated_at TEXT, last_step INTEGER, "
    "host TEXT, user TEXT, tags TEXT, grp TEXT, job_type TEXT, exit_code INTEGER, heartbeat_at TEXT, pid INTEGER, "
    "write_errors TEXT, writers_fp TEXT, writers_lost TEXT, dir_fp TEXT, kind_fps TEXT, kind_rows TEXT, "
    "damaged INTEGER, parts_fp TEXT, bytes_fp TEXT, bytes INTEGER, metrics_fp TEXT, nonfinite INTEGER, "
    "nonfinite_keys TEXT, metric_last_ts REAL, metric_interval REAL, metric_step INTEGER, "
    "PRIMARY KEY (project, run_id)) WITHOUT ROWID",
    "CREATE TABLE run_details (project TEXT NOT NULL, run_id TEXT NOT NULL, meta TEXT, writers TEXT, parts TEXT, "
    "PRIMARY KEY (project, run_id))",
    "CREATE TABLE cursors (path TEXT PRIMARY KEY, fp TEXT, dir_fp TEXT, parts_fp TEXT, target TEXT, "
    "destination TEXT, project TEXT, run_id TEXT, synced_status TEXT, in_doubt INTEGER, remote INTEGER, "
    "unsettled INTEGER, last_sync_at TEXT, last_error TEXT, pending TEXT, acked TEXT, skipped TEXT, remote_id TEXT, "
    "staged INTEGER) WITHOUT ROWID",
    "CREATE TABLE part_checks (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, problem TEXT, schema TEXT) "
    "WITHOUT ROWID",
    "CREATE TABLE part_schemas (digest TEXT PRIMARY KEY, columns TEXT) WITHOUT ROWID",
    OVERVIEWS_TABLE,
    PART_FOLDERS_TABLE,
)


def catalog_path(root: Path) -> Path:
    return Path(root) / CATALOG_DIR / CATALOG_FILE


def is_catalog_path(name: str) -> bool:
    """Whether a root entry is the catalog's folder (never data; doctor and bundles skip it)."""
    return name == CATALOG_DIR


def light_of_meta(meta: dict) -> dict:
    """The fields listings use (:meth:`RunRow.light`) of a run.json's usable fields."""
    tags = meta.get("tags")
    return {"name": meta.get("name"), "status": meta.get("status"), "created_at": meta.get("created_at"),
            "ended_at": meta.get("ended_at"), "updated_at": meta.get("updated_at"),
            "last_step": meta.get("last_step"), "host": meta.get("host"), "user": meta.get("user"),
            "tags": list(tags) if isinstance(tags, list) else None, "group": meta.get("group"),
            "job_type": meta.get("job_type"), "exit_code": meta.get("exit_code"),
            "heartbeat_at": meta.get("heartbeat_at"), "pid": meta.get("pid"),
            "write_errors": str(meta["write_errors"]) if meta.get("write_errors") else None}


def light_columns(light: dict) -> dict:
    """The :class:`RunRow` fields of the fields listings use (the inverse of :meth:`RunRow.light`)."""
    out = {k: v for k, v in light.items() if k not in ("tags", "group")}
    out["grp"] = light.get("group")
    out["tags"] = dumps(light["tags"]) if light.get("tags") is not None else None
    return out


def facts_columns(facts: MetricFacts) -> dict:
    """The :class:`RunRow` fields of a run's :class:`~.part_records.MetricFacts` (the inverse of
    :meth:`RunRow.metric_facts`)."""
    return {"nonfinite": facts.nonfinite, "nonfinite_keys": json.dumps(facts.keys, sort_keys=True) if facts.keys else None,
            "metric_last_ts": facts.last_ts, "metric_interval": facts.interval, "metric_step": facts.last_step}


def writers_lost(writers: list[dict]) -> str | None:
    """The writer files that recorded ``write_errors``, as stored (None: none did)."""
    lost = [{"writer_id": str(w.get("writer_id", "?")), "write_errors": str(w["write_errors"])}
            for w in writers if w.get("write_errors")]
    return dumps(lost) if lost else None


def _joined(per_kind: dict) -> str:
    """Counts per kind as stored: ``"0|12|0|0|0"`` in KINDS order."""
    return "|".join(str(int(per_kind.get(k, 0))) for k in KINDS)


@functools.lru_cache(maxsize=4096)
def counts(text: str) -> tuple[int, ...]:
    """Counts per kind as stored (``"0|12|0|0|0"``); most runs share a few such strings."""
    return tuple(map(int, text.split("|"))) if text else ()


@functools.lru_cache(maxsize=1024)
def _tags(text: str) -> tuple:
    """A stored tag list (runs of a store share a few: parsed once each)."""
    return tuple(json.loads(text))


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True, separators=(",", ":"))


def digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:24]
