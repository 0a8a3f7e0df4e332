"""Finding runs in a store: listing them with their effective status, and resolving references.

A run reference (what users type after ``trackstore show``) is a full run id, a unique prefix
of one, or ``project/name`` (``project/run_id`` works too). Ambiguity is an error that lists
the candidates, never a guess.

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

import os
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable

from ..errors import AmbiguousRunError, RunNotFoundError
from ..store import meta as _meta
from ..store.clock import iso, parse_iso
from ..store.layout import RunPaths, iter_run_dirs, resolve_root
from ..store.meta import RunJsonWarning

RUN_COLUMNS = (
    "project", "run_id", "name", "status", "created_at", "ended_at", "updated_at", "last_step",
    "host", "user", "tags", "notes", "group", "job_type", "config", "summary", "exit_code", "error",
)


@dataclass
class RunInfo:
    """One run as readers see it: metadata from run.json plus the derived status."""

    paths: RunPaths
    meta: dict
    status: str
    writers: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what of run.json could not be read
    unreadable: bool = False  # run.json could not be parsed at all: meta is empty

    @property
    def project(self) -> str:
        return self.paths.project

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def name(self) -> str:
        return self.meta.get("name") or self.run_id

    @cached_property
    def extent(self) -> DataExtent | None:
        """What the data on disk says (crashed runs only; None otherwise, nothing is read)."""
        return data_extent(self.paths) if self.status == "crashed" else None

    @property
    def last_step(self) -> int | None:
        """The largest step logged: recorded in run.json, or for a crashed run also from the data."""
        steps = [self.meta.get("last_step"), self.extent.last_step if self.extent else None]
        return max((s for s in steps if s is not None), default=None)

    @property
    def ended_at(self) -> str | None:
        """When the run ended: recorded, or for a crashed run its last sign of life (heartbeats, data)."""
        recorded = self.meta.get("ended_at")
        if self.extent is None:
            return recorded
        times = [parse_iso(recorded), parse_iso(self.meta.get("heartbeat_at")), self.extent.last_ts]
        times += [parse_iso(w.get("heartbeat_at")) for w in self.writers]
        return iso(max((t for t in times if t is not None), default=None))

    def row(self) -> dict[str, Any]:
        """The run as a flat record with the columns of the ``runs`` view."""
        m = self.meta
        return {
            "project": self.project,
            "run_id": self.run_id,
            "name": self.name,
            "status": self.status,
            "created_at": m.get("created_at"),
            "ended_at": self.ended_at,
            "updated_at": m.get("updated_at") or m.get("created_at"),
            "last_step": self.last_step,
            "host": m.get("host"),
            "user": m.get("user"),
            "tags": list(m.get("tags") or []),
            "notes": m.get("notes"),
            "group": m.get("group"),
            "job_type": m.get("job_type"),
            "config": m.get("config") or {},
            "summary": m.get("summary") or {},
            "exit_code": m.get("exit_code"),
            "error": m.get("error"),
            "write_errors": m.get("write_errors"),
        }


    def view_row(self) -> dict[str, Any]:
        """:meth:`row` with the types of the ``runs`` SQL view: times as aware UTC datetimes,
        ``last_step``/``exit_code`` as int64 or None, tags as text, other values as text or None
        (``config`` and ``summary`` stay dicts; the view holds them as JSON text)."""
        from ..store.clock import parse_time
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
                ts = _column_max(md, "ts")
                found.last_ts = _larger(found.last_ts, ts.timestamp() if ts is not None else os.stat(part).st_mtime)
                if kind == "metrics":
                    found.last_step = _larger(found.last_step, _column_max(md, "step"))
            except (OSError, ValueError):  # pyarrow's errors derive from these
                continue
    return found


def _column_max(md, column: str):
    """The largest value of ``column`` over a file's row groups, from their statistics (None if absent)."""
    try:
        idx = md.schema.names.index(column)
    except ValueError:
        return None
    best = None
    for rg in range(md.num_row_groups):
        st = md.row_group(rg).column(idx).statistics
        if st is not None and st.has_min_max:
            best = _larger(best, st.max)
    return best


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


def list_runs(root: str | os.PathLike | None = None, *, project: str | None = None,
              status: str | Iterable[str] | None = None, unreadable: bool = False) -> list[RunInfo]:
    """Every run under the store root, oldest first (run ids sort by creation time).

    ``unreadable=True`` also lists runs whose run.json cannot be parsed (what their folder and
    writer files tell); by default they are left out with a warning, as is a run folder that has
    no run.json yet.
    """
    root_path = resolve_root(root)
    wanted = {status} if isinstance(status, str) else (set(status) if status else None)
    out = []
    for proj, run_id, _dir in iter_run_dirs(root_path):
        if project is not None and proj != project:
            continue
        info = load_run(RunPaths(root_path, proj, run_id), unreadable=unreadable)
        if info is None:
            continue
        if wanted and info.status not in wanted:
            continue
        out.append(info)
    out.sort(key=lambda r: (r.meta.get("created_at") or "", r.run_id))
    return out


def resolve_run(ref: str, root: str | Path | None = None, *, unreadable: bool = False) -> RunInfo:
    """Find exactly one run by id, unique id prefix, or ``project/name`` / ``project/run_id``.

    ``unreadable=True`` also finds runs whose run.json cannot be parsed (see :func:`list_runs`).
    """
    runs = list_runs(root, unreadable=unreadable)
    exact = [r for r in runs if r.run_id == ref]
    if len(exact) == 1:
        return exact[0]
    candidates = exact
    if not candidates and "/" in ref:
        proj, _, rest = ref.partition("/")
        candidates = [r for r in runs if r.project == proj and (r.name == rest or r.run_id == rest)]
        if not candidates:
            candidates = [r for r in runs if r.project == proj and r.run_id.startswith(rest)]
    if not candidates:
        candidates = [r for r in runs if r.run_id.startswith(ref)]
    if not candidates:
        candidates = [r for r in runs if r.name == ref]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise RunNotFoundError(
            f"no run matches {ref!r} in {resolve_root(root)} (try `trackstore runs` to list them)"
        )
    listing = "\n".join(f"  {r.project}/{r.run_id}  {r.name}  {r.status}" for r in candidates[:20])
    more = f"\n  ... and {len(candidates) - 20} more" if len(candidates) > 20 else ""
    raise AmbiguousRunError(f"{ref!r} matches {len(candidates)} runs; use a longer id:\n{listing}{more}")


def resolve_runs(refs: Iterable[str], root: str | Path | None = None) -> list[RunInfo]:
    return [resolve_run(r, root) for r in refs]
