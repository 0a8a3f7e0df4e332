"""Runs brought in from other trackers: one writer for whatever a source reader found.

A source reader (``trackstore.sync.ingest``: wandb offline folders, SwanLab logdirs, MLflow
stores, TensorBoard event files) fills an :class:`ExternalRun` with what it read, in the
store's own terms; :func:`write_external_run` makes it an ordinary run of the store. What this
module promises:

* **One run per source run, named after it.** The run id is :func:`derive_run_id` of the
  source's own id (``wandb-<id>``, ``mlflow-<id>``, ``swanlab-<id>``, ``tb-<name>-<hash>``), and
  ``run.json`` records where it came from (``ingested``: source, source id, location, first and
  last ingest). A run id that exists in the project but was not ingested from that same source
  run is refused (:class:`IngestConflictError`), never merged.
* **Ingesting again adds only what is new.** Per kind, the incoming rows are compared with the
  rows the run holds, by content (every column but ``writer`` and ``seq``; artifact rows by
  name, version and file), as multisets: a source read twice adds nothing, a source that grew
  adds its new rows, and a row the source really logged twice is kept twice.
* **New rows are a new writer.** Each pass that adds rows writes them under a fresh writer id
  with ``seq`` dense from 0, in parts of at most :data:`PART_ROWS` rows in the source's order
  (as a writer flushes them; ``trackstore compact`` clusters them by key later), so ``sync``
  sends exactly the new rows, once.
* **Nothing half-visible.** ``run.json`` is written first (atomically), then each part
  atomically (:func:`trackstore.store.parts.write_part`): a pass killed at any moment leaves a
  valid run, and the next pass brings the rest. The store's maintenance lock is held while one
  run is written, so gc and compaction never see a run half-ingested.
* **Nothing dropped silently.** What the source has but the store cannot hold yet (images,
  audio, video, unknown media) is counted per kind in :attr:`ExternalRun.unmapped`; what could
  not be read (a truncated file, a locked database) is named in :attr:`ExternalRun.problems`.
  Both are returned in the :class:`IngestResult` and recorded in ``run.json``.
* ``dry_run=True`` computes the same plan (rows new per kind) and writes nothing.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InvalidNameError, InvalidValueError, TrackstoreError, UsageError
from ..store.layout import RunPaths, run_paths
from ..store.names import MAX_RUN_ID_CHARS, validate_key, validate_project, validate_run_id
from ..store.vocab import RUN_STATUSES, Kind, RunStatus

# The sources, by the name `trackstore ingest --from` takes, and the prefix of their run ids.
SOURCE_PREFIX = {"wandb": "wandb", "swanlab": "swanlab", "mlflow": "mlflow", "tensorboard": "tb"}
PART_ROWS = 1_000_000  # rows per part written by one pass (larger passes write several parts)
_ROW_KINDS = (Kind.METRICS, Kind.SAMPLES, Kind.SPANS, Kind.HISTOGRAMS)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class IngestConflictError(UsageError):
    """The run id an ingest would write exists already and is not that same source run."""


def derive_run_id(source: str, source_id: str) -> str:
    """The store's run id for a source's run: ``<prefix>-<source id>``, made path-safe.

    The source id is kept as it is when it is made of letters, digits, ``.``, ``_`` and ``-``
    and fits; otherwise its unsafe characters become ``_`` and 8 hex digits of its SHA-256 are
    appended, so two different source ids never meet in one run id.
    """
    if source not in SOURCE_PREFIX:
        raise UsageError(f"unknown ingest source {source!r}; one of {', '.join(SOURCE_PREFIX)}")
    if not isinstance(source_id, str) or not source_id:
        raise InvalidValueError(f"a {source} run needs a non-empty id, got {source_id!r}")
    prefix = SOURCE_PREFIX[source] + "-"
    safe = _UNSAFE.sub("_", source_id)
    if safe == source_id and len(prefix) + len(safe) <= MAX_RUN_ID_CHARS:
        return validate_run_id(prefix + safe)
    digest = hashlib.sha256(source_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    room = MAX_RUN_ID_CHARS - len(prefix) - len(digest) - 1
    return validate_run_id(f"{prefix}{safe[:room].strip('._-') or 'run'}-{digest}")


@dataclass
class ExternalArtifact:
    """A file or folder the source kept locally, to store as an artifact version."""

    path: Path
    name: str
    type: str = "file"
    step: int | None = None
    metadata: dict = field(default_factory=dict)


@dataclass
class ExternalRun:
    """What a source reader found of one run, in the store's terms.

    Times are Unix seconds (floats); row timestamps are integer microseconds since the epoch
    (UTC). ``status`` is one of the store's statuses; a run the source still writes is
    ``running`` with ``heartbeat_at`` its last activity, so readers call it crashed once that is
    older than the store's staleness limit, as they do for a native run whose writer vanished.
    """

    source: str
    source_id: str
    location: str
    project: str
    name: str | None = None
    status: str = RunStatus.FINISHED
    created_at: float | None = None
    ended_at: float | None = None
    heartbeat_at: float | None = None
    config: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    notes: str | None = None
    group: str | None = None
    job_type: str | None = None
    host: str | None = None
    source_meta: dict = field(default_factory=dict)
    artifacts: list[ExternalArtifact] = field(default_factory=list)
    unmapped: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    run_id: str = ""
    _points: list = field(default_factory=list, repr=False)
    _sample_counts: Counter = field(default_factory=Counter, repr=False)
    _rows: dict = field(default_factory=lambda: {k: [] for k in _ROW_KINDS if k != Kind.METRICS}, repr=False)

    def __post_init__(self) -> None:
        if not self.run_id:
            self.run_id = derive_run_id(self.source, self.source_id)

    # ------------------------------------------------------------------ what readers add
    def add_points(self, step: Sequence[int] | Any, key: Sequence[str] | Any, value: Sequence[float] | Any,
                   ts_us: Sequence[int] | Any) -> None:
        """Scalar points as four equal-length columns: lists, numpy arrays, Arrow arrays, or (the
        fastest, no conversion per point) ``array.array`` of ``"q"`` steps and times and ``"d"`` values."""
        import pyarrow as pa

        n = len(step)
        if not (len(key) == len(value) == len(ts_us) == n):
            raise InvalidValueError("add_points: step, key, value and ts_us must have the same length")
        if n:
            self._points.append((_column(step, pa.int64(), "q"), pa.array(key, pa.string()),
                                 _column(value, pa.float64(), "d"), _column(ts_us, pa.int64(), "q")))

    def add_point(self, step: int, key: str, value: float | None, ts_us: int) -> None:
        self.add_points([step], [key], [value], [ts_us])

    def add_sample(self, step: int, input: Any, output: Any, *, score: float | None = None, split: str = "val",
                   sample_index: int | None = None, extra: Mapping[str, Any] | None = None, ts_us: int) -> None:
        """One sample row (a table row, a text). Non-text input/output are stored as JSON."""
        from ..records.samples import clean_text, encode_json

        json_fields = []
        cells = {}
        for name, v in (("input", input), ("output", output)):
            if v is None or isinstance(v, str):
                cells[name] = None if v is None else clean_text(v)
            else:
                cells[name] = encode_json(v)
                json_fields.append(name)
        if sample_index is None:  # counted per (step, split) in the source's order, as log_samples does
            sample_index = self._sample_counts[(int(step), split)]
        self._sample_counts[(int(step), split)] = max(self._sample_counts[(int(step), split)], sample_index + 1)
        self._rows[Kind.SAMPLES].append({
            "step": int(step), "split": split, "sample_index": int(sample_index), **cells,
            "score": None if score is None else float(score), "extra": encode_json(dict(extra)) if extra else None,
            "json_fields": json_fields or None, "ts": int(ts_us),
        })

    def add_histogram(self, step: int, key: str, *, counts: Sequence[float], edges: Sequence[float], ts_us: int,
                      min: float | None = None, max: float | None = None, mean: float | None = None,
                      std: float | None = None) -> None:
        """One histogram: ``len(edges) == len(counts) + 1``."""
        counts = [float(c) for c in counts]
        edges = [float(e) for e in edges]
        if len(edges) != len(counts) + 1:
            raise InvalidValueError(f"histogram {key!r} at step {step}: {len(edges)} edges for {len(counts)} bins")
        self._rows[Kind.HISTOGRAMS].append({
            "step": int(step), "key": key, "edges": edges, "counts": counts,
            "min": edges[0] if min is None and edges else min, "max": edges[-1] if max is None and edges else max,
            "mean": mean, "std": std, "count": int(round(sum(counts))), "nan_count": None, "inf_count": None,
            "ts": int(ts_us),
        })

    def add_span(self, row: Mapping[str, Any]) -> None:
        """One span row in the columns of ``trackstore.store.schema.SPANS`` (``ts`` in microseconds)."""
        self._rows[Kind.SPANS].append(dict(row))

    def skip(self, kind: str, count: int = 1) -> None:
        """Count ``count`` records of ``kind`` (``image``, ``audio``, ...) the store cannot hold."""
        self.unmapped[kind] += count

    # ------------------------------------------------------------------ what the writer takes
    def points_count(self) -> int:
        return sum(len(c[0]) for c in self._points)

    def table(self, kind: str):
        """The rows of ``kind`` read so far, as an Arrow table in the kind's columns (no writer, seq)."""
        import pyarrow as pa

        from ..store import schema

        cols = [f for f in schema.ROWS[kind] if f.name not in schema.ROW_ID_COLUMNS]
        target = pa.schema(cols)
        if kind == Kind.METRICS:
            if not self._points:
                return target.empty_table()
            step, key, value, ts = (pa.concat_arrays([c[i] for c in self._points]) for i in range(4))
            return pa.Table.from_arrays([step, key, value, ts.cast(schema.TS_TYPE)], schema=target)
        rows = self._rows[kind]
        if not rows:
            return target.empty_table()
        ts_field = target.field("ts")
        plain = target.set(target.get_field_index("ts"), pa.field("ts", pa.int64(), nullable=False))
        table = pa.Table.from_pylist(rows, schema=plain)
        return table.set_column(table.schema.get_field_index("ts"), ts_field, table.column("ts").cast(schema.TS_TYPE))


def _column(values: Any, type_: Any, code: str):
    """An Arrow array of ``values``; a typed ``array.array`` or numpy array is copied once, whole."""
    import array

    import numpy as np
    import pyarrow as pa

    from ..store.arrays import from_numpy

    if isinstance(values, array.array) and values.typecode == code:
        return from_numpy(np.frombuffer(values, dtype=np.dtype(code)).copy(), type_)
    if isinstance(values, np.ndarray) and values.dtype == np.dtype(code) and values.flags.c_contiguous:
        return from_numpy(values.copy(), type_)
    return pa.array(values, type_)


@dataclass
class IngestResult:
    """What one run's ingest did (or, with ``dry_run``, would do)."""

    project: str
    run_id: str
    source: str
    source_id: str
    created: bool
    added: dict[str, int]
    incoming: dict[str, int]
    unmapped: dict[str, int]
    problems: list[str]
    dry_run: bool = False
    artifacts_added: int = 0

    @property
    def changed(self) -> bool:
        return self.created or any(self.added.values()) or bool(self.artifacts_added)


# ---------------------------------------------------------------------------- writing
def write_external_run(root: str | Path, run: ExternalRun, *, dry_run: bool = False) -> IngestResult:
    """Make ``run`` a run of the store at ``root``, or bring it up to date (module docstring)."""
    from ..store import locks

    validate_project(run.project)
    validate_run_id(run.run_id)
    paths = run_paths(Path(root), run.project, run.run_id)
    tables = {kind: _valid_rows(run, kind) for kind in _ROW_KINDS}
    incoming = {kind: t.num_rows for kind, t in tables.items()}
    if dry_run:
        existing = _existing_meta(paths, run)
        new = {kind: _new_rows(paths, kind, t) if existing else t for kind, t in tables.items()}
        return _result(run, existing is None, {k: t.num_rows for k, t in new.items()}, incoming, dry_run=True)
    Path(root).mkdir(parents=True, exist_ok=True)
    lock = locks.acquire_maintenance(root, job="ingest", runs=[f"{run.project}/{run.run_id}"])
    try:
        existing = _existing_meta(paths, run)
        new = {kind: _new_rows(paths, kind, t) if existing else t for kind, t in tables.items()}
        _write_meta(paths, run, existing, _last_step(tables))
        writer = None
        for kind, table in new.items():
            if table.num_rows:
                writer = writer or _writer_id(run)
                _write_rows(paths, kind, table, writer)
        artifacts_added = _write_artifacts(paths, run, writer)
    finally:
        lock.release()
    return _result(run, existing is None, {k: t.num_rows for k, t in new.items()}, incoming,
                   artifacts_added=artifacts_added)


