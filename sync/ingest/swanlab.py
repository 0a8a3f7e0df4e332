"""SwanLab logdirs as trackstore runs (``trackstore ingest --from swanlab``).

What it reads, with SwanLab's own readers (swanlab >= 0.10.3):

* **Offline and local runs** (``swanlab.init(mode="offline"|"local")``): each session is a
  folder ``run-<YYYYmmdd_HHMMSS>-<id>`` holding ``run-<id>.swanlab``, a file of
  ``record_pb2.Record`` read with SwanLab's ``DataStoreReader`` (header version 2, SwanLab 0.10;
  a file of another version is refused, naming it), plus ``files/config.yaml`` (the config,
  read as SwanLab reads it: ``{key: {value, sort, desc}}``) and ``files/swanlab-metadata.json``
  (host, system, git). A run resumed with the same id writes one folder per session: all of
  them are one run, read oldest session first.
* **Local mode's dashboard layout** (``runs.swanlab``, the SQLite database of ``swanlab watch``,
  and ``<run folder>/logs/<tag folder>/*.log`` JSON lines): a run folder that has no record
  file, or only one of another version, is read the way SwanLab's dashboard reads it (the
  database opened read-only with a short timeout; ``index`` is the step, ``create_time`` the
  point's time). That layout has no tags, group, job type or charts.

How it maps (the table for docs/ingest.md is in the helper's report):

* project: the SwanLab project (``swanlab`` if none); source id: the experiment id; name,
  notes (description), tags, group and job type from the latest session's start record.
* scalars -> metrics, with their step and SwanLab's own per-point time (the point's timestamp,
  else the record's, as ``swanlab sync`` picks it). SwanLab's Python client stamps times with
  microsecond precision; they are kept to the microsecond.
* ``swanlab.Text`` -> samples: one per text, ``split`` the SwanLab key, ``output`` the text,
  the caption in ``extra``. An ECharts bar chart of histogram bins (one bar series whose
  categories are contiguous ``lo..hi`` ranges, as ``trackstore sync --to swanlab`` writes a
  histogram) -> histograms; any other chart, images, audio, video, 3D objects, molecules,
  HTML and console lines are counted as not mapped (``skip``).
* files saved with ``run.save`` -> artifacts (one per file).
* state: finished -> finished, crashed (an error) -> failed, aborted -> crashed; no finish
  record -> running, with the last activity as heartbeat (readers show it crashed once that
  is stale). Start and end times are the sessions' first start and last finish.

A damaged file gives its readable part: a file cut inside a record (a killed process, a copy
stopped half-way) or corrupt from some record on yields the whole records before that point,
and the problem names the file.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from trackstore.errors import TrackstoreError, UsageError
from trackstore.store.vocab import RunStatus
from trackstore.upkeep.ingest import ExternalArtifact, ExternalRun

from . import Found

__all__ = ["discover", "read", "Session", "SwanlabFileError", "RECORD_VERSION"]

RECORD_VERSION = 2  # the run-file header version this reader reads (SwanLab 0.10)
MIN_SWANLAB = (0, 10, 3)
DB_NAME = "runs.swanlab"
DB_TIMEOUT_S = 2.0
_RUN_DIR = re.compile(r"^run-(?:\d{8}_\d{6})-(.+)$")
_PROGRESS_BYTES = 1 << 20
# SwanLab's column types (metric.column.v1.ColumnType) that the store has no kind for, by name
_MEDIA = {2: "image", 3: "audio", 4: "text", 5: "video", 6: "echarts", 7: "object3d", 8: "molecule", 9: "html"}
# run_pb2.RunState -> the store's statuses (sync --to swanlab maps them back the same way)
_STATES = {0: RunStatus.RUNNING, 1: RunStatus.FINISHED, 2: RunStatus.FAILED, 3: RunStatus.CRASHED}
# swanboard's Experiment.status: 0 running, 1 finished, -1 stopped (an error, or stopped by hand)
_DASHBOARD_STATES = {0: RunStatus.RUNNING, 1: RunStatus.FINISHED, -1: RunStatus.CRASHED}


class SwanlabFileError(TrackstoreError):
    """A SwanLab run file this reader refuses (another format version, not a SwanLab file) or a
    run of which nothing could be read. The message names the file."""


@dataclass(frozen=True)
class Session:
    """One session folder of a run: read from its record file, or from the dashboard layout."""

    folder: Path
    record_file: Path | None  # run-<id>.swanlab (None: only the dashboard layout)
    db: Path | None  # the logdir's runs.swanlab, if any (local mode)


# ---------------------------------------------------------------------------- discover
def discover(location: str) -> list[Found]:
    """The SwanLab runs at ``location``: a ``swanlog`` folder holding run folders (or project
    folders holding them, as local mode per project leaves them), one run folder, a local-mode
    logdir, or a ``.swanlab`` file. Folders of one id (a resumed run) are one run."""
    path = Path(location).expanduser()
    if not path.exists():
        raise UsageError(f"{location}: no such file or folder")
    if path.is_file():
        if path.name == DB_NAME:
            path = path.parent
        elif path.suffix == ".swanlab":
            path = path.parent
        else:
            return []
    if _is_run_folder(path):
        folders = [path]
    else:  # run folders here, and in the folders here that are not run folders (a logdir per project)
        folders = _run_folders(path)
        for child in _subdirs(path):
            if not child.name.startswith("run-"):
                folders.extend(_run_folders(child))
    runs: dict[str, list[Session]] = {}
    for folder in folders:
        session = _session(folder)
        if session is not None:
            runs.setdefault(_folder_id(folder), []).append(session)
    out = []
    for run_id, sessions in runs.items():
        sessions.sort(key=lambda s: (s.folder.name, str(s.folder)))
        size = sum(_session_size(s) for s in sessions)
        where = sessions[0].folder if len(sessions) == 1 else sessions[0].folder.parent
        label = sessions[0].folder.name if len(sessions) == 1 else f"{run_id} ({len(sessions)} sessions)"
        out.append(Found(source="swanlab", source_id=run_id, location=str(where), label=label, size=size,
                         handle=tuple(sessions)))
    return sorted(out, key=lambda f: (f.handle[0].folder.name, f.source_id))


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def _run_folders(path: Path) -> list[Path]:
    return [p for p in _subdirs(path) if _is_run_folder(p)]


def _is_run_folder(path: Path) -> bool:
    if not path.is_dir() or not path.name.startswith("run-"):
        return False
    return _record_file(path) is not None or (path / "logs").is_dir() and (path.parent / DB_NAME).is_file()


def _record_file(folder: Path) -> Path | None:
    m = _RUN_DIR.match(folder.name)
    if m and (folder / f"run-{m.group(1)}.swanlab").is_file():
        return folder / f"run-{m.group(1)}.swanlab"
    files = sorted(folder.glob("*.swanlab"))
    return files[0] if len(files) == 1 and files[0].is_file() else None


def _folder_id(folder: Path) -> str:
    m = _RUN_DIR.match(folder.name)
    return m.group(1) if m else folder.name


def _session(folder: Path) -> Session | None:
    db = folder.parent / DB_NAME
    rec = _record_file(folder)
    dashboard = (folder / "logs").is_dir() and db.is_file()
    if rec is None and not dashboard:
        return None
    return Session(folder=folder, record_file=rec, db=db if dashboard else None)


def _session_size(s: Session) -> int:
    try:
        if s.record_file is not None:
            return s.record_file.stat().st_size
        return sum(f.stat().st_size for f in (s.folder / "logs").glob("*/*.log"))
    except OSError:
        return 0


# ---------------------------------------------------------------------------- read
def read(found: Found, *, progress: Callable[[int], None] | None = None) -> ExternalRun:
    """The whole run: every session of ``found``, oldest first (module docstring)."""
    from trackstore.sync.adapter import require_client

    require_client("swanlab", MIN_SWANLAB, "SwanLab ingest")
    sessions: tuple[Session, ...] = found.handle or tuple(s for f in discover(found.location)
                                                          if f.source_id == found.source_id for s in f.handle)
    acc = _Run(found, progress)
    for session in sessions:
        acc.read_session(session)
    return acc.finish()


class _Run:
    """What the sessions of one run hold, gathered in their order, then made an ExternalRun."""

    def __init__(self, found: Found, progress: Callable[[int], None] | None):
        self.run = ExternalRun(source="swanlab", source_id=found.source_id, location=found.location,
                               project="swanlab")
        self.progress = progress
        self.steps: list[int] = []
        self.keys: list[str] = []
        self.values: list[float] = []
        self.ts: list[int] = []
        self.starts: list[dict] = []  # per session, in order: the start record's fields
        self.ends: list[tuple[str, float | None, str | None]] = []  # per session: (status, ended, error)
        self.started: list[float] = []
        self.config: dict = {}
        self.read_any = False
        self.last_activity: float | None = None
        self.saved: dict[str, ExternalArtifact] = {}
        self.sessions: list[dict] = []
        self.count_logs = True  # progress in log-file bytes (a session sized by its dashboard files)

    # ------------------------------------------------------------------ sessions
    def read_session(self, s: Session) -> None:
        refusal = None
        if s.record_file is not None:
            try:
                self._read_records(s)
                return
            except SwanlabFileError as exc:
                refusal = str(exc)
                try:  # progress is counted in the record file's bytes (Found.size), read or not
                    self._tick(s.record_file.stat().st_size)
                except OSError:
                    pass
        if s.db is not None:
            if refusal is not None:
                self.run.problems.append(f"{refusal}; read from SwanLab's local dashboard files instead "
                                         f"({s.db.name}, {s.folder.name}/logs), which hold no tags, group, "
                                         "job type or charts")
            self.count_logs = refusal is None
            self._read_dashboard(s)
        elif refusal is not None:
            self.run.problems.append(refusal)

    def _tick(self, n: int) -> None:
        if self.progress is not None and n > 0:
            self.progress(n)

    def _tick_log(self, n: int) -> None:
        if self.count_logs:
            self._tick(n)

    def _activity(self, t: float | None) -> None:
        if t is not None and (self.last_activity is None or t > self.last_activity):
            self.last_activity = t

    # ------------------------------------------------------------------ record files
    def _read_records(self, s: Session) -> None:
        path = s.record_file
        assert path is not None
        size = path.stat().st_size
        started = None
        start: dict = {}
        end: tuple[str, float | None, str | None] | None = None
        skipped: dict[str, int] = {}
        done = pending = n = 0
        steps, keys, values, ts = self.steps, self.keys, self.values, self.ts
        for rec, nbytes in _records(path, self.run.problems):
            n += 1
            pending += nbytes
            kind = rec.WhichOneof("record_type")
            if kind == "scalar":
                p = rec.scalar
                t = p.timestamp
                sec, ns = t.seconds, t.nanos
                if not (sec or ns):  # no point time: the record's, as `swanlab sync` picks it
                    t = rec.timestamp
                    sec, ns = t.seconds, t.nanos
                steps.append(p.step)
                keys.append(p.key)
                values.append(p.value.number)
                ts.append(sec * 1_000_000 + ns // 1000)
            elif kind == "media":
                m = rec.media
                t = m.timestamp if (m.timestamp.seconds or m.timestamp.nanos) else rec.timestamp
                t_us = t.seconds * 1_000_000 + t.nanos // 1000
                medium = _MEDIA.get(int(m.type))
                if medium == "text":
                    self._texts(s, m, t_us)
                elif medium == "echarts":
                    self._echarts(s, m, t_us, skipped)
                else:
                    name = medium or f"unknown media {int(m.type)}"
                    skipped[name] = skipped.get(name, 0) + max(1, len(m.value.items))
            elif kind == "log":
                skipped["console line"] = skipped.get("console line", 0) + 1
            elif kind == "start":
                st = rec.start
                started = _ts_seconds(st.started_at) or _ts_seconds(rec.timestamp)
                start = {"project": st.project, "name": st.name, "description": st.description,
                         "tags": list(st.tags), "group": st.group, "job_type": st.job_type,
                         "workspace": st.workspace, "color": st.color}
            elif kind == "finish":
                f = rec.finish
                end = (_STATES.get(int(f.state), RunStatus.CRASHED),
                       _ts_seconds(f.finished_at) or _ts_seconds(rec.timestamp), f.error or None)
            elif kind == "save":
                self._save(s, rec.save)
            if pending >= _PROGRESS_BYTES:
                self._tick(pending)
                done, pending = done + pending, 0
        if not n:
            raise SwanlabFileError(f"{path}: no whole record in it ({size} bytes: the session was stopped "
                                   "before SwanLab wrote anything)")
        self._tick(max(0, size - done))
        self._activity(_ts_seconds(rec.timestamp))  # the last record's: records are written in time order
        self.read_any = True
        for kind_name, count in skipped.items():
            self.run.skip(kind_name, count)
        if started is None:
            self.run.problems.append(f"{path}: no start record (the file does not begin as SwanLab writes it); "
                                     "the run's name, tags and start time are unknown from it")
        if end is None:  # no finish record: still written (SwanLab flushes at the end), or its process was killed
            try:
                self._activity(path.stat().st_mtime)
            except OSError:
                pass
        self._session_done(s, started, start, end)
        self._files(s.folder)

    def _save(self, s: Session, save: Any) -> None:
        from swanlab.proto.swanlab.save.v1.save_pb2 import SaveType

        if save.type != SaveType.SAVE_TYPE_CUSTOM or not save.name:
            return  # config, metadata (read from files/ by _files), requirements, conda: the environment
        local = s.folder / "files" / Path(*save.name.replace("\\", "/").split("/"))
        path = local if local.is_file() else Path(save.source_path) if save.source_path else local
        if not path.is_file():
            self.run.problems.append(f"{local}: file saved with run.save({save.name!r}) is missing "
                                     f"(nor at {save.source_path or 'its source path'}); not ingested")
            return
        name = re.sub(r"[/\\=%]", "_", save.name).lstrip(".") or "file"
        self.saved[save.name] = ExternalArtifact(path=path, name=name, type="swanlab-file",
                                                 metadata={"swanlab_name": save.name})

    def _texts(self, s: Session, m: Any, t_us: int) -> None:
        for item in m.value.items:
            if item.HasField("payload"):
                text = item.payload.decode("utf-8", errors="replace")
            else:
                f = s.folder / "media" / "text" / item.filename
                try:
                    text = f.read_bytes().decode("utf-8", errors="replace")
                except OSError as exc:
                    self.run.problems.append(f"{f}: text of {m.key!r} at step {m.step} unreadable "
                                             f"({exc.strerror or exc}); not ingested")
                    continue
            self.run.add_sample(int(m.step), None, text, split=m.key,
                                extra={"caption": item.caption} if item.caption else None, ts_us=t_us)

    def _echarts(self, s: Session, m: Any, t_us: int, skipped: dict[str, int]) -> None:
        for item in m.value.items:
            f = s.folder / "media" / "echarts" / item.filename
            try:
                option = json.loads(item.payload if item.HasField("payload") else f.read_bytes())
            except (OSError, ValueError):
                option = None
            bins = _histogram_bins(option)
            if bins is None:
                skipped["echarts"] = skipped.get("echarts", 0) + 1
                continue
            edges, counts = bins
            self.run.add_histogram(int(m.step), m.key, counts=counts, edges=edges, ts_us=t_us)

    # ------------------------------------------------------------------ dashboard layout
    def _read_dashboard(self, s: Session) -> None:
        from urllib.parse import quote

        assert s.db is not None
        exp, tags = _dashboard_rows(s.db, s.folder.name, self.run.problems)
        if exp is None:
            return
        logs = s.folder / "logs"
        seen_folders = set()
        for tag in tags:
            name = str(tag.get("name") or "")
            folder = str(tag.get("folder") or "") or quote(name, safe="")
            seen_folders.add(folder)
            kind = str(tag.get("type") or "")
            for log in sorted((logs / folder).glob("*.log")):
                self._dashboard_log(log, name, kind)
        for extra in _subdirs(logs):  # series the dashboard has no tag for (charts it does not draw)
            if extra.name in seen_folders:
                continue
            for log in sorted(extra.glob("*.log")):
                try:
                    n = sum(1 for line in _lines(log) if line.strip())
                    self._tick_log(log.stat().st_size)
                except OSError:
                    n = 1
                self.run.skip("untagged dashboard series", n)
        self.read_any = True
        started = _iso_seconds(exp.get("create_time"))
        status = _DASHBOARD_STATES.get(_int(exp.get("status")), RunStatus.CRASHED)
        ended = _iso_seconds(exp.get("finish_time")) if status != RunStatus.RUNNING else None
        self._activity(_iso_seconds(exp.get("update_time")))
        start: dict[str, Any] = {
            "project": exp.get("_project") or "", "name": exp.get("name") or "",
            "description": exp.get("description") or "", "tags": [], "group": "", "job_type": ""}
        self._session_done(s, started, start, (status, ended, None) if status != RunStatus.RUNNING else None,
                           layout="dashboard")
        self._files(s.folder)

    def _dashboard_log(self, log: Path, key: str, kind: str) -> None:
        try:
            size = log.stat().st_size
            lines = _lines(log)
        except OSError as exc:
            self.run.problems.append(f"{log}: unreadable ({exc.strerror or exc}); its points are not ingested")
            return
        bad = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                step = int(row["index"])
                t = _iso_seconds(row.get("create_time"))
                t_us = _iso_us(row.get("create_time"))
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            self._activity(t)
            data = row.get("data")
            if kind == "line":
                self.steps.append(step)
                self.keys.append(key)
                self.values.append(_float(data))
                self.ts.append(t_us)
            elif kind == "text":
                more = row.get("more") or []
                for j, text in enumerate(data if isinstance(data, list) else [data]):
                    cap = more[j].get("caption") if j < len(more) and isinstance(more[j], dict) else None
                    self.run.add_sample(step, None, None if text is None else str(text), split=key,
                                        extra={"caption": cap} if cap else None, ts_us=t_us)
            else:
                medium = kind if kind in _MEDIA.values() else f"unknown media {kind or '?'}"
                self.run.skip(medium, len(data) if isinstance(data, list) else 1)
        if bad:
            self.run.problems.append(f"{log}: {bad} line(s) are not whole JSON records (a cut or damaged "
                                     "file); the others are ingested")
        self._tick_log(size)

    # ------------------------------------------------------------------ both layouts
    def _session_done(self, s: Session, started: float | None, start: dict,
                      end: tuple[str, float | None, str | None] | None, *, layout: str = "records") -> None:
        self.starts.append(start)
        self.ends.append(end or (RunStatus.RUNNING, None, None))
        if started is not None:
            self.started.append(started)
            self._activity(started)
        self.sessions.append({"folder": s.folder.name, "layout": layout})

    def _files(self, folder: Path) -> None:
        """The session's config and system metadata (a later session's win)."""
        self.config.update(self._config(folder))
        meta = _json_file(folder / "files" / "swanlab-metadata.json", self.run.problems)
        if isinstance(meta, dict):
            self.run.source_meta["metadata"] = meta

    def _config(self, folder: Path) -> dict:
        f = folder / "files" / "config.yaml"
        if not f.is_file():
            return {}
        import yaml

        try:
            content = yaml.safe_load(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self.run.problems.append(f"{f}: not readable YAML ({str(exc).splitlines()[0][:200]}); its config "
                                     "is not ingested")
            return {}
        if not isinstance(content, dict):
            return {}
        items = sorted(content.items(), key=lambda kv: _int(kv[1].get("sort")) if isinstance(kv[1], dict) else 0)
        return {str(k): v["value"] if isinstance(v, dict) and "value" in v else v for k, v in items}

    def finish(self) -> ExternalRun:
        run = self.run
        if not self.read_any:
            raise SwanlabFileError("; ".join(run.problems) or f"{run.location}: nothing of the run could be read")
        if self.steps:
            run.add_points(self.steps, self.keys, self.values, self.ts)

        def latest(field: str) -> Any:  # the latest session's value, else an earlier one's
            return next((st[field] for st in reversed(self.starts) if st.get(field)), None)

        run.project = latest("project") or "swanlab"
        run.name = latest("name")
        run.notes = latest("description")
        run.tags = list(latest("tags") or [])
        run.group = latest("group")
        run.job_type = latest("job_type")
        run.created_at = min(self.started, default=None)
        status, ended, error = self.ends[-1]
        run.status = status
        run.ended_at = ended if status != RunStatus.RUNNING else None
        run.heartbeat_at = self.last_activity
        run.config = self.config
        meta = run.source_meta.get("metadata") or {}
        host = (meta.get("runtime") or {}).get("hostname") if isinstance(meta, dict) else None
        run.host = host if isinstance(host, str) and host else None
        run.source_meta["sessions"] = self.sessions
        for field in ("workspace", "color"):
            v = latest(field)
            if v:
                run.source_meta[field] = v
        if error:
            run.source_meta["error"] = error
        run.artifacts.extend(self.saved.values())
        return run


# ---------------------------------------------------------------------------- SwanLab's reader
def _records(path: Path, problems: list[str]) -> Iterator[tuple[Any, int]]:
    """The whole records of one run file, read with SwanLab's ``DataStoreReader``, each with the
    bytes it took. A file of another version or not SwanLab's raises :class:`SwanlabFileError`;
    a cut or corrupt tail ends the records there, with a problem naming the file."""
    from google.protobuf.message import DecodeError
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreError, DataStoreReader

    size = path.stat().st_size
    reader = DataStoreReader()
    try:
        reader.open(path)
    except DataStoreError as exc:
        reason = str(exc)
        version = re.search(r"version: (\d+)", reason)
        if version:
            raise SwanlabFileError(
                f"{path}: SwanLab run-file format version {version.group(1)}; this reader reads version "
                f"{RECORD_VERSION} (SwanLab 0.10), and SwanLab keeps no compatibility between them (0.7 wrote "
                "another format): not ingested") from None
        raise SwanlabFileError(f"{path}: not a SwanLab run file ({reason})") from None
    except AssertionError:
        raise SwanlabFileError(f"{path}: shorter than SwanLab's 7-byte header (the session was stopped before "
                               "SwanLab wrote anything)") from None
    # The reader's offset after each whole record: at the end of the file, less than its size
    # means the file ends inside a record split over blocks (``scan`` returns None there as at
    # a clean end). Without that attribute (another SDK layout) the check is skipped.
    track = isinstance(getattr(reader, "_index", None), int)
    scan = reader.scan
    n = end = 0
    try:
        while True:
            try:
                raw = scan()
            except Exception as exc:  # noqa: BLE001 - DataStoreError, or SwanLab's asserts on a cut file
                problems.append(f"{path}: cut or damaged after {n} whole records ({exc or type(exc).__name__}); "
                                "the records before are ingested, nothing after")
                return
            if raw is None:
                if track and end < size:
                    problems.append(f"{path}: ends inside a record after {n} whole records (a cut file: its "
                                    "process was killed or the copy stopped); the whole records are ingested")
                return
            if track:
                end = reader._index
            rec = Record()
            try:
                rec.ParseFromString(raw)
            except DecodeError as exc:
                problems.append(f"{path}: record {n + 1} is not a SwanLab record ({exc}); left out")
                continue
            n += 1
            yield rec, len(raw) + 7
    finally:
        reader.close()


def _ts_seconds(t: Any) -> float | None:
    if not (t.seconds or t.nanos):
        return None
    return t.seconds + t.nanos / 1e9


def _histogram_bins(option: Any) -> tuple[list[float], list[float]] | None:
    """(edges, counts) of an ECharts option that is a histogram: one bar series over contiguous
    ``lo..hi`` categories (how ``trackstore sync --to swanlab`` draws one); else None."""
    if not isinstance(option, dict):
        return None
    series, axis = option.get("series"), option.get("xAxis")
    if isinstance(axis, list):
        axis = axis[0] if len(axis) == 1 else None
    if not (isinstance(series, list) and len(series) == 1 and isinstance(series[0], dict)
            and series[0].get("type") == "bar" and isinstance(axis, dict)):
        return None
    labels, data = axis.get("data"), series[0].get("data")
    if not (isinstance(labels, list) and isinstance(data, list) and labels and len(labels) == len(data)):
        return None
    edges: list[float] = []
    counts: list[float] = []
    for label, v in zip(labels, data):
        parts = str(label).split("..")
        if len(parts) != 2:
            return None
        try:
            lo, hi = float(parts[0]), float(parts[1])
        except ValueError:
            return None
        if edges and lo != edges[-1] or not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
            return None
        if not edges:
            edges.append(lo)
        edges.append(hi)
        v = v.get("value") if isinstance(v, dict) else v
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        counts.append(float(v))
    return edges, counts


# ---------------------------------------------------------------------------- dashboard layout
def _dashboard_rows(db: Path, folder_name: str, problems: list[str]) -> tuple[dict | None, list[dict]]:
    """The dashboard database's experiment row for a run folder (with its project's name as
    ``_project``) and its tags, read-only; (None, []) with a problem if that fails."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=DB_TIMEOUT_S)
    except sqlite3.Error as exc:
        problems.append(f"{db}: SwanLab's dashboard database cannot be opened ({exc}); {folder_name} not ingested")
        return None, []
    try:
        con.row_factory = sqlite3.Row
        row = con.execute("SELECT * FROM experiment WHERE run_id = ?", (folder_name,)).fetchone()
        if row is None:
            problems.append(f"{db}: has no experiment for {folder_name}; its dashboard files are not ingested")
            return None, []
        exp = dict(row)
        project = con.execute("SELECT name FROM project WHERE id = ?", (exp.get("project_id"),)).fetchone()
        exp["_project"] = project[0] if project else None
        tags = [dict(r) for r in con.execute("SELECT * FROM tag WHERE experiment_id = ?", (exp["id"],))]
        tags.sort(key=lambda t: (_int(t.get("sort")), _int(t.get("id"))))
        return exp, tags
    except sqlite3.Error as exc:
        problems.append(f"{db}: SwanLab's dashboard database cannot be read ({exc}; locked by a writer, or "
                        f"damaged); {folder_name} not ingested")
        return None, []
    finally:
        con.close()


def _lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", errors="replace").splitlines()


def _json_file(path: Path, problems: list[str]) -> Any:
    try:
        return json.loads(path.read_bytes()) if path.is_file() and path.stat().st_size else None
    except (OSError, ValueError) as exc:
        problems.append(f"{path}: not readable JSON ({exc}); left out")
        return None


def _iso(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)  # swanboard writes UTC


def _iso_seconds(text: Any) -> float | None:
    t = _iso(text)
    return None if t is None else t.timestamp()


def _iso_us(text: Any) -> int:
    t = _iso(text)
    if t is None:
        raise ValueError(f"not an ISO time: {text!r}")
    delta = t - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan

