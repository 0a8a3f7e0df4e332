"""Finding runs in a store: listing them with their effective status, and resolving references.

A run reference (what users type after ``trackstore show``) is a full run id, its handle (the
short form listings show: :mod:`trackstore.read.refs`), a unique prefix of an id, or
``project/name`` (``project/run_id`` and ``project/handle`` work too). Ambiguity is an error
that lists the candidates, never a guess; a reference that names nothing is an error that
suggests the closest runs.

What a run shows is what can be read, honestly:

* ``run.json`` is read through :func:`trackstore.store.meta.load_run_json`: a value readers cannot
  use (an out-of-range step, a wrong type, text that is not Unicode) is left out, reads as
  missing, and a :class:`~trackstore.store.meta.RunJsonWarning` names the file. A run.json that
  cannot be parsed at all hides its run from sync and gc (nothing is sent or deleted on
  unknown metadata); the views and ``show`` list it with what its folder and writer files
  tell (``unreadable=True``). ``trackstore doctor`` reports both.
* For a ``crashed`` run (its writer died; its run.json stopped being rewritten up to a
  heartbeat before) ``last_step`` and ``ended_at`` are derived from the data on disk: the
  largest ``step`` and newest ``ts`` in the part files' footer statistics (no row is read),
  combined with what run.json and the heartbeats recorded (docs/format.md section 5).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import AmbiguousRunError, RunNotFoundError
from ..store import meta as _meta
from ..store.catalog import column_max, column_max_time
from ..store.clock import iso, parse_iso, parse_time
from ..store.layout import RunPaths, resolve_root
from ..store.meta import RunJsonWarning
from ..store.vocab import Kind, RunStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..store.catalog import Catalog, MetricFacts, RunEntry
    from .alerts import RunAlerts

RUN_COLUMNS = (
    "project", "run_id", "name", "status", "created_at", "ended_at", "updated_at", "last_step",
    "host", "user", "tags", "notes", "group", "job_type", "config", "summary", "exit_code", "error",
)


class RunInfo:
    """One run as readers see it: metadata from run.json plus the derived status.

    Built from the store's catalog (:mod:`trackstore.store.catalog`) by :func:`list_runs` and
    :func:`resolve_run`: ``meta`` (every usable field of run.json) and ``writers`` are then read
    only when asked for, and listings use the few fields they show.
    """

    def __init__(self, paths: RunPaths, meta: dict | None, status: str, writers: list[dict] | None = None,
                 problems: list[str] | None = None, unreadable: bool = False, *,
                 entry: RunEntry | None = None, extent: DataExtent | None = None):
        self.paths = paths
        self._meta = meta
        self.status = status
        self._writers = writers
        self.problems = problems if problems is not None else []  # what of run.json could not be read
        self.unreadable = unreadable  # run.json could not be parsed at all: meta is empty
        self._entry = entry
        self._extent = extent
        self._extent_known = extent is not None
        self._facts: Any = False  # MetricFacts | None once asked for (metric_facts)

    def __repr__(self) -> str:
        return f"RunInfo({self.project}/{self.run_id}, {self.status})"

    @property
    def meta(self) -> dict:
        if self._meta is None:
            self._meta = self._entry.meta if self._entry is not None else {}
        return self._meta

    def meta_json(self) -> str:
        """:attr:`meta` as JSON text: from the catalog as kept, without parsing it, when it was
        not parsed yet."""
        if self._meta is None and self._entry is not None:
            return self._entry.meta_json()
        return json.dumps(self.meta, ensure_ascii=False, allow_nan=True, separators=(",", ":"), default=str)

    @property
    def writers(self) -> list[dict]:
        if self._writers is None:
            if self._entry is not None:
                self._writers = self._entry.catalog.writers(self.project, self.run_id)
            else:
                self._writers = _meta.read_writer_files(self.paths)
        return self._writers

    @property
    def catalog(self) -> Catalog | None:
        """The catalog this run was found through (None for :func:`load_run`)."""
        return self._entry.catalog if self._entry is not None else None

    def _light(self, name: str) -> Any:
        if self._meta is None and self._entry is not None:
            return self._entry.light.get(name)
        return self.meta.get(name)

    def recorded(self, name: str) -> Any:
        """A field of run.json as recorded (``name``, ``status``, the times, ``last_step``, ``host``,
        ``user``, ``tags``, ``group``, ``job_type``, ``exit_code``, ``heartbeat_at``, ``pid``,
        ``write_errors``: what listings use), without parsing the rest of run.json; other
        fields from :attr:`meta`."""
        if self._meta is None and self._entry is not None and name in self._entry.light:
            return self._entry.light[name]
        return self.meta.get(name)

    @property
    def project(self) -> str:
        return self.paths.project

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def name(self) -> str:
        return self._light("name") or self.run_id

    @property
    def created_at(self) -> str | None:
        return self._light("created_at")

    @property
    def extent(self) -> DataExtent | None:
        """What the data on disk says (crashed runs only; None otherwise, nothing is read)."""
        if not self._extent_known:
            self._extent_known = True
            if self.status == RunStatus.CRASHED:
                self._extent = (catalog_extent(self._entry.catalog, self.project, self.run_id)
                                if self._entry is not None else data_extent(self.paths))
        return self._extent

    def metric_facts(self) -> MetricFacts | None:
        """What the catalog keeps of the run's metrics parts (:meth:`~trackstore.store.catalog.Catalog.metric_facts`):
        non-finite values, newest row time, usual logging interval, largest step. Asked once."""
        if self._facts is False:
            from .alerts import facts_of

            self._facts = facts_of(self.catalog, self.paths.root, self.project, self.run_id)
        return self._facts

    def refresh_facts(self, catalog: Catalog | None = None) -> MetricFacts | None:
        """:meth:`metric_facts` read again now (through ``catalog`` when given, else the run's own):
        what a listing kept a while (the dashboard's) asks of a live run before showing it."""
        self._facts = False
        if catalog is not None:
            self._facts = catalog.metric_facts(self.project, self.run_id)
        return self.metric_facts()

    def alerts(self, *, stall_after: float | None = None, now: float | None = None) -> RunAlerts:
        """The run's alerts (:mod:`trackstore.read.alerts`): non-finite metric values, a live run that stalled."""
        from .alerts import STALL_AFTER, alerts_of

        return alerts_of(self.metric_facts(), self.status, now=now,
                         stall_after=STALL_AFTER if stall_after is None else stall_after)

    @property
    def last_step(self) -> int | None:
        """The largest step logged: recorded in run.json, or for a crashed run also from the data;
        for a running run also its newest part files (run.json is rewritten at a heartbeat, every
        10 s; parts arrive at every flush, every 2 s, as the dashboard's charts read them), when
        the run was found through the catalog (:func:`load_run` reads no more than before)."""
        steps = [self._light("last_step"), self.extent.last_step if self.extent else None]
        if self.status == RunStatus.RUNNING and (self._entry is not None or self._facts is not False):
            facts = self.metric_facts()
            steps.append(facts.last_step if facts is not None else None)
        return max((s for s in steps if s is not None), default=None)

    @property
    def ended_at(self) -> str | None:
        """When the run ended: recorded, or for a crashed run its last sign of life (heartbeats, data)."""
        recorded = self._light("ended_at")
        if self.extent is None:
            return recorded
        times = [parse_iso(recorded), parse_iso(self._light("heartbeat_at")), self.extent.last_ts]
        times += [parse_iso(w.get("heartbeat_at")) for w in self.writers]
        return iso(max((t for t in times if t is not None), default=None))

    def write_errors(self) -> str | None:
        """What the run's writers could not write, from ``run.json`` and each writer's file; None if nothing."""
        if self._writers is None and self._entry is not None:  # only the writers that lost rows
            return lost_rows(self._light("write_errors"), self._entry.catalog.writer_losses(self.project, self.run_id))
        return lost_rows(self._light("write_errors"), self.writers)

    def list_row(self) -> dict[str, Any]:
        """:meth:`row` without ``config``, ``summary``, ``notes``, ``error`` and ``write_errors``:
        what a listing filters, sorts and shows, without parsing the rest of run.json."""
        if self._meta is None and self._entry is not None and self.status not in (RunStatus.CRASHED, RunStatus.RUNNING):
            return _list_row(self.project, self.run_id, self.status, self._entry.light)  # the common case
        get = self._light
        return {
            "project": self.project,
            "run_id": self.run_id,
            "name": self.name,
            "status": self.status,
            "created_at": get("created_at"),
            "ended_at": self.ended_at,
            "updated_at": get("updated_at") or get("created_at"),
            "last_step": self.last_step,
            "host": get("host"),
            "user": get("user"),
            "tags": list(get("tags") or []),
            "group": get("group"),
            "job_type": get("job_type"),
            "exit_code": get("exit_code"),
        }

    def row(self) -> dict[str, Any]:
        """The run as a flat record with the columns of the ``runs`` view."""
        m = self.meta  # parsed first: :meth:`list_row` then reads the same fields from it
        more = {"notes": m.get("notes"), "config": m.get("config") or {}, "summary": m.get("summary") or {},
                "error": m.get("error"), "write_errors": m.get("write_errors")}
        listed = self.list_row()
        return {column: listed[column] if column in listed else more[column] for column in (*RUN_COLUMNS, "write_errors")}

    def view_row(self, *, light: bool = False) -> dict[str, Any]:
        """:meth:`row` with the types of the ``runs`` SQL view: times as aware UTC datetimes,
        ``last_step``/``exit_code`` as int64 or None, tags as text, other values as text or None
        (``config`` and ``summary`` stay dicts; the view holds them as JSON text). ``light``:
        the columns of :meth:`list_row` only."""
        if light:
            return typed_list_row(self.list_row())
        from ..store.meta import INT64_MAX, INT64_MIN

        out = {}
        for name, v in self.row().items():
            if name in ("created_at", "ended_at", "updated_at"):
                v = parse_time(v)
            elif name in ("config", "summary"):
                v = v if v is not None else {}
            elif name == "tags":
                v = [str(t) for t in (v or [])]
            elif name in ("last_step", "exit_code"):
                v = v if isinstance(v, int) and not isinstance(v, bool) and INT64_MIN <= v <= INT64_MAX else None
            elif v is not None and not isinstance(v, str):
                v = str(v)
            out[name] = v
        return out


def _list_row(project: str, run_id: str, status: str, light: dict[str, Any]) -> dict[str, Any]:
    """:meth:`RunInfo.list_row` from the recorded fields (:attr:`~trackstore.store.catalog.RunEntry.light`)
    of a run whose status is ``status`` and is not crashed (nothing is derived from its data)."""
    return {"project": project, "run_id": run_id, "name": light["name"] or run_id,
            "status": status, "created_at": light["created_at"], "ended_at": light["ended_at"],
            "updated_at": light["updated_at"] or light["created_at"], "last_step": light["last_step"],
            "host": light["host"], "user": light["user"], "tags": list(light["tags"] or []),
            "group": light["group"], "job_type": light["job_type"], "exit_code": light["exit_code"]}


def typed_list_row(row: dict[str, Any]) -> dict[str, Any]:
    """A :meth:`RunInfo.list_row` with the types of the ``runs`` SQL view (see
    :meth:`RunInfo.view_row`), converted in place."""
    INT64_MIN, INT64_MAX = _meta.INT64_MIN, _meta.INT64_MAX
    row["created_at"] = parse_time(row["created_at"])
    row["ended_at"] = parse_time(row["ended_at"])
    row["updated_at"] = parse_time(row["updated_at"])
    tags = row["tags"]
    if tags and not all(type(t) is str for t in tags):
        row["tags"] = [t if isinstance(t, str) else str(t) for t in tags]
    for name in ("last_step", "exit_code"):
        v = row[name]
        if v is not None and (type(v) is not int or not INT64_MIN <= v <= INT64_MAX):  # bool is not int here
            row[name] = None
    for name in ("project", "run_id", "name", "status", "host", "user", "group", "job_type"):
        v = row[name]
        if v is not None and type(v) is not str:
            row[name] = str(v)
    return row


@dataclass
class DataExtent:
    """What a run's part footers say: its largest metric ``step``, its newest row time (epoch s)."""

    last_step: int | None = None
    last_ts: float | None = None


def data_extent(paths: RunPaths) -> DataExtent:
    """The largest ``step`` of the run's metrics and the newest ``ts`` of any kind, cheaply.

    Only Parquet footers are read (min/max statistics, docs/format.md section 3); a part
    without ``ts`` statistics counts with its file time. Damaged parts are passed over
    (``trackstore doctor`` reports them).
    """
    import pyarrow.parquet as pq

    from ..store.schema import KINDS

    found = DataExtent()
    for kind in KINDS:
        for part in paths.parts(kind):
            try:
                md = pq.read_metadata(part)
                ts = column_max_time(md, "ts")
                found.last_ts = _larger(found.last_ts, ts if ts is not None else os.stat(part).st_mtime)
                if kind == Kind.METRICS:
                    found.last_step = _larger(found.last_step, column_max(md, "step"))
            except (OSError, ValueError):  # pyarrow's errors derive from these
                continue
    return found


def _larger(a, b):
    return b if a is None else a if b is None else max(a, b)


def load_run(paths: RunPaths, *, unreadable: bool = False) -> RunInfo | None:
    """The run as readers see it; None without a run.json, or (unless ``unreadable``) with one
    that cannot be parsed at all. Values of run.json readers cannot use are left out, with a
    :class:`~trackstore.store.meta.RunJsonWarning` naming the file."""
    doc = _meta.load_run_json(paths)
    if doc is None or (doc.unreadable and not unreadable):
        if doc is not None:
            _warn(paths, doc.problems, "the run is left out; run `trackstore doctor`")
        return None
    if doc.problems:
        _warn(paths, doc.problems, "shown as missing; run `trackstore doctor`")
    writers = _meta.read_writer_files(paths)
    return RunInfo(paths, doc.meta, _meta.effective_status(doc.meta, writers), writers, doc.problems,
                   doc.unreadable)


def _warn(paths: RunPaths, problems: list[str], consequence: str) -> None:
    what = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    warnings.warn(f"{paths.run_file}: {what} ({consequence})", RunJsonWarning, stacklevel=3)


def lost_rows(recorded: Any, writers: list[dict]) -> str | None:
    """What a run's writers could not write: run.json's ``write_errors`` (``recorded``) and each
    writer file's own; None if nothing."""
    run_level = str(recorded) if recorded else None
    found = [run_level] if run_level else []
    for w in writers:  # a writer that ended before the last one recorded its loss only here
        text = w.get("write_errors")
        if text and str(text) != run_level:
            found.append(f"writer {w.get('writer_id', '?')}: {text}")
    return " | ".join(found) or None


def catalog_extent(catalog: Catalog, project: str, run_id: str) -> DataExtent:
    """:func:`data_extent` from the catalog's part records (footers read only for new parts)."""
    found = DataExtent()
    parts, _stable = catalog.parts(project, run_id)
    for kind, records in parts.items():
        for p in records:
            if p.last_ts is None:  # the footer cannot be read: passed over, as data_extent does
                continue
            found.last_ts = _larger(found.last_ts, p.last_ts)
            if kind == Kind.METRICS:
                found.last_step = _larger(found.last_step, p.last_step)
    return found


def from_catalog(catalog: Catalog, project: str, run_id: str, unreadable: bool) -> RunInfo | None:
    """The run through the catalog (what :func:`load_run` reads from the files, the same answer)."""
    entry = catalog.entry(project, run_id)
    if entry is None:
        return None
    paths = entry.paths
    if entry.unreadable and not unreadable:
        _warn(paths, entry.problems, "the run is left out; run `trackstore doctor`")
        return None
    if entry.problems:
        _warn(paths, entry.problems, "shown as missing; run `trackstore doctor`")
    writers = None
    recorded = entry.light.get("status") or RunStatus.RUNNING
    if recorded != RunStatus.RUNNING:
        status = recorded
    else:
        writers = catalog.writers(project, run_id)
        status = _meta.effective_status(entry.meta if not writers else {"status": recorded}, writers)
    info = RunInfo(paths, None, status, writers, entry.problems, entry.unreadable, entry=entry)
    if status == RunStatus.CRASHED:  # what listings show of it comes from the data: derive it while the catalog is open
        info.extent  # noqa: B018
        info.writers  # noqa: B018
    return info


def list_runs(root: str | os.PathLike | None = None, *, project: str | None = None,
              status: str | Iterable[str] | None = None, unreadable: bool = False,
              facts: bool = False) -> list[RunInfo]:
    """Every run under the store root, oldest first (run ids sort by creation time).

    ``unreadable=True`` also lists runs whose run.json cannot be parsed (what their folder and
    writer files tell); by default they are left out with a warning, as is a run folder that has
    no run.json yet. Answered from the store's catalog (:mod:`trackstore.store.catalog`): a
    directory scan and a ``stat`` of each run.json, files read only where something changed.
    ``facts``: each run's :meth:`RunInfo.metric_facts` (its alerts, a live run's last step) is
    read too, before the catalog is saved (one more ``stat`` a run, and the parts not seen yet).
    """
    from ..store.catalog import open_catalog

    root_path = resolve_root(root)
    wanted = {status} if isinstance(status, str) else (set(status) if status else None)
    catalog = open_catalog(root_path)
    out = []
    try:
        for key, row in catalog.listing(project):
            info: RunInfo | None
            if row is not None:  # run.json did not change and the run ended: the catalog's row as it is
                entry = catalog.entry_of(row)
                info = RunInfo(RunPaths(root_path, *key), None, entry.light["status"], entry=entry)
            else:
                info = from_catalog(catalog, *key, unreadable)
            if info is None:
                continue
            if wanted and info.status not in wanted:
                continue
            if facts:
                info.metric_facts()
            out.append(info)
    finally:
        catalog.save()
    out.sort(key=lambda r: (r.created_at or "", r.run_id))
    return out


def listed_rows(root: str | os.PathLike | None = None, *, project: str | None = None,
                unreadable: bool = False, meta: bool = False, alerts: float | None = None) -> list[dict[str, Any]]:
    """:meth:`RunInfo.view_row` (``light=True``) of every run :func:`list_runs` gives, in its
    order: what a listing shows, filters and sorts by. ``meta``: each row also holds ``_meta``,
    :meth:`RunInfo.meta_json` (the run.json fields the catalog keeps, as JSON text). ``alerts``
    (a ``stall_after``, see :mod:`trackstore.read.alerts`): each row also holds the alert fields
    (:meth:`~trackstore.read.alerts.RunAlerts.fields`) and ``_alerts``, the
    :class:`~trackstore.read.alerts.RunAlerts`. A run that did not change and has ended costs
    one ``stat`` (two with ``alerts``: its metrics folder too) and no run object (a listing of
    thousands of runs)."""
    import time

    from ..store.catalog import open_catalog
    from .alerts import alerts_of, attach

    root_path = resolve_root(root)
    catalog = open_catalog(root_path)
    now = time.time()
    found: list[tuple[tuple[str, str], dict[str, Any]]] = []
    try:
        listed = catalog.listing(project)
        if meta and len(listed) > 1:
            catalog.prefetch_meta()  # every run.json's fields in one query, not one per run
        for key, row in listed:
            if row is not None:  # run.json did not change and the run ended: the catalog's row as it is
                light = row.light()
                got = _list_row(*key, light["status"], light)
                order = (got["created_at"] or "", key[1])
                got = typed_list_row(got)
                if meta:
                    got["_meta"] = catalog.meta_json(*key) or "{}"
                if alerts is not None:
                    attach(got, alerts_of(catalog.metric_facts(*key), got["status"], stall_after=alerts, now=now))
            else:
                info = from_catalog(catalog, *key, unreadable)
                if info is None:
                    continue
                order = (info.created_at or "", key[1])
                got = info.view_row(light=True)
                if meta:
                    got["_meta"] = info.meta_json()
                if alerts is not None:
                    attach(got, info.alerts(stall_after=alerts, now=now))
            found.append((order, got))
    finally:
        catalog.save()
    found.sort(key=lambda f: f[0])
    return [got for _order, got in found]


class _Resolver:
    """Run references against one directory scan and one catalog: K references cost O(K)
    lookups (plus one scan), not K listings."""

    def __init__(self, root: str | os.PathLike | None, unreadable: bool):
        from ..store.catalog import open_catalog
        from .refs import IdIndex

        self.root = root
        self.unreadable = unreadable
        self.catalog = open_catalog(resolve_root(root))
        self.keys = self.catalog.run_keys()
        self.projects: dict[str, list[str]] = {}  # run id -> its projects (one, unless copied)
        for proj, rid in sorted(self.keys):
            self.projects.setdefault(rid, []).append(proj)
        self.index = IdIndex(self.projects)
        self.infos: dict[tuple[str, str], RunInfo | None] = {}

    def info(self, key: tuple[str, str]) -> RunInfo | None:
        if key not in self.infos:
            self.infos[key] = from_catalog(self.catalog, key[0], key[1], self.unreadable)
        return self.infos[key]

    def _load(self, keys: Iterable[tuple[str, str]]) -> list[RunInfo]:
        return [i for i in (self.info(k) for k in keys) if i is not None]

    def _matching(self, ref: str, project: str | None = None) -> list[tuple[str, str]]:
        """The runs whose id ``ref`` is, starts or is the handle of (in ``project`` if given)."""
        return [(proj, rid) for rid in self.index.matching(ref) for proj in self.projects[rid]
                if project is None or proj == project]

    def resolve(self, ref: str) -> RunInfo:
        exact = self._load(self._matching(ref))
        exact = [r for r in exact if r.run_id == ref]
        if len(exact) == 1:
            return exact[0]
        candidates = exact
        if not candidates and "/" in ref:
            proj, _, rest = ref.partition("/")
            in_project = self._load(k for k in self.keys if k[0] == proj)
            candidates = [r for r in in_project if r.name == rest or r.run_id == rest]
            if not candidates:
                candidates = self._load(self._matching(rest, proj))
        if not candidates:
            candidates = self._load(self._matching(ref))
        if not candidates:
            candidates = [r for r in self._load(self.keys) if r.name == ref]
        candidates.sort(key=lambda r: (r.created_at or "", r.run_id))  # the order of a listing
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            near = self._nearest(ref)
            hint = f"; did you mean:\n{self._listing(near)}\n(`trackstore runs` lists every run)" if near else \
                " (`trackstore runs` lists them)"
            raise RunNotFoundError(f"no run matches {ref!r} in {resolve_root(self.root)}{hint}")
        more = f"\n  ... and {len(candidates) - 20} more" if len(candidates) > 20 else ""
        raise AmbiguousRunError(f"{ref!r} matches {len(candidates)} runs; use a handle below, or a longer id:\n"
                                f"{self._listing(candidates[:20])}{more}")

    def _listing(self, runs: list[RunInfo]) -> str:
        """One line per run: its handle, project/name and status."""
        return "\n".join(f"  {self.index.handle(r.run_id)}  {r.project}/{r.name}  {r.status}" for r in runs)

    def _nearest(self, ref: str, n: int = 5) -> list[RunInfo]:
        """The runs whose id, handle, name or project/name is closest to ``ref`` (at most ``n``)."""
        from .refs import closest

        runs = self._load(self.keys)
        by_text: dict[str, list[RunInfo]] = {}
        for r in runs:
            for text in (r.run_id, self.index.handle(r.run_id), r.name, f"{r.project}/{r.name}"):
                by_text.setdefault(text, []).append(r)
        out: dict[tuple[str, str], RunInfo] = {}
        for text in closest(ref, by_text):
            for r in by_text[text]:
                out.setdefault((r.project, r.run_id), r)
            if len(out) >= n:
                break
        return list(out.values())[:n]


def resolve_run(ref: str, root: str | Path | None = None, *, unreadable: bool = False) -> RunInfo:
    """Find exactly one run by id, handle, unique id prefix, or ``project/name`` / ``project/run_id``.

    ``unreadable=True`` also finds runs whose run.json cannot be parsed (see :func:`list_runs`).
    Costs a directory scan and the run.json ``stat`` of the candidates, not a listing of the store.
    """
    return resolve_runs([ref], root, unreadable=unreadable)[0]


def resolve_runs(refs: Iterable[str], root: str | Path | None = None, *, unreadable: bool = False) -> list[RunInfo]:
    """:func:`resolve_run` for each reference, in order, against one scan of the store."""
    resolver = _Resolver(root, unreadable)
    try:
        return [resolver.resolve(r) for r in refs]
    finally:
        resolver.catalog.save()


def run_bytes(info: RunInfo) -> int:
    """Bytes of the run's folder: from the catalog while its run.json and kind folders keep their
    fingerprints, else every file's size (:func:`trackstore.store.files.tree_bytes`)."""
    from ..store.files import tree_bytes

    catalog = info.catalog
    if catalog is None:
        return tree_bytes(info.paths.dir)
    return catalog.run_bytes(info.project, info.run_id)


def refresh_live(runs: Iterable[RunInfo], root: str | os.PathLike | None = None) -> None:
    """Read again the metric facts (last step, alerts) of the runs that are ``running``, through
    one catalog of the store, saved once: a listing kept a while stays fresh where it changes
    (a live run's parts) and costs nothing more for the others."""
    live = [r for r in runs if r.status == RunStatus.RUNNING]
    if not live:
        return
    from ..store.catalog import open_catalog

    catalog = open_catalog(resolve_root(root if root is not None else live[0].paths.root))
    try:
        for r in live:
            r.refresh_facts(catalog)
    finally:
        catalog.save()


def save_catalogs(runs: Iterable[RunInfo]) -> None:
    """Write what the catalogs these runs came from learnt since (never raises)."""
    seen = {}
    for r in runs:
        if r.catalog is not None:
            seen[id(r.catalog)] = r.catalog
    for catalog in seen.values():
        catalog.save()