def _result(run: ExternalRun, created: bool, added: dict, incoming: dict, *, dry_run: bool = False,
            artifacts_added: int = 0) -> IngestResult:
    return IngestResult(project=run.project, run_id=run.run_id, source=run.source, source_id=run.source_id,
                        created=created, added={str(k): v for k, v in added.items()},
                        incoming={str(k): v for k, v in incoming.items()}, unmapped=dict(run.unmapped),
                        problems=list(run.problems), dry_run=dry_run, artifacts_added=artifacts_added)


def _existing_meta(paths: RunPaths, run: ExternalRun) -> dict | None:
    """The run's run.json if it is this source run's earlier ingest; None if the run is new."""
    from ..store import meta as _meta

    if not paths.dir.exists():
        return None
    meta = _meta.read_run_json(paths) if paths.run_file.exists() else None
    if meta is None:
        if any(paths.dir.iterdir()):
            raise IngestConflictError(f"{paths.dir} exists but has no readable run.json; run `trackstore doctor`")
        return None
    origin = meta.get("ingested")
    if not (isinstance(origin, dict) and origin.get("source") == run.source
            and origin.get("source_id") == run.source_id):
        was = (f"ingested from {origin.get('source')} run {origin.get('source_id')!r}" if isinstance(origin, dict)
               else "logged by trackstore itself")
        raise IngestConflictError(
            f"run {run.run_id} of project {run.project!r} exists and was {was}, not {run.source} run "
            f"{run.source_id!r}; nothing ingested (ingest it into another project with --project)")
    return meta


