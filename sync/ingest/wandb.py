"""wandb offline runs as trackstore runs: ``trackstore ingest --from wandb``.

What it reads: the run folders wandb leaves under ``wandb/`` (``offline-run-<time>-<id>``, and
``run-<time>-<id>`` of online runs, which keep the same transaction log), through the
project's reader of wandb's ``.wandb`` framing (:class:`trackstore.sync.wandb_log.LogReader`),
each record parsed by wandb's own protobuf class (``wandb.proto.wandb_internal_pb2.Record``;
wandb 0.31 ships no Python reader of its own), and the files wandb wrote beside it (tables,
files saved with ``wandb.save``, staged artifact files).

What it promises:

* ``discover`` takes a ``wandb/`` folder, a folder holding run folders (or holding ``wandb/``),
  one run folder or one ``.wandb`` file; it groups the folders of one run id (a run resumed
  offline writes one folder per session), without reading any record.
* ``read`` makes the sessions of a run ONE run, merged in time order (the folder's time, then
  the run record's start time; the log's mtime for a folder named otherwise). Every history value keeps
  its step (``history.step``, else ``_step``) and its ``_timestamp`` (seconds, rounded to the
  microsecond). Nested keys (``nested_key``) are joined with ``/``, as trackstore's own ``log``
  flattens a dict.
* The mapping (docs/ingest.md, "wandb"): numbers and booleans -> metrics (NaN and infinities
  kept); text -> samples (``output``, split = the key); ``wandb.Histogram`` -> histograms
  (``values`` are the counts, ``bins`` the edges); ``wandb.Table`` (``table-file`` and
  ``incremental-table-file``, read from ``files/media/table``) -> one sample per row, split =
  the key, ``sample_index`` = the row; images, audio, video and other media -> counted per kind
  in ``unmapped``; lists and other values no kind holds -> counted too. Config = the run
  record's config and later config records (wandb's ``_wandb`` key left out); summary = the
  merge of every summary record (``_wandb``, ``_runtime``, ``_step``, ``_timestamp`` left out);
  name, tags, notes, group, job type and host from the latest session that set them; created =
  the first session's start. Status from the last session's exit record: 0 finished, else
  failed; no exit record -> ``running`` with the log's mtime as heartbeat (the store calls it
  crashed once that is older than its staleness limit).
* Artifacts: each logged artifact whose files wandb still has locally (offline, it stages them
  under its data folder) becomes an artifact of the same name and type (the artifacts wandb
  makes of logged tables are not: their rows are samples); the run's own files
  (``files/``: ``wandb.save``, files written to ``run.dir``, saved code) become one artifact
  ``wandb-files`` (type ``files``), later sessions' copies winning, without what wandb writes
  for itself (``media/``, ``output.log``, ``requirements.txt``, ``wandb-metadata.json``,
  ``config.yaml``, ``wandb-summary.json``, ``conda-environment.yaml``, ``diff.patch``,
  ``upstream_diff_*.patch``, ``wandb-job.json``).
* A damaged log gives what is readable: a torn or corrupt tail (bytes after the last complete
  record), a log without records, a missing table file or a saved file whose link is broken is
  named, with its file, in ``problems``. ``read`` raises only when no session holds a record.

Speed: the history and summary loops work on whole records with C-level ``map`` over the
items (``float`` on ``value_json`` first; a record with nested keys, text or media takes the
per-item path) and add points as columns, never a dict per point.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import weakref
from array import array
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Callable

from trackstore.errors import InvalidValueError, UsageError
from trackstore.store.vocab import RunStatus
from trackstore.upkeep.ingest import ExternalArtifact, ExternalRun

from . import Found

SOURCE = "wandb"
RUN_DIR = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-(.+)$")
LOG_NAME = re.compile(r"^run-(.+)\.wandb$")
FILES_ARTIFACT = "wandb-files"
# What wandb writes into a run's files/ for itself (not the user's files).
WANDB_OWN_FILES = frozenset({"output.log", "requirements.txt", "wandb-metadata.json", "config.yaml",
                             "wandb-summary.json", "conda-environment.yaml", "diff.patch", "wandb-job.json"})
SUMMARY_LEFT_OUT = frozenset({"_wandb", "_runtime", "_step", "_timestamp"})
# Media a history value can be ("_type") -> the kind counted in unmapped; the plural forms
# (a list of images logged under one key) carry their "count".
MEDIA_KINDS = {
    "image-file": "image", "images/separated": "image", "audio-file": "audio", "audio": "audio",
    "video-file": "video", "videos": "video", "html-file": "html", "html": "html", "object3D-file": "object3d",
    "object3D": "object3d", "molecule-file": "molecule", "molecule": "molecule", "plotly-file": "plotly",
    "bokeh-file": "bokeh", "graph-file": "graph", "wb_trace_tree": "trace tree", "joined-table": "joined table",
    "partitioned-table": "partitioned table", "pytorch-model-file": "model file",
    "sklearn-model-file": "model file", "tfkeras-model-file": "model file",
}
TABLE_TYPES = ("table-file", "incremental-table-file")
TABLE_ARTIFACT_TYPES = ("run_table", "wandb-run-incremental-table")  # wandb's copies of logged tables
# Table columns that become a sample's input, output and score (case-insensitive, first name
# of each list found, in the list's order). A table with neither an input nor an output column
# keeps every column in ``extra``; a score cell that is not a number stays in ``extra``.
INPUT_COLUMNS = ("input", "prompt", "question", "query", "inputs")
OUTPUT_COLUMNS = ("output", "completion", "response", "answer", "generation", "prediction", "outputs")
SCORE_COLUMNS = ("score", "reward")
POINTS_CHUNK = 1_000_000  # points buffered as Python lists before they become Arrow columns
BLOCK = 32768  # the log's block size: a block's last < 7 bytes may be zero padding
CHUNK_HEADER = 7

_NK = attrgetter("nested_key")
_VJ = attrgetter("value_json")
_FIRST = itemgetter(0)
_REMOVED = object()


# ---------------------------------------------------------------------------- discover
def discover(location: str) -> list[Found]:
    """The wandb runs at ``location`` (module docstring), one :class:`Found` per run id, its
    sessions' logs in ``handle`` in time order; ``[]`` if it holds none."""
    path = Path(location)
    if not path.exists():
        raise UsageError(f"{location}: no such file or folder (give a wandb/ folder, a run folder or a .wandb file)")
    logs = _logs_at(path)
    runs: dict[str, list[Path]] = {}
    for log in logs:
        runs.setdefault(_run_id(log), []).append(log)
    found = []
    for run_id, group in runs.items():
        group.sort(key=_session_order)
        if len(group) == 1:
            where = group[0] if path.is_file() else group[0].parent
            label = where.name
        else:
            where = Path(os.path.commonpath([str(g.parent) for g in group]))
            label = f"{run_id} ({len(group)} sessions)"
        found.append(Found(source=SOURCE, source_id=run_id, location=str(where), label=label,
                           size=sum(_size(g) for g in group), handle=tuple(group)))
    found.sort(key=lambda f: _session_order(f.handle[0]))
    return found


