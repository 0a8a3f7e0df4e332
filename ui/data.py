"""Everything the dashboard reads from the store, in one place, as JSON-ready data.

The dashboard (``trackstore ui``) is a reader beside the CLI: this module is its only door to
the store, and it only reads. It calls the core's public read functions
(:func:`trackstore.read.listing.list_runs`, :mod:`trackstore.read.browse`,
:mod:`trackstore.read.points`, :func:`trackstore.read.views.connect`), so a faster run listing
(a catalog) replaces :meth:`Store.runs` and nothing else.

The promises it keeps:

* **Nothing from a request becomes a path.** A run is named by its run id (and project when two
  projects hold the same id) and found among the runs the store lists; an artifact file is
  served only when the run's manifest lists it, and its path must resolve inside the run folder.
* **Curves keep extremes.** :meth:`Store.series` downsamples with the M4 aggregation: each
  bucket of x contributes its first, last, minimum and maximum point. A whole curve is drawn
  in aligned buckets (a power of two wide, :mod:`trackstore.read.pyramid`) merged from a cache
  of each part file's buckets, so a poll of a live run computes only its new parts; a zoomed
  range is cut into equal buckets by DuckDB over the points in it. A one-step spike is therefore drawn at any zoom, and the
  largest plotted value of a series is the largest stored value in the range. Nothing is ever
  averaged or sampled at storage time; a series shorter than four points per bucket is exact.
* **Live runs are read as they grow.** Each run's curve is cached, keyed by what identifies its
  metrics parts: a folder modified in the last 2 s (a live run) by every part's path, size and
  mtime, listed again at each call (a part a writer has renamed into place is seen at once); a
  settled folder by its own inode and mtime (parts are immutable and a compaction swaps the
  whole folder). A listing a compaction swapped away is taken again.
* **The runs table costs what changed.** Each run's row is kept with what it was made from
  (its run.json's fingerprint in the catalog, its effective status, end and last step, its
  alerts) and made again only when that changed (always for a run whose run.json changed in
  the last seconds); the answer carries an ``ETag`` of its bytes, so a page polling an
  unchanged store gets ``304 Not Modified`` and neither downloads nor parses the table again.
  A live run's last step and alerts come from the catalog's facts of its metrics parts
  (:mod:`trackstore.read.alerts`), listed again when its metrics folder changed, so the table's
  last step is as fresh as the charts (which read the same parts), not as old as run.json's
  last heartbeat (10 s); a run that did not change costs one more ``stat`` (its metrics folder).
* User values reach DuckDB as bound parameters; file lists come from the store's own listing.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from trackstore.errors import RunNotFoundError, UsageError
from trackstore.read import browse
from trackstore.read.alerts import RunAlerts
from trackstore.read.listing import RunInfo, list_runs, load_run, refresh_live
from trackstore.read.overview import flatten
from trackstore.read.points import run_keys
from trackstore.read.pyramid import Pyramids
from trackstore.read.views import bound_values, confine, connect, run_sql
from trackstore.records.samples import decode_row
from trackstore.store.layout import REPLICA_WRITERS, resolve_root
from trackstore.store.meta import replica_field, writer_summaries

MAX_POINTS = 100_000  # points of one chart answer, over all its series: 100 runs get 250 buckets each, 1,000 runs 25
CACHE_BYTES = 256 << 20  # downsampled curves kept, per run; an entry is valid while the run's part files are unchanged
EMPTY = '"x": [], "y": [], "n": 0, "min": null, "max": null'  # a run without the key
LIST_TTL_S = 1.0  # the run listing is shared by requests arriving within this time


def _finite(v: Any) -> Any:
    """JSON has no NaN or infinity: they become strings the page shows as text."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def _run_row(r: RunInfo) -> dict[str, Any]:
    row = r.row()
    return clean({
        **_alert_fields(r.alerts()),
        "project": r.project, "run_id": r.run_id, "name": r.name, "status": row["status"],
        "created_at": row["created_at"], "ended_at": row["ended_at"], "updated_at": row["updated_at"],
        "last_step": row["last_step"], "tags": row["tags"], "host": row["host"], "user": row["user"],
        "group": row["group"], "notes": row["notes"],
        "summary": {k: v for k, v in (row["summary"] or {}).items() if isinstance(v, (int, float, str, bool))},
        "config": flatten(row["config"] or {}),
    })


def _alert_fields(alerts: RunAlerts) -> dict[str, Any]:
    """A run's alerts as the page shows them (:mod:`trackstore.read.alerts`): everything but the
    seconds of silence, which change at every poll (the page has ``last_metric_at``)."""
    fields = alerts.fields()
    del fields["silent_s"]
    return fields


def clean(value: Any) -> Any:
    """``value`` with every non-finite float replaced (see :func:`_finite`), recursively."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return _finite(value)


def _replica_of(meta: dict) -> dict[str, Any] | None:
    """Where a team store's run came from, as its run.json says (docs/format.md section 12):
    the source store's host, root and id, and when it was replicated; None for a run of this store."""
    source = replica_field(meta, "source")
    if not isinstance(source, dict):
        return None
    return {"host": source.get("host"), "root": source.get("root"), "store_id": source.get("store_id"),
            "replicated_at": replica_field(meta, "replicated_at")}


def _replica_writers(meta: dict) -> list[dict]:
    """A team store's run's writers, as its run.json carries them (its writer files are not
    replicated: docs/format.md section 12); none for a run of this store."""
    found = replica_field(meta, REPLICA_WRITERS)
    return writer_summaries(found) if isinstance(found, list) else []