def _writer_id(run: ExternalRun) -> str:
    from ..store.layout import new_writer_id

    return f"ingest-{new_writer_id()}"


def _valid_rows(run: ExternalRun, kind: str):
    """The run's rows of ``kind``, minus those whose key cannot be stored (reported as problems)."""
    table = run.table(kind)
    if kind not in (Kind.METRICS, Kind.HISTOGRAMS) or not table.num_rows:
        return table
    import pyarrow.compute as pc

    bad = []
    for key in pc.unique(table.column("key")).to_pylist():
        try:
            validate_key(key)
        except (InvalidNameError, InvalidValueError) as exc:
            bad.append(key)
            run.problems.append(f"{kind} key {str(key)[:80]!r} left out: {exc}")
    if bad:
        table = table.filter(pc.invert(pc.is_in(table.column("key"), value_set=_pa().array(bad, _pa().string()))))
    return table


def _pa():
    import pyarrow as pa

    return pa


def _identity_columns(kind: str) -> list[str]:
    from ..store import schema

    if kind == Kind.ARTIFACTS:
        return ["name", "version", "logical_path"]
    return [n for n in schema.ROWS[kind].names if n not in schema.ROW_ID_COLUMNS]


def _new_rows(paths: RunPaths, kind: str, incoming):
    """The rows of ``incoming`` the run does not hold yet, compared as multisets by content."""
    if not incoming.num_rows:
        return incoming
    from ..read.reader import read_kind

    cols = _identity_columns(kind)
    held = read_kind(paths, kind, columns=cols, skip_corrupt=True)
    if not held.num_rows:
        return incoming
    import duckdb

    q = ", ".join(f'"{c}"' for c in cols)
    on = " AND ".join(f'n."{c}" IS NOT DISTINCT FROM o."{c}"' for c in cols)
    con = duckdb.connect()
    try:
        con.register("inc", incoming.append_column("_i", _pa().array(range(incoming.num_rows), _pa().int64())))
        con.register("held", held.select(cols))
        picked = con.sql(f"""
            WITH n AS (SELECT {q}, _i, row_number() OVER (PARTITION BY {q} ORDER BY _i) AS _rn FROM inc),
                 o AS (SELECT {q}, count(*) AS _c FROM held GROUP BY ALL)
            SELECT n._i FROM n LEFT JOIN o ON {on} WHERE o._c IS NULL OR n._rn > o._c ORDER BY n._i
        """).to_arrow_table()
    finally:
        con.close()
    return incoming.take(picked.column("_i"))


def _write_rows(paths: RunPaths, kind: str, table, writer: str) -> None:
    import numpy as np

    from ..store.arrays import constant_strings, from_numpy
    from ..store.layout import part_file_name
    from ..store.parts import conform, write_part

    pa = _pa()
    table = table.append_column("writer", constant_strings(writer, table.num_rows))
    table = table.append_column("seq", from_numpy(np.arange(table.num_rows, dtype=np.int64), pa.int64()))
    table = conform(table, kind)
    for first in range(0, table.num_rows, PART_ROWS):
        chunk = table.slice(first, PART_ROWS)
        write_part(paths.kind_dir(kind) / part_file_name(writer, first), chunk, kind)


def _last_step(tables: dict) -> int | None:
    """The largest step the source logged (metrics, samples, histograms): run.json's ``last_step``."""
    import pyarrow.compute as pc

    steps = [pc.max(t.column("step")).as_py() for kind, t in tables.items()
             if t.num_rows and kind != Kind.SPANS]
    steps = [s for s in steps if s is not None]
    return max(steps) if steps else None