def merge(a: Found, b: Found) -> Found:
    """One run's sessions found at two locations (``offline-run-A-x offline-run-B-x``): one run."""
    logs = tuple(sorted({*a.handle, *b.handle}, key=_session_order))
    return Found(source=SOURCE, source_id=a.source_id, location=str(Path(os.path.commonpath(
        [str(g.parent) for g in logs]))), label=f"{a.source_id} ({len(logs)} sessions)",
        size=sum(_size(g) for g in logs), handle=logs)


def _run_id(log: Path) -> str:
    m = LOG_NAME.match(log.name)
    return m.group(1) if m else log.stem


def _logs_at(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if LOG_NAME.match(path.name) else []
    own = _logs_in(path)
    if own:
        return own
    logs = [log for sub in sorted(path.iterdir()) if sub.is_dir() and not sub.is_symlink() for log in _logs_in(sub)]
    if not logs and (path / "wandb").is_dir():
        return _logs_at(path / "wandb")  # the folder given to wandb.init(dir=...)
    return logs


def _logs_in(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if LOG_NAME.match(p.name) and p.is_file())
    except OSError:
        return []


def _session_order(log: Path) -> tuple:
    m = RUN_DIR.match(log.parent.name)
    return (m.group(1) if m else "", _mtime(log), str(log))


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


# ---------------------------------------------------------------------------- read
@dataclass
class _Session:
    """What one ``.wandb`` log (one session of the run) holds besides its rows."""

    log: Path
    order: int
    records: int = 0
    start_time: float | None = None
    last_seen: float | None = None
    fields: dict = field(default_factory=dict)  # run record: name, tags, ... (non-empty ones)
    config: list = field(default_factory=list)  # ("set", path, value_json) / ("del", path), in order
    summary: dict = field(default_factory=dict)  # key (str, or tuple for a nested path) -> value_json
    exit_code: int | None = None
    version: str | None = None
    environment: dict = field(default_factory=dict)
    artifacts: list = field(default_factory=list)
    last_step: int = 0

    @property
    def folder(self) -> Path:
        return self.log.parent

    def seen(self, t: float | None) -> None:
        if t is not None and (self.last_seen is None or t > self.last_seen):
            self.last_seen = t


class _Reader:
    """Reads the sessions of one run into an :class:`ExternalRun` (rows) and :class:`_Session` s."""

    def __init__(self, run: ExternalRun, progress: Callable[[int], None] | None):
        self.run = run
        self.progress = progress
        # typed arrays: handed to Arrow without a conversion per point (ExternalRun.add_points)
        self.steps = array("q")
        self.keys: list[str] = []
        self.values = array("d")
        self.ts = array("q")
        self.tmp: Path | None = None

    # ------------------------------------------------------------------ one log
    def session(self, log: Path, order: int) -> _Session:
        from google.protobuf.message import DecodeError

        from trackstore.sync.wandb_log import HEADER, LogReader

        s = _Session(log=log, order=order)
        try:
            size = log.stat().st_size
        except OSError as exc:
            self.run.problems.append(f"{log}: cannot be read ({exc.strerror or exc}); nothing of it was imported")
            return s
        reader = LogReader(log)
        reported = 0
        try:
            for rec in reader.records():
                s.records += 1
                self.record(s, rec)
                if self.progress is not None and not s.records % 2000:
                    self.progress(reader.pos - reported)
                    reported = reader.pos
        except DecodeError as exc:
            self.run.problems.append(f"{log}: the record at offset {reader.pos} is not a wandb record ({exc}); "
                                     f"the {s.records} records before it were imported")
            size = reader.pos  # reported: no second message about the same bytes
        except OSError as exc:
            self.run.problems.append(f"{log}: read failed after {s.records} records ({exc.strerror or exc})")
            size = reader.pos
        if self.progress is not None and reader.pos > reported:
            self.progress(reader.pos - reported)
        self.flush_points()
        if reader.pos == 0:
            what = "is empty" if size == 0 else "is not a wandb transaction log (no :W&B header)"
            self.run.problems.append(f"{log}: {what}; nothing of it was imported")
        elif s.records == 0 and size <= len(HEADER):
            self.run.problems.append(f"{log}: holds no record (the session ended before wandb wrote one)")
        elif reader.pos < size and not _padding_only(log, reader.pos, size):
            self.run.problems.append(
                f"{log}: {size - reader.pos} bytes after offset {reader.pos} are not a complete record (a torn "
                f"or damaged tail); the {s.records} records before it were imported")
        return s

    def record(self, s: _Session, rec: Any) -> None:
        what = rec.WhichOneof("record_type")
        if what == "history":
            self.history(s, rec.history)
        elif what == "summary":
            self.summary(s, rec.summary)
        elif what == "config":
            for item in rec.config.update:
                s.config.append(("set", _path(item), item.value_json))
            for item in rec.config.remove:
                s.config.append(("del", _path(item)))
        elif what == "run":
            self.run_record(s, rec.run)
        elif what == "exit":
            s.exit_code = int(rec.exit.exit_code)
        elif what == "stats":  # wandb's own system sampler: not mapped (the store samples its own)
            if rec.stats.HasField("timestamp"):
                s.seen(_seconds(rec.stats.timestamp))
            self.run.skip("system stats sample")
        elif what == "output_raw":  # console output, as SwanLab's reader counts it too
            if rec.output_raw.HasField("timestamp"):
                s.seen(_seconds(rec.output_raw.timestamp))
            lines = rec.output_raw.line.count("\n") or (1 if rec.output_raw.line else 0)
            if lines:
                self.run.skip("console line", lines)
        elif what == "artifact":
            self.artifact_record(s, rec.artifact)
        elif what == "header":
            s.version = rec.header.version_info.producer or None
        elif what == "environment" and not s.environment:
            env = rec.environment
            s.environment = {k: v for k, v in (("program", env.program), ("python", env.python), ("os", env.os))
                             if v}

    def run_record(self, s: _Session, r: Any) -> None:
        if r.HasField("start_time"):
            s.start_time = _seconds(r.start_time)
            s.seen(s.start_time)
        for name, value in (("name", r.display_name), ("project", r.project), ("entity", r.entity),
                            ("notes", r.notes), ("group", r.run_group), ("job_type", r.job_type), ("host", r.host),
                            ("tags", list(r.tags))):
            if value:
                s.fields[name] = value
        for item in r.config.update:
            s.config.append(("set", _path(item), item.value_json))

    # ------------------------------------------------------------------ history (the hot loop)
    def history(self, s: _Session, h: Any) -> None:
        items = list(h.item)  # one wrapper per item, reused by both maps
        nks = list(map(_NK, items))
        if nks and set(map(len, nks)) == {1}:  # no nested key: maybe every value a plain number
            try:
                values = list(map(float, map(_VJ, items)))
            except ValueError:
                pass
            else:
                row = dict(zip(map(_FIRST, nks), values))
                ts = row.pop("_timestamp", None)
                own_step = row.pop("_step", None)
                row.pop("_runtime", None)
                step = h.step.num if h.HasField("step") else int(own_step or 0)
                ts_us = self.stamp(s, ts)
                s.last_step = step
                n = len(row)
                if n:
                    self.keys.extend(row)
                    self.values.extend(row.values())
                    self.steps.extend(repeat(step, n))
                    self.ts.extend(repeat(ts_us, n))
                    if len(self.keys) >= POINTS_CHUNK:
                        self.flush_points()
                return
        self.history_items(s, h, items)

    def history_items(self, s: _Session, h: Any, items: Any) -> None:
        """A history row with nested keys, text, media or other values: item by item."""
        row: dict[tuple, Any] = {}
        for item in items:
            path = _path(item)
            try:
                row[path] = json.loads(item.value_json)
            except ValueError:
                self.run.skip("undecodable value")
        ts = row.pop(("_timestamp",), None)
        own_step = row.pop(("_step",), None)
        row.pop(("_runtime",), None)
        step = h.step.num if h.HasField("step") else _int(own_step)
        ts_us = self.stamp(s, ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None)
        s.last_step = step
        media = {p[:-1]: v for p, v in row.items() if len(p) > 1 and p[-1] == "_type" and isinstance(v, str)}
        objects: dict[tuple, dict] = {prefix: {} for prefix in media}
        for path, value in row.items():
            owner = next((path[:i] for i in range(1, len(path)) if path[:i] in media), None) if media else None
            if owner is not None:
                _put(objects[owner], path[len(owner):], value)
            elif path[0] == "_wandb":
                continue
            else:
                self.value(s, step, "/".join(path), value, ts_us)
        for prefix, obj in objects.items():
            self.media(s, step, "/".join(prefix), obj, ts_us)

    def value(self, s: _Session, step: int, key: str, value: Any, ts_us: int) -> None:
        if isinstance(value, (bool, int, float)):
            try:
                v = float(value)
            except OverflowError:
                self.run.problems.append(f"history value of {key!r} at step {step} does not fit a float64; left out")
                return
            self.steps.append(step)
            self.keys.append(key)
            self.values.append(v)
            self.ts.append(ts_us)
        elif isinstance(value, str):
            self.run.add_sample(step, None, value, split=key, ts_us=ts_us)
        elif isinstance(value, dict):  # wandb-core splits a dict into nested keys; older clients did not
            if isinstance(value.get("_type"), str):
                self.media(s, step, key, value, ts_us)
            else:
                for k, v in value.items():
                    self.value(s, step, f"{key}/{k}", v, ts_us)
        elif value is not None:  # None: nothing logged (trackstore's own log skips None too)
            self.run.skip("list" if isinstance(value, list) else f"value of type {type(value).__name__}")

    def media(self, s: _Session, step: int, key: str, obj: dict, ts_us: int) -> None:
        kind = obj.get("_type")
        if kind == "histogram":
            counts, edges = obj.get("values"), obj.get("bins")
            try:
                if not isinstance(counts, list) or not isinstance(edges, list):
                    raise InvalidValueError(f"histogram {key!r} at step {step} has no values/bins lists")
                self.run.add_histogram(step, key, counts=counts, edges=edges, ts_us=ts_us)
            except (InvalidValueError, TypeError, ValueError) as exc:
                self.run.problems.append(f"{s.log}: {exc}; left out")
        elif kind in TABLE_TYPES:
            self.table(s, step, key, obj, ts_us)
        elif kind in MEDIA_KINDS:
            count = obj.get("count") if kind in ("images/separated", "audio", "videos") else 1
            self.run.skip(MEDIA_KINDS[kind], count if isinstance(count, int) and count > 0 else 1)
        else:
            self.run.skip(f"unknown media {kind}")

    def table(self, s: _Session, step: int, key: str, obj: dict, ts_us: int) -> None:
        rel = obj.get("path")
        file = s.folder / "files" / str(rel)
        if not isinstance(rel, str) or not file.is_file():
            self.run.problems.append(f"{file}: the table {key!r} logged at step {step} is missing; its rows "
                                     "were not imported")
            return
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            columns = [str(c) for c in data["columns"]]
            rows = data["data"]
            if not isinstance(rows, list):
                raise ValueError("'data' is not a list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.run.problems.append(f"{file}: not a readable wandb table ({exc}); its rows were not imported")
            return
        roles = _table_roles(columns)
        for index, cells in enumerate(rows):
            sample: dict[str, Any] = {"input": None, "output": None, "score": None}
            extra = {}
            for col, cell in zip(columns, cells if isinstance(cells, list) else []):
                if isinstance(cell, dict) and isinstance(cell.get("_type"), str):
                    self.run.skip(MEDIA_KINDS.get(cell["_type"], f"unknown media {cell['_type']}"))
                    continue
                role = roles.get(col)
                if role == "score" and not (isinstance(cell, (int, float)) and not isinstance(cell, bool)):
                    role = None
                if role is None:
                    extra[col] = cell
                else:
                    sample[role] = cell
            try:
                self.run.add_sample(step, sample["input"], sample["output"], score=sample["score"], split=key,
                                    sample_index=index, extra=extra or None, ts_us=ts_us)
            except (InvalidValueError, TypeError, ValueError, OverflowError) as exc:
                self.run.problems.append(f"{file}: row {index} left out ({exc})")

    def stamp(self, s: _Session, ts: float | None) -> int:
        if ts is None:  # wandb always writes _timestamp; without it, the session's latest time
            ts = s.last_seen if s.last_seen is not None else 0.0
        else:
            s.seen(ts)
        return int(round(ts * 1e6))

    def flush_points(self) -> None:
        """Hand the buffered points to the run as Arrow columns (at most about POINTS_CHUNK at once)."""
        if self.keys:
            self.run.add_points(self.steps, self.keys, self.values, self.ts)
            self.steps, self.keys, self.values, self.ts = array("q"), [], array("d"), array("q")

    # ------------------------------------------------------------------ summary, artifacts
    def summary(self, s: _Session, rec: Any) -> None:
        items = list(rec.update)
        nks = list(map(_NK, items))
        if nks and set(map(len, nks)) == {1}:
            s.summary.update(zip(map(_FIRST, nks), map(_VJ, items)))
        else:
            for item in items:
                path = _path(item)
                s.summary[path[0] if len(path) == 1 else path] = item.value_json
        for item in rec.remove:
            path = _path(item)
            s.summary[path[0] if len(path) == 1 else path] = _REMOVED

    def artifact_record(self, s: _Session, a: Any) -> None:
        if a.type in TABLE_ARTIFACT_TYPES:
            return  # wandb's own copy of a table logged in history: its rows are samples already
        files = [(e.path, e.local_path) for e in a.manifest.contents]
        try:
            metadata = json.loads(a.metadata) if a.metadata else {}
        except ValueError:
            metadata = {}
        s.artifacts.append({"name": a.name, "type": a.type or "artifact", "files": files, "step": s.last_step,
                            "metadata": metadata if isinstance(metadata, dict) else {"metadata": metadata},
                            "wandb": {"digest": a.digest, "aliases": list(a.aliases), "description": a.description}})

    def staging(self) -> Path:
        """A folder of symlinks that lives as long as the run (log_artifact copies from it)."""
        if self.tmp is None:
            self.tmp = Path(tempfile.mkdtemp(prefix="trackstore-wandb-ingest-"))
            weakref.finalize(self.run, shutil.rmtree, str(self.tmp), True)
        return self.tmp


def read(found: Found, *, progress: Callable[[int], None] | None = None) -> ExternalRun:
    """The run ``found`` names, all its sessions (module docstring)."""
    logs = [Path(p) for p in (found.handle or [found.location])]
    run = ExternalRun(source=SOURCE, source_id=found.source_id, location=found.location, project=SOURCE)
    reader = _Reader(run, progress)
    sessions = [reader.session(log, i) for i, log in enumerate(logs)]
    reader.flush_points()
    if not any(s.records for s in sessions):
        raise ValueError(f"wandb run {found.source_id}: no record could be read from "
                         f"{', '.join(str(s.log) for s in sessions)}" + (f" ({run.problems[0]})" if run.problems else ""))
    sessions.sort(key=_when)
    _merge(run, sessions)
    _artifacts(reader, sessions)
    return run


def _when(s: _Session) -> tuple:
    """A session's place in time: the folder's time (to the second; local time, as wandb names
    it), then the run record's start time, then the order found."""
    m = RUN_DIR.match(s.folder.name)
    try:
        stamp = time.mktime(time.strptime(m.group(1), "%Y%m%d_%H%M%S")) if m else None
    except (ValueError, OverflowError):
        stamp = None
    if stamp is None:
        stamp = s.start_time if s.start_time is not None else _mtime(s.log)
    return (stamp, s.start_time if s.start_time is not None else stamp, s.order)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _merge(run: ExternalRun, sessions: list[_Session]) -> None:
    fields: dict[str, Any] = {}
    config: dict = {}
    summary_raw: dict = {}
    for s in sessions:
        fields.update(s.fields)
        for op in s.config:
            if op[0] == "set":
                try:
                    _put(config, op[1], json.loads(op[2]))
                except ValueError:
                    run.problems.append(f"{s.log}: config value {'/'.join(op[1])!r} is not JSON; left out")
            else:
                _drop(config, op[1])
        summary_raw.update(s.summary)
    config.pop("_wandb", None)
    summary: dict = {}
    for key, raw in summary_raw.items():
        path = key if isinstance(key, tuple) else (key,)
        if path[0] in SUMMARY_LEFT_OUT:
            continue
        if raw is _REMOVED:
            _drop(summary, path)
            continue
        try:
            _put(summary, path, json.loads(raw))
        except ValueError:
            run.problems.append(f"summary value {'/'.join(path)!r} is not JSON; left out")
    dated = [s for s in sessions if s.start_time is not None]
    last = sessions[-1]
    run.project = fields.get("project") or SOURCE
    run.name = fields.get("name")
    run.tags = [str(t) for t in fields.get("tags", [])]
    run.notes, run.group, run.job_type, run.host = (fields.get(k) for k in ("notes", "group", "job_type", "host"))
    run.config, run.summary = config, summary
    run.created_at = dated[0].start_time if dated else None
    if last.exit_code is None:
        run.status = RunStatus.RUNNING
        run.heartbeat_at = _mtime(last.log) or last.last_seen
    else:
        run.status = RunStatus.FINISHED if last.exit_code == 0 else RunStatus.FAILED
        run.ended_at = run.heartbeat_at = last.last_seen
    env = next((s.environment for s in reversed(sessions) if s.environment), {})
    run.source_meta = {
        "run_id": run.source_id, "project": fields.get("project"), "entity": fields.get("entity"),
        "exit_code": last.exit_code, "wandb_version": next((s.version for s in reversed(sessions) if s.version), None),
        "sessions": [s.folder.name for s in sessions], **env,
    }
    projects = {s.fields["project"] for s in sessions if s.fields.get("project")}
    if len(projects) > 1:
        run.problems.append(f"the sessions of wandb run {run.source_id} name different projects "
                            f"({', '.join(sorted(projects))}); ingested into {run.project!r}")


def _artifacts(reader: _Reader, sessions: list[_Session]) -> None:
    run = reader.run
    for s in sessions:
        for a in s.artifacts:
            local = [(p, Path(lp)) for p, lp in a["files"] if lp]
            if not a["files"] or len(local) < len(a["files"]) or not all(lp.is_file() for _, lp in local):
                run.skip("artifact without local files")
                continue
            folder = _linked(reader.staging() / f"artifact-{len(run.artifacts)}", local)
            meta = {**a["metadata"], "wandb": a["wandb"]}
            run.artifacts.append(ExternalArtifact(path=folder, name=a["name"], type=a["type"], step=a["step"],
                                                  metadata=meta))
    kept: dict[str, Path] = {}
    for s in sessions:
        files = s.folder / "files"
        if not files.is_dir():
            continue
        for p in sorted(files.rglob("*")):
            rel = p.relative_to(files)
            if rel.parts[0] == "media" or (len(rel.parts) == 1 and _wandb_own(rel.name)) or p.is_dir():
                continue
            if not p.is_file():
                run.problems.append(f"{p}: a file the run kept is unreadable (a broken link to "
                                    f"{os.readlink(p) if p.is_symlink() else 'nothing'}); left out of {FILES_ARTIFACT}")
                continue
            kept[rel.as_posix()] = p
    if kept:
        folder = _linked(reader.staging() / FILES_ARTIFACT, list(kept.items()))
        run.artifacts.append(ExternalArtifact(path=folder, name=FILES_ARTIFACT, type="files",
                                              step=max(s.last_step for s in sessions),
                                              metadata={"wandb": {"files": sorted(kept)}}))


def _linked(folder: Path, files: list[tuple[str, Path]]) -> Path:
    for rel, src in files:
        dest = folder / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.abspath(src), dest)
    return folder


def _wandb_own(name: str) -> bool:
    return name in WANDB_OWN_FILES or (name.startswith("upstream_diff_") and name.endswith(".patch"))


# ---------------------------------------------------------------------------- helpers
def _path(item: Any) -> tuple:
    """A history/summary/config item's key path (wandb-core writes ``nested_key``, older
    clients ``key``)."""
    return tuple(item.nested_key) or (item.key,)


def _put(node: dict, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[path[-1]] = value


def _drop(node: dict, path: tuple) -> None:
    for part in path[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            return
        node = child
    node.pop(path[-1], None)


def _seconds(ts: Any) -> float:
    return ts.seconds + ts.nanos / 1e9


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _table_roles(columns: list[str]) -> dict[str, str]:
    lowered = {c.lower(): c for c in reversed(columns)}  # the first column of a name wins
    roles: dict[str, str] = {}
    for role, names in (("input", INPUT_COLUMNS), ("output", OUTPUT_COLUMNS), ("score", SCORE_COLUMNS)):
        col = next((lowered[n] for n in names if n in lowered and lowered[n] not in roles), None)
        if col is not None:
            roles[col] = role
    if not any(r in ("input", "output") for r in roles.values()):
        return {}
    return roles


def _padding_only(log: Path, pos: int, size: int) -> bool:
    """True if the bytes after ``pos`` are a block's zero padding (too short for a chunk)."""
    if size - pos >= CHUNK_HEADER or pos // BLOCK != (size - 1) // BLOCK or size % BLOCK:
        return False
    with open(log, "rb") as f:
        f.seek(pos)
        return not f.read().strip(b"\0")