# what a spreadsheet takes for the start of a formula when a CSV cell begins with it (OWASP, "CSV injection")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def text_cell(text: str | None) -> str | None:
    """``text`` as a CSV cell a spreadsheet shows as text: a ``'`` before one that it would
    otherwise run as a formula (a run named ``=HYPERLINK(...)``); any other unchanged."""
    return f"'{text}" if isinstance(text, str) and text.startswith(_FORMULA_START) else text


class Store:
    """The dashboard's read-only view of one store root (safe to share between threads)."""

    def __init__(self, root: str | os.PathLike | None = None,
                 bring: Callable[[list[tuple[str, str]]], None] | None = None):
        self.root = resolve_root(root, must_exist=True)
        # a team store's local copy holds run.json files: this fetches the runs' parts before a
        # page reads them (trackstore.read.replica_copy.OnDemand.bring); None: a store, all here
        self._bring = bring
        self._lock = threading.Lock()
        self._listed: tuple[float, list[RunInfo]] | None = None
        self._index: dict[tuple[str, str], RunInfo] = {}  # the last listing, by (project, run id)
        self._by_id: dict[str, list[RunInfo]] = {}
        self._cache: OrderedDict[tuple, str] = OrderedDict()  # one run's curve by its part files' fingerprint
        self._cache_bytes = 0
        self._con = None  # DuckDB, opened by the first curve (the runs table needs none: a faster start)
        self._rows: dict[tuple[str, str], tuple[tuple, bytes]] = {}  # each run's row (JSON) and what it was made from
        self._pyramids = Pyramids(self.root)  # part summaries: whole curves cost what changed

    def bring(self, runs: Sequence[RunInfo]) -> None:
        """Make sure the files of ``runs`` are here before they are read (see ``bring`` above)."""
        if self._bring is not None and runs:
            self._bring([(r.project, r.run_id) for r in runs])

    @property
    def _duck(self):
        with self._lock:
            if self._con is None:
                import duckdb

                con = duckdb.connect(":memory:")
                con.execute("SET enable_progress_bar = false")
                confine(con, self.root)  # may read files under the root only; configuration locked
                self._con = con
            return self._con

    # ------------------------------------------------------------------ runs
    def runs(self, fresh: bool = False) -> list[RunInfo]:
        """Every run, oldest first (one listing shared by requests within :data:`LIST_TTL_S`)."""
        with self._lock:
            now = time.monotonic()
            if not fresh and self._listed is not None and now - self._listed[0] < LIST_TTL_S:
                return self._listed[1]
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a bad run.json is shown as missing values; doctor reports it
            runs = list_runs(self.root, facts=True)  # alerts, and a live run's last step from its parts
        by_id: dict[str, list[RunInfo]] = {}
        for r in runs:
            by_id.setdefault(r.run_id, []).append(r)
        with self._lock:
            self._listed = (time.monotonic(), runs)
            self._index = {(r.project, r.run_id): r for r in runs}
            self._by_id = by_id
        return runs

    def run(self, run_id: str, project: str | None = None, *, fresh: bool = False) -> RunInfo:
        """The run with this exact id (and project, when given), as the last listing found it
        (its paths never change; ``fresh=True`` reads its run.json and writer files again);
        never a path built from the request. A run the last listing lacks is looked for again."""
        def lookup() -> list[RunInfo]:
            with self._lock:
                if project is not None:
                    hit = self._index.get((project, run_id))
                    return [hit] if hit is not None else []
                return list(self._by_id.get(run_id, ()))

        if self._listed is None:
            self.runs()
        found = lookup()
        if not found:  # a run created a moment ago: list again before saying no
            self.runs(fresh=True)
            found = lookup()
        if found and fresh and len(found) == 1:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                again = load_run(found[0].paths, unreadable=True)
            found = [again] if again is not None else found
        if not found:
            raise RunNotFoundError(f"no run {run_id!r}")
        if len(found) > 1:
            raise UsageError(f"run id {run_id!r} is in several projects: give project=")
        return found[0]

    def run_rows(self) -> list[dict[str, Any]]:
        """The runs table: one JSON-ready row per run (config flattened with ``/``)."""
        return [_run_row(r) for r in self.runs()]

    def runs_payload(self) -> tuple[str, bytes]:
        """``(etag, body)``: the runs table as ``{"runs": [...]}`` JSON (the rows of
        :meth:`run_rows`), each row made again only when what it is made from changed."""
        import hashlib

        runs = self.runs()
        refresh_live(runs, self.root)  # the listing is shared for LIST_TTL_S; a live run's parts are newer
        kept = self._rows
        fresh: dict[tuple[str, str], tuple[tuple, bytes]] = {}
        parts = []
        for r in runs:
            key = (r.project, r.run_id)
            catalog = r.catalog
            fp = catalog.meta_fingerprint(r.project, r.run_id) if catalog is not None else None
            alerts = r.alerts()
            # a live run's last step and alerts come from its parts (the catalog's metrics facts),
            # which change between two heartbeats of its run.json: they are part of the basis
            basis = (fp, r.status, r.ended_at, r.last_step, json.dumps(_alert_fields(alerts)))
            old = kept.get(key)
            if fp and old is not None and old[0] == basis:
                text = old[1]
            else:
                text = json.dumps(_run_row(r), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
            if fp:  # a run.json changed in the last seconds has no fingerprint yet: made again next time
                fresh[key] = (basis, text)
            parts.append(text)
        self._rows = fresh
        body = b'{"runs":[' + b",".join(parts) + b"]}"
        return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"', body

    def run_detail(self, info: RunInfo) -> dict[str, Any]:
        """Everything the run page shows: metadata, config, summary, attempts, writers, record
        counts, artifacts and sync state."""
        from trackstore.store.ledger import sync_state_rows

        m = info.meta
        con = connect(self.root, runs=[info], sync_state=False)
        try:
            counts = browse.record_counts(con, info)
            arts = run_sql(con, "SELECT name, version, type, logical_path, size, sha256, aliases, step, ts "
                                "FROM artifacts WHERE project = $p AND run_id = $r ORDER BY name, version, logical_path",
                           {"p": info.project, "r": info.run_id}).to_pylist()
            hist_keys = run_sql(con, "SELECT DISTINCT key FROM histograms WHERE project = $p AND run_id = $r ORDER BY key",
                                {"p": info.project, "r": info.run_id}).column("key").to_pylist()
            image_keys = run_sql(con, "SELECT DISTINCT key FROM images WHERE project = $p AND run_id = $r ORDER BY key",
                                 {"p": info.project, "r": info.run_id}).column("key").to_pylist()
        finally:
            con.close()
        sync = [s for s in sync_state_rows(self.root, {(info.project, info.run_id)})  # this run's cursors alone
                if s["project"] == info.project and s["run_id"] == info.run_id]
        row = info.row()
        alerts = info.alerts()  # reads the run's metric facts: a live run's last step from its parts
        row["last_step"] = info.last_step
        return clean(json.loads(json.dumps({
            **row,
            "command": m.get("command"), "cwd": m.get("cwd"), "git": m.get("git"), "python": m.get("python"),
            "trackstore_version": m.get("trackstore_version"), "pid": m.get("pid"),
            "attempts": m.get("attempts") or [], "resumed_at": m.get("resumed_at"),
            "config_updates": m.get("config_updates") or [],
            "writers": writer_summaries(info.writers) or _replica_writers(m),
            **_alert_fields(alerts),
            "counts": counts, "artifacts": arts, "histogram_keys": hist_keys, "image_keys": image_keys,
            "sync": sync, "replica": _replica_of(m),
            "keys": self.keys([info]),
        }, default=str)))

    def compare(self, runs: Sequence[RunInfo]) -> dict[str, Any]:
        """Config differences (with equal keys marked) and summaries of two or more runs."""
        flat = [flatten(r.meta.get("config") or {}) for r in runs]
        missing = object()
        config = []
        for k in sorted(set().union(*flat)):
            values = [f.get(k, missing) for f in flat]
            canon = {json.dumps(v, sort_keys=True, default=str) if v is not missing else "\0missing" for v in values}
            config.append({"key": k, "values": [None if v is missing else v for v in values], "differs": len(canon) > 1})
        return clean(json.loads(json.dumps({
            "runs": [{"project": r.project, "run_id": r.run_id, "name": r.name, "status": r.status,
                      "summary": r.meta.get("summary") or {}} for r in runs],
            "config": config,
        }, default=str)))

    # ------------------------------------------------------------------ metrics
    def keys(self, runs: Iterable[RunInfo]) -> list[str]:
        """Every metric key of the runs, sorted."""
        import warnings

        found: set[str] = set()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in runs:
                found.update(run_keys(r.paths))
        return sorted(found)

    def series(self, runs: Sequence[RunInfo], key: str, *, width: int = 1000, x: str = "step",
               lo: float | None = None, hi: float | None = None) -> dict[str, Any]:
        """:meth:`series_json`, decoded."""
        return json.loads(self.series_json(runs, key, width=width, x=x, lo=lo, hi=hi))

    def series_json(self, runs: Sequence[RunInfo], key: str, *, width: int = 1000, x: str = "step",
                    lo: float | None = None, hi: float | None = None) -> bytes:
        """One key of several runs, each downsampled with M4 into ``width`` buckets of x over
        ``[lo, hi]`` (the whole curve when not given), as JSON text.

        ``{"key", "x", "series": [{"project", "run_id", "x": [...], "y": [...], "n", "min", "max"}]}``:
        ``n`` points in the range, ``min``/``max`` over them (finite values; NaN and infinities
        are not drawn). Each bucket yields its first, minimum, maximum and last point (fewer when
        they coincide), so the drawn line passes through every extreme. With many runs,
        ``width`` shrinks so the whole answer stays under :data:`MAX_POINTS`. DuckDB writes the
        number lists (shortest round-trip text: the values are the stored ones, exactly).
        """
        if x not in ("step", "time"):
            raise UsageError("x must be 'step' or 'time'")
        runs = list({(r.project, r.run_id): r for r in runs}.values())  # each run once, in the order asked
        width = max(2, min(int(width), 4000, MAX_POINTS // max(1, 4 * len(runs))))
        found: dict[tuple[str, str], str] = {}
        for attempt in range(3):  # a compaction may swap a run's files between listing and reading
            try:
                listed = [(r, *_fingerprint(r)) for r in runs]
            except FileNotFoundError:
                continue
            todo = []
            with self._lock:  # each run's curve is cached on its own: a live run recomputes, the others do not
                for r, files, fingerprint in listed:
                    cache_key = (fingerprint, key, x, width, lo, hi)
                    hit = self._cache.get(cache_key) if fingerprint is not None else None
                    if hit is not None:
                        self._cache.move_to_end(cache_key)
                        found[(r.project, r.run_id)] = hit
                    else:
                        todo.append((r, files, cache_key))
            try:
                todo = [(r, files if files is not None else r.paths.parts("metrics"), k) for r, files, k in todo]
            except FileNotFoundError:
                continue
            todo = [t for t in todo if t[1]]
            if not todo:
                break
            try:
                groups = [(r.project, r.run_id, [str(p) for p in files]) for r, files, _k in todo]
                got = self._whole(groups, key, width, x) if lo is None and hi is None else \
                    self._m4(groups, key, width, x, lo, hi)
            except Exception as exc:  # noqa: BLE001 - a part renamed away by a compaction: list again
                if attempt == 2 or not _vanished(exc):
                    raise
                continue
            with self._lock:
                for r, _files, cache_key in todo:
                    fragment = got.get((r.project, r.run_id), EMPTY)
                    found[(r.project, r.run_id)] = fragment
                    if cache_key not in self._cache:
                        self._cache_bytes += len(fragment)
                    self._cache[cache_key] = fragment
                while self._cache_bytes > CACHE_BYTES and self._cache:
                    self._cache_bytes -= len(self._cache.popitem(last=False)[1])
            break
        parts = []
        for r in runs:  # in the order asked; runs without the key included, empty
            head = json.dumps({"project": r.project, "run_id": r.run_id}, ensure_ascii=False)[:-1]
            parts.append(f'{head}, {found.get((r.project, r.run_id), EMPTY)}}}')
        head = json.dumps({"key": key, "x": x}, ensure_ascii=False)[:-1]
        return f'{head}, "series": [{", ".join(parts)}]}}'.encode()

    def _whole(self, groups: list[tuple[str, str, list[str]]], key: str, width: int, x: str) -> dict[tuple[str, str], str]:
        """Whole curves from the part summaries (:mod:`trackstore.read.pyramid`): computed once per
        part file, so a live run's poll reads only the parts it has not seen."""
        curves = self._pyramids.curves(self._duck, {(p, r): files for p, r, files in groups}, key, x, width)
        return {rid: _fragment(json.dumps(c["x"]), json.dumps(c["y"]), c["n"], c["min"], c["max"])
                for rid, c in curves.items()}

    def _m4(self, groups: list[tuple[str, str, list[str]]], key: str, width: int, x: str, lo: float | None,
            hi: float | None) -> dict[tuple[str, str], str]:
        """M4 over each run's part files (``groups``: project, run id, files) in DuckDB: each run's
        x extent, then per bucket the first, last, minimum and maximum point. User values are
        bound; ranges are pushed down to the Parquet reader, which skips row groups by their
        statistics. A few runs are asked one by one (the fastest plan for long curves); many
        runs in one query that joins each row to its run's extent."""
        xexpr = "step::DOUBLE" if x == "step" else "epoch_us(ts) / 1e6"
        base: dict[str, Any] = {"key": key}
        where = "key = $key AND isfinite(value)" + _x_range(x, lo, hi, base)
        m4 = """m4 AS (SELECT g, min(x) AS fx, arg_min(value, x) AS fv, max(x) AS lx, arg_max(value, x) AS lv,
                              arg_min(x, value) AS nx, min(value) AS nv, arg_max(x, value) AS mx, max(value) AS mv
                       FROM b GROUP BY g),
                pts AS (SELECT DISTINCT g // $width AS i, unnest([fx, nx, mx, lx]) AS x, unnest([fv, nv, mv, lv]) AS y FROM m4)
                SELECT i, to_json(list(x ORDER BY x, y)), to_json(list(y ORDER BY x, y)) FROM pts GROUP BY i"""
        out: dict[tuple[str, str], str] = {}
        cur = self._duck.cursor()
        try:
            if len(groups) <= 8:
                for project, run_id, files in groups:
                    params = {**base, "files": files}
                    src = "read_parquet($files)"
                    [(x0, x1, n, vmin, vmax)] = cur.execute(
                        f"SELECT min({xexpr}), max({xexpr}), count(*), min(value), max(value) FROM {src} WHERE {where}",
                        params).fetchall()
                    if not n:
                        continue
                    params.update(x0=x0, scale=width / (x1 - x0) if x1 > x0 else 0.0, w=width - 1, width=width)
                    rows = cur.execute(f"""
                        WITH b AS (SELECT least(floor((x - $x0) * $scale), $w)::INTEGER AS g, x, value
                                   FROM (SELECT {xexpr} AS x, value FROM {src} WHERE {where})),
                        {m4}""", params).fetchall()
                    for _i, xs, ys in rows:
                        out[(project, run_id)] = _fragment(xs, ys, n, vmin, vmax)
                return out
            files = [f for _p, _r, fs in groups for f in fs]
            params = {**base, "files": files}
            src = "read_parquet($files, hive_partitioning = true, union_by_name = true)"
            ext = cur.execute(f"SELECT project, run, min({xexpr}), max({xexpr}), count(*), min(value), max(value) "
                              f"FROM {src} WHERE {where} GROUP BY project, run", params).fetchall()
            if not ext:
                return {}
            params.update(w=width - 1, width=width)
            values = bound_values([(project, run_id, i, x0, width / (x1 - x0) if x1 > x0 else 0.0)
                                   for i, (project, run_id, x0, x1, _n, _a, _b) in enumerate(ext)],
                                  params, (None, None, "INTEGER", "DOUBLE", "DOUBLE"))
            rows = cur.execute(f"""
                WITH ext(project, run, i, x0, scale) AS (VALUES {values}),
                b AS (SELECT (i * $width + least(floor((x - x0) * scale), $w))::INTEGER AS g, x, value
                      FROM (SELECT project, run, {xexpr} AS x, value FROM {src} WHERE {where}) JOIN ext USING (project, run)),
                {m4}""", params).fetchall()
        finally:
            cur.close()
        for i, xs, ys in rows:
            project, run_id, _x0, _x1, n, vmin, vmax = ext[i]
            out[(project, run_id)] = _fragment(xs, ys, n, vmin, vmax)
        return out

    def bands(self, groups: Sequence[tuple[str, RunInfo]], key: str, *, width: int = 300, x: str = "step",
              lo: float | None = None, hi: float | None = None, band: str = "minmax") -> dict[str, Any]:
        """One key of groups of runs (seeds), each group as its mean with a band over its runs.

        ``groups`` pairs a group label with a run. x (``step``, ``time``, or ``relative``: each
        run's seconds since its first point of the key, as ``trackstore plot --x time``) over
        ``[lo, hi]`` (the whole range when not given) is cut into ``width`` equal buckets; each
        run contributes its mean in a bucket, and the group's point there is the mean over its
        runs, with ``lo``/``hi`` the least and greatest run (``band="minmax"``) or the mean less
        and plus the standard deviation over runs (``band="std"``). Runs logging the same steps,
        as seeds do, line up bucket by bucket. ``runs`` counts the group's runs that hold the key.
        """
        if x not in ("step", "time", "relative"):
            raise UsageError("x must be 'step', 'time' or 'relative'")
        if band not in ("minmax", "std"):
            raise UsageError("band must be 'minmax' or 'std'")
        width = max(2, min(int(width), 2000))
        members = list({(r.project, r.run_id, label): (label, r) for label, r in groups}.values())
        files = [str(f) for _label, r in members for f in r.paths.parts("metrics")]
        out: dict[str, Any] = {"key": key, "x": x, "band": band, "groups": []}
        if not files:
            return out
        xexpr = {"step": "step::DOUBLE", "time": "epoch_us(ts) / 1e6",
                 "relative": "epoch_us(ts) / 1e6 - min(epoch_us(ts) / 1e6) OVER (PARTITION BY project, run)"}[x]
        params: dict[str, Any] = {"key": key, "files": files, "width": width}
        values = bound_values([(r.project, r.run_id, label) for label, r in members], params)
        where = ""
        if lo is not None:
            params["lo"] = float(lo)
            where += " AND x >= $lo"
        if hi is not None:
            params["hi"] = float(hi)
            where += " AND x <= $hi"
        sql = f"""
            WITH mem(project, run, grp) AS (VALUES {values}),
            src AS (SELECT project, run, {xexpr} AS x, value
                    FROM read_parquet($files, hive_partitioning = true, union_by_name = true)
                    WHERE key = $key AND isfinite(value)),
            r AS (SELECT grp, project, run, x, value FROM src JOIN mem USING (project, run) WHERE true {where}),
            ext AS (SELECT min(x) AS x0, max(x) AS x1 FROM r),
            b AS (SELECT grp, project, run, x, value,
                         coalesce(least(floor((x - x0) * $width / nullif(x1 - x0, 0)), $width - 1), 0)::INTEGER AS g
                  FROM r, ext),
            per AS (SELECT grp, g, project, run, avg(value) AS v, avg(x) AS xm FROM b GROUP BY grp, g, project, run),
            agg AS (SELECT grp, g, avg(xm) AS x, avg(v) AS mean, min(v) AS mn, max(v) AS mx,
                           coalesce(stddev_pop(v), 0) AS sd FROM per GROUP BY grp, g)
            SELECT agg.grp, list(x ORDER BY g), list(mean ORDER BY g), list(mn ORDER BY g), list(mx ORDER BY g),
                   list(sd ORDER BY g), any_value(n)
            FROM agg JOIN (SELECT grp, count(DISTINCT (project, run)) AS n FROM r GROUP BY grp) USING (grp)
            GROUP BY agg.grp ORDER BY agg.grp"""
        cur = self._duck.cursor()
        try:
            rows = cur.execute(sql, params).fetchall()
        finally:
            cur.close()
        for label, xs, mean, mn, mx, sd, n in rows:
            if band == "std":
                lo_v = [m - s for m, s in zip(mean, sd)]
                hi_v = [m + s for m, s in zip(mean, sd)]
            else:
                lo_v, hi_v = mn, mx
            out["groups"].append({"label": label, "runs": int(n), "x": xs, "mean": mean, "lo": lo_v, "hi": hi_v})
        return clean(out)

    def csv_chunks(self, runs: Sequence[RunInfo], key: str, *, x: str = "step", lo: float | None = None,
                   hi: float | None = None) -> Iterable[bytes]:
        """Every stored point of one key of the runs, in ``[lo, hi]`` of x (``step`` or ``time``,
        wall seconds), as CSV in chunks: ``project,run_id,run_name,step,time,value``, a run's
        points by step. Values are the stored ones, NaN and infinities included (as ``nan``,
        ``inf``); time is UTC in ISO 8601. A project or run name that a spreadsheet would run
        as a formula (it begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is
        written with a ``'`` before it, which makes it text (:func:`text_cell`)."""
        import io

        import pyarrow.csv as pacsv

        if x not in ("step", "time"):
            raise UsageError("x must be 'step' or 'time'")
        runs = list({(r.project, r.run_id): r for r in runs}.values())
        files = [str(f) for r in runs for f in r.paths.parts("metrics")]
        params: dict[str, Any] = {"key": key, "files": files}
        where = "key = $key" + _x_range(x, lo, hi, params)
        header = b"project,run_id,run_name,step,time,value\n"
        if not files:
            yield header
            return
        values = bound_values([(r.project, r.run_id, text_cell(r.project), text_cell(r.name)) for r in runs], params)
        cur = self._duck.cursor()
        try:
            reader = cur.sql(f"""
                WITH names(project, run, project_cell, run_name) AS (VALUES {values})
                SELECT project_cell AS project, run AS run_id, run_name, step,
                       strftime(ts, '%Y-%m-%dT%H:%M:%S.%fZ') AS time, value
                FROM read_parquet($files, hive_partitioning = true, union_by_name = true) JOIN names USING (project, run)
                WHERE {where} ORDER BY project, run, step, ts""", params=params).to_arrow_reader(65536)
            yield header
            for batch in reader:
                buf = io.BytesIO()
                pacsv.write_csv(batch, buf, pacsv.WriteOptions(include_header=False, quoting_style="needed"))
                yield buf.getvalue()
        finally:
            cur.close()

    # ------------------------------------------------------------------ records
    def samples(self, info: RunInfo, *, step: int | None = None, split: str | None = None, grep: str | None = None,
                min_score: float | None = None, max_score: float | None = None, sample_index: int | None = None,
                limit: int = 200) -> dict[str, Any]:
        """The run's samples passing every filter (bound parameters), newest step first, with the
        steps and splits there are to choose from."""
        con = connect(self.root, runs=[info], sync_state=False)
        try:
            p: dict[str, Any] = {"p": info.project, "r": info.run_id}
            conds = ["project = $p", "run_id = $r"]
            for name, value, cond in (("step", step, "step = $step"), ("split", split, "split = $split"),
                                      ("si", sample_index, "sample_index = $si"),
                                      ("lo", min_score, "score >= $lo AND NOT isnan(score)"),
                                      ("hi", max_score, "score <= $hi AND NOT isnan(score)")):
                if value is not None:
                    p[name] = value
                    conds.append(cond)
            if grep:
                p["grep"] = grep.lower()
                conds.append("(strpos(lower(coalesce(input, '')), $grep) > 0 OR "
                             "strpos(lower(coalesce(output, '')), $grep) > 0)")
            where = " AND ".join(conds)
            total = run_sql(con, f"SELECT count(*) AS n FROM samples WHERE {where}", p).column("n")[0].as_py()
            rows = run_sql(con, f"SELECT step, split, sample_index, input, output, score, extra, json_fields FROM samples "
                                f"WHERE {where} ORDER BY step DESC, split, sample_index, writer, seq LIMIT {int(limit)}",
                           p).to_pylist()
            steps = browse.kind_steps(con, info, "samples")
            splits = run_sql(con, "SELECT DISTINCT split FROM samples WHERE project = $p AND run_id = $r ORDER BY split",
                             {"p": info.project, "r": info.run_id}).column("split").to_pylist()
        finally:
            con.close()
        return clean(json.loads(json.dumps({"total": total, "rows": [decode_row(r) for r in rows], "steps": steps,
                                            "splits": splits}, default=str)))

    def generations(self, runs: Sequence[RunInfo], *, prompt: str | None = None, sample_index: int | None = None,
                    split: str | None = None, step: int | None = None, grep: str | None = None,
                    limit: int | None = None) -> dict[str, Any]:
        """The same prompt's outputs across runs and steps, or the prompts there are to choose from.

        Without ``prompt`` or ``sample_index``: the prompts the runs hold (``split`` and ``grep``, a
        case-insensitive substring of the input, narrow them), those most runs share first, at
        most ``limit`` (100 by default, 1,000 at most), each named by ``prompt``, the MD5 of its
        stored input text, with the runs, steps, splits and sample indices where it occurs.

        With ``prompt`` (an MD5 from that list: the same text wherever it was logged) or
        ``sample_index`` (and ``split``: the same dataset position): ``rows``, one per step
        (ascending; only ``step`` when given; at most ``limit`` steps, 100 by default, 500 at most,
        evenly spread, the last kept), each with one cell per run in the order asked, so a prompt
        lines up across runs. A cell holds ``n`` (the run's matching samples at that step) and
        the first 16 of them (split, sample index, output, score, extra fields); an output longer
        than 20,000 characters is cut there (``cut``, with its length in ``chars``). ``prompt``
        is the input matched most often, shown once; outputs whose own input differs (possible
        when aligned by index) say so with ``same_prompt: false``. At most 12 runs.
        """
        import re

        per_cell, cut, max_runs = 16, 20_000, 12
        runs = list({(r.project, r.run_id): r for r in runs}.values())
        if len(runs) > max_runs:
            raise UsageError(f"give at most {max_runs} runs")
        if prompt is not None and not re.fullmatch(r"[0-9a-f]{32}", prompt):
            raise UsageError("prompt must be 32 lower-case hex digits (an MD5 from the prompt list)")
        if prompt is not None and sample_index is not None:
            raise UsageError("give prompt= or index=, not both")
        if limit is not None and limit < 1:
            raise UsageError("limit must be at least 1")
        order = {(r.project, r.run_id): i for i, r in enumerate(runs)}
        head = [{"project": r.project, "run_id": r.run_id, "name": r.name} for r in runs]
        p: dict[str, Any] = {}
        conds = ["step IS NOT NULL"]
        if split is not None:
            p["split"] = split
            conds.append("split = $split")

        def text_of(value: str | None, is_json: bool) -> Any:
            if value is not None and is_json:
                try:
                    return json.loads(value)
                except ValueError:  # cut in the middle: shown as the stored text
                    return value
            return value

        con = connect(self.root, runs=runs, sync_state=False)
        try:
            if prompt is None and sample_index is None:
                if grep:
                    p["grep"] = grep.lower()
                    conds.append("strpos(lower(coalesce(input, '')), $grep) > 0")
                p["limit"] = min(limit or 100, 1000)
                rows = run_sql(con, f"""
                    SELECT md5(coalesce(input, '')) AS prompt, count(DISTINCT (project, run_id)) AS runs,
                           count(DISTINCT step) AS steps, count(*) AS samples, list(DISTINCT split) AS splits,
                           min(sample_index) AS first_index, count(DISTINCT sample_index) AS indices,
                           left(any_value(input), 2000) AS input, bool_or(list_contains(json_fields, 'input')) AS is_json,
                           count(*) OVER () AS total
                    FROM samples WHERE {' AND '.join(conds)} GROUP BY prompt
                    ORDER BY runs DESC, min(split), first_index, prompt LIMIT $limit""", p).to_pylist()
                splits = run_sql(con, "SELECT DISTINCT split FROM samples ORDER BY split").column("split").to_pylist()
                prompts = [{"prompt": r["prompt"], "runs": r["runs"], "steps": r["steps"], "samples": r["samples"],
                            "splits": sorted(s for s in r["splits"] if s is not None), "first_index": r["first_index"],
                            "indices": r["indices"], "input": text_of(r["input"], bool(r["is_json"]))} for r in rows]
                return clean(json.loads(json.dumps({"runs": head, "total": rows[0]["total"] if rows else 0,
                                                    "prompts": prompts, "splits": splits}, default=str)))
            if prompt is not None:
                p["h"] = prompt
                conds.append("md5(coalesce(input, '')) = $h")
            else:
                p["si"] = sample_index
                conds.append("sample_index = $si")
            where = " AND ".join(conds)
            steps = run_sql(con, f"SELECT DISTINCT step FROM samples WHERE {where} ORDER BY step", p).column("step").to_pylist()
            if step is not None:
                shown = [step] if step in steps else []
            else:
                most = min(limit or 100, 500)
                shown = steps
                if len(steps) > most:
                    every = len(steps) / most
                    shown = [steps[int(i * every)] for i in range(most - 1)] + [steps[-1]]
            inputs = run_sql(con, f"""
                SELECT md5(coalesce(input, '')) AS h, count(*) AS n, any_value(input) AS input,
                       bool_or(list_contains(json_fields, 'input')) AS is_json,
                       list(DISTINCT split) AS splits, list(DISTINCT sample_index) AS indices
                FROM samples WHERE {where} GROUP BY h ORDER BY n DESC, h""", p).to_pylist()
            p.update(steps=shown, per_cell=per_cell, cut=cut)
            got = [] if not shown else run_sql(con, f"""
                SELECT project, run_id, step, split, sample_index, left(output, $cut) AS output, length(output) AS chars,
                       score, extra, list_contains(json_fields, 'output') AS is_json, h, n
                FROM (SELECT *, md5(coalesce(input, '')) AS h,
                             row_number() OVER (PARTITION BY project, run_id, step
                                                ORDER BY split, sample_index, writer, seq) AS k,
                             count(*) OVER (PARTITION BY project, run_id, step) AS n
                      FROM samples WHERE {where} AND list_contains($steps, step))
                WHERE k <= $per_cell ORDER BY step, project, run_id, k""", p).to_pylist()
        finally:
            con.close()
        top = inputs[0] if inputs else None
        grid: dict[int, list[dict[str, Any]]] = {s: [{"n": 0, "outputs": []} for _ in runs] for s in shown}
        for r in got:
            cell = grid[r["step"]][order[(r["project"], r["run_id"])]]
            cell["n"] = r["n"]
            long = r["chars"] is not None and r["chars"] > cut
            cell["outputs"].append({
                "split": r["split"], "sample_index": r["sample_index"], "score": r["score"],
                "output": r["output"] if long else text_of(r["output"], bool(r["is_json"])),
                "chars": r["chars"], "cut": long, "same_prompt": top is not None and r["h"] == top["h"],
                "extra": json.loads(r["extra"]) if r["extra"] else {}})
        return clean(json.loads(json.dumps({
            "runs": head,
            "prompt": None if top is None else {
                "prompt": top["h"], "input": text_of(top["input"], bool(top["is_json"])),
                "splits": sorted(s for s in top["splits"] if s is not None), "indices": sorted(top["indices"])},
            "distinct_prompts": len(inputs), "steps": steps,
            "rows": [{"step": s, "cells": grid[s]} for s in shown],
            "per_cell": per_cell, "cut": cut}, default=str)))

    def trajectories(self, info: RunInfo, *, step: int | None = None, sample_index: int | None = None,
                     limit: int = 50) -> dict[str, Any]:
        """The run's trajectories (span trees) at ``step`` and ``sample_index``, with the steps there are."""
        con = connect(self.root, runs=[info], sync_state=False)
        try:
            roots, total = browse.find_trajectories(con, info, step=step, sample_index=sample_index, limit=limit)
            steps = browse.kind_steps(con, info, "spans")
        finally:
            con.close()
        return clean(json.loads(json.dumps({"total": total, "trees": [t.to_dict() for t in roots], "steps": steps},
                                           default=str)))

    def histograms(self, info: RunInfo, key: str, *, limit_steps: int = 200) -> dict[str, Any]:
        """One histogram key over the run's steps (at most ``limit_steps`` of them, evenly spread)."""
        con = connect(self.root, runs=[info], sync_state=False)
        try:
            rows = run_sql(con, "SELECT step, edges, counts, min, max, mean, std, count FROM histograms "
                                "WHERE project = $p AND run_id = $r AND key = $k ORDER BY step, writer, seq",
                           {"p": info.project, "r": info.run_id, "k": key}).to_pylist()
        finally:
            con.close()
        if len(rows) > limit_steps:
            every = len(rows) / limit_steps
            rows = [rows[int(i * every)] for i in range(limit_steps - 1)] + [rows[-1]]
        return clean({"key": key, "rows": rows})

    def images(self, info: RunInfo, key: str, *, limit_steps: int = 1000) -> dict[str, Any]:
        """One image key over the run's steps: per step its images (sha256, size, width, height,
        format, caption), at most ``limit_steps`` steps, evenly spread, the last one kept."""
        con = connect(self.root, runs=[info], sync_state=False)
        try:
            rows = run_sql(con, "SELECT step, index, sha256, size, width, height, format, caption FROM images "
                                "WHERE project = $p AND run_id = $r AND key = $k ORDER BY step, index, writer, seq",
                           {"p": info.project, "r": info.run_id, "k": key}).to_pylist()
        finally:
            con.close()
        steps: dict[int, list] = {}
        for r in rows:
            steps.setdefault(r.pop("step"), []).append(r)
        order = sorted(steps)
        if len(order) > limit_steps:
            every = len(order) / limit_steps
            order = [order[int(i * every)] for i in range(limit_steps - 1)] + [order[-1]]
        return clean({"key": key, "steps": [{"step": s, "images": steps[s]} for s in order]})

    def media_file(self, info: RunInfo, sha256: str) -> tuple[Path, str]:
        """The run's image file whose content is ``sha256`` and its content type. The path is
        made from the digest alone (``media/<sha256[:2]>/<sha256>.png|jpg``), never taken from
        the request, and must resolve inside the run folder; else :class:`RunNotFoundError`."""
        from trackstore.store.media import CONTENT_TYPES, is_sha256, media_path

        if not is_sha256(sha256):
            raise UsageError("sha256 must be 64 lower-case hex digits")
        run_dir = os.path.realpath(info.paths.dir)
        for fmt, content_type in CONTENT_TYPES.items():
            path = os.path.realpath(os.path.join(run_dir, media_path(sha256, fmt)))
            if os.path.commonpath([run_dir, path]) == run_dir and os.path.isfile(path):
                return Path(path), content_type
        raise RunNotFoundError(f"no image {sha256} in run {info.run_id}")

    def artifact_file(self, info: RunInfo, name: str, version: int, logical_path: str) -> Path:
        """The stored file of an artifact version, when the run's manifest lists it and it lies
        inside the run folder; else :class:`RunNotFoundError`."""
        con = connect(self.root, runs=[info], sync_state=False)
        try:
            rows = run_sql(con, "SELECT path FROM artifacts WHERE project = $p AND run_id = $r AND name = $n "
                                "AND version = $v AND logical_path = $l",
                           {"p": info.project, "r": info.run_id, "n": name, "v": int(version), "l": logical_path}).to_pylist()
        finally:
            con.close()
        if not rows:
            raise RunNotFoundError(f"no artifact file {name}:v{version}/{logical_path} in run {info.run_id}")
        run_dir = os.path.realpath(info.paths.dir)
        path = os.path.realpath(os.path.join(run_dir, rows[0]["path"]))
        if os.path.commonpath([run_dir, path]) != run_dir or not os.path.isfile(path):
            raise RunNotFoundError(f"artifact file {logical_path!r} is not inside its run folder")
        return Path(path)


SETTLED_S = 2.0  # a metrics folder unchanged for this long is trusted by its own stat (below)


def _fingerprint(r: RunInfo) -> tuple[list | None, tuple | None]:
    """``(files or None, fingerprint)`` of a run's metrics parts, which identifies its curve.

    Part files are immutable and a compaction swaps the whole folder, so a folder whose
    modification time is older than :data:`SETTLED_S` is identified by its inode and mtime (one
    ``stat``, files not listed: what makes a 1,000-run chart cheap to answer again). A folder
    changed more recently (a live run, or a filesystem with coarse timestamps) is identified by
    every file's path, size and mtime.
    """
    folder = r.paths.kind_dir("metrics")
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return [], ("none",)
    if time.time() - st.st_mtime > SETTLED_S:
        return None, ("dir", str(folder), st.st_ino, st.st_mtime_ns)
    files = r.paths.parts("metrics")
    return files, tuple((str(p), f.st_size, f.st_mtime_ns) for p in files for f in [p.stat()])


def _x_range(x: str, lo: float | None, hi: float | None, params: dict[str, Any]) -> str:
    """The SQL condition keeping x (``step``, or ``time`` in wall seconds) within ``[lo, hi]``
    (either may be None), its bounds bound into ``params``; pushed down to the Parquet reader."""
    where = ""
    if lo is not None:
        params["lo"] = float(lo)
        where += " AND step >= ceil($lo)" if x == "step" else " AND ts >= to_timestamp($lo)"
    if hi is not None:
        params["hi"] = float(hi)
        where += " AND step <= floor($hi)" if x == "step" else " AND ts <= to_timestamp($hi)"
    return where


def _fragment(xs: str, ys: str, n: int, vmin: float, vmax: float) -> str:
    """The members of one run's curve, as JSON text (the lists as DuckDB wrote them)."""
    return f'"x": {xs}, "y": {ys}, "n": {int(n)}, "min": {json.dumps(vmin)}, "max": {json.dumps(vmax)}'


def _vanished(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "no such file" in text or "not found" in text or "cannot open" in text