def _write_meta(paths: RunPaths, run: ExternalRun, existing: dict | None, last_step: int | None) -> None:
    from ..store import meta as _meta
    from ..store.clock import iso
    from ..store.text import escape_surrogates
    from ..store.values import json_safe

    now = time.time()
    origin = dict((existing or {}).get("ingested") or {})
    origin.update(source=run.source, source_id=run.source_id, location=run.location,
                  first_at=origin.get("first_at") or iso(now), last_at=iso(now))
    if run.source_meta:
        origin["meta"] = json_safe(run.source_meta)
    if run.unmapped:
        origin["unmapped"] = dict(sorted(run.unmapped.items()))
    else:
        origin.pop("unmapped", None)
    if run.problems:
        origin["problems"] = [p[:500] for p in run.problems[:50]]
    else:
        origin.pop("problems", None)
    text = [None if t is None else escape_surrogates(str(t)) for t in (run.name, run.notes, run.group, run.job_type)]
    known_steps = [s for s in ((existing or {}).get("last_step"), last_step) if isinstance(s, int)]
    meta = {
        **(existing or {}),
        "format_version": _meta.META_VERSION,
        "project": run.project,
        "run_id": run.run_id,
        "name": text[0] or run.run_id,
        "status": run.status if run.status in RUN_STATUSES else RunStatus.CRASHED,
        "created_at": iso(run.created_at if run.created_at is not None else now),
        "ended_at": iso(run.ended_at) if run.status != RunStatus.RUNNING else None,
        "heartbeat_at": iso(run.heartbeat_at) if run.heartbeat_at is not None else None,
        "host": run.host,
        "pid": None,
        "config": json_safe(run.config),
        "summary": json_safe(run.summary),
        "last_step": max(known_steps) if known_steps else None,
        "tags": [escape_surrogates(str(t)) for t in run.tags],
        "notes": text[1],
        "group": text[2],
        "job_type": text[3],
        "ingested": origin,
    }
    _meta.write_run_json(paths, meta)


class _ArtifactSink:
    """The little of a run that :func:`trackstore.records.artifacts.log_artifact` needs
    (:class:`trackstore.records.sink.RecordSink`)."""

    def __init__(self, paths: RunPaths, writer: str):
        self._paths, self._writer = paths, writer
        self._state: dict = {}

    id = property(lambda self: self._paths.run_id)
    project = property(lambda self: self._paths.project)
    paths = property(lambda self: self._paths)
    writer_id = property(lambda self: self._writer)
    step = property(lambda self: 0)
    finished = property(lambda self: False)
    flush_interval = property(lambda self: 1.0)

    def append(self, kind: str, row: dict) -> None:
        pass  # the rows are taken from every version, new or not (manifest_rows)

    def flush(self) -> bool:
        return True

    def on_finish(self, callback) -> None:  # an ingest has no live run to finish
        pass

    def record_state(self, key, factory):
        return self._state.setdefault(key, factory())


def _write_artifacts(paths: RunPaths, run: ExternalRun, writer: str | None) -> int:
    """Store the source's local files as artifact versions (content-addressed: again is a no-op).

    Every version's manifest rows are offered, new or not, and only those the run lacks are
    written: a pass killed between a version's files and its rows is completed by the next."""
    if not run.artifacts:
        return 0
    from ..records.artifacts import log_artifact, manifest_rows

    sink = _ArtifactSink(paths, writer or _writer_id(run))
    added = 0
    rows: list[dict] = []
    for art in run.artifacts:
        try:
            version = log_artifact(sink, art.path, name=art.name, type=art.type, metadata=art.metadata,
                                   step=art.step if art.step is not None else 0)
        except TrackstoreError as exc:
            run.problems.append(f"artifact {str(art.path)!r} left out: {exc}")
            continue
        if version is None:
            run.problems.append(f"artifact {str(art.path)!r} could not be copied")
            continue
        added += version.new
        rows.extend(manifest_rows(version))
    if rows:
        import pyarrow as pa

        from ..store import schema

        cols = [f for f in schema.ROWS[Kind.ARTIFACTS] if f.name not in schema.ROW_ID_COLUMNS]
        table = _new_rows(paths, Kind.ARTIFACTS, pa.Table.from_pylist(rows, schema=pa.schema(cols)))
        if table.num_rows:
            _write_rows(paths, Kind.ARTIFACTS, table, sink.writer_id)
    return added


def status_from(text: str | None, *, running_words: Iterable[str] = ("running",)) -> str:
    """A source's run state (``FINISHED``, ``killed``, ``RUNNING``...) as one of the store's statuses."""
    t = (text or "").strip().lower()
    if t in ("finished", "success", "completed", "done", "ok"):
        return RunStatus.FINISHED
    if t in ("failed", "error", "errored"):
        return RunStatus.FAILED
    if t in tuple(running_words) or t in ("scheduled", "pending"):
        return RunStatus.RUNNING
    return RunStatus.CRASHED  # killed, crashed, aborted, unknown
