"""Answers built on the SQL views: metric overviews, config differences, downsampled curves.

These are what ``trackstore show``, ``compare`` and ``plot`` print; they live here (not in the
CLI) so notebooks get the same answers. The SQL ones take a connection from
:func:`trackstore.read.views.connect` (ideally limited to the runs in question with ``runs=``)
and bind every user value as a parameter; :func:`curves` reads the runs' files directly
(:mod:`trackstore.read.points`), which for one run is several times faster than a query.

Curves are downsampled at query time, never at storage time: the store keeps every point, and
a curve of N points is cut into ``points`` equal-width buckets of x (step or seconds since the
run's first point), each drawn as the mean of its points (with min/max kept for envelopes).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Sequence

from ..errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .listing import RunInfo

_GLOB = re.compile(r"[*?\[]")


def key_filter(patterns: Sequence[str] | None, params: dict, column: str = "key") -> str:
    """A SQL condition matching any of ``patterns`` (exact keys, or globs with ``*``/``?``/``[``)."""
    if not patterns:
        return "TRUE"
    parts = []
    for i, pat in enumerate(patterns):
        name = f"key{i}"
        params[name] = pat
        # a key may itself hold glob characters ('acc@[1]'): it also matches as written
        parts.append(f"({column} GLOB ${name} OR {column} = ${name})" if _GLOB.search(pat) else f"{column} = ${name}")
    return "(" + " OR ".join(parts) + ")"


def _run_filter(runs: Iterable[RunInfo], params: dict) -> str:
    parts = []
    for i, r in enumerate(runs):
        params[f"p{i}"], params[f"r{i}"] = r.project, r.run_id
        parts.append(f"(project = $p{i} AND run_id = $r{i})")
    return "(" + " OR ".join(parts) + ")" if parts else "FALSE"


def metric_overview(con, runs: Sequence[RunInfo], keys: Sequence[str] | None = None) -> pa.Table:
    """Per run and key: points, first/last step, last (most recently logged), min, max, mean."""
    params: dict[str, Any] = {}
    sql = (f"SELECT * FROM metric_summary WHERE {_run_filter(runs, params)} AND {key_filter(keys, params)} "
           "ORDER BY project, run_id, key")
    from .views import run_sql  # not at import: flatten (used by sync adapters) needs no pyarrow

    return run_sql(con, sql, params)


OVERVIEW_COLUMNS = ("key", "points", "first_step", "last_step", "last", "min", "max", "mean")


def run_overview(info: RunInfo, open_connection: Callable[[], ContextManager[Any]]) -> dict[str, Any]:
    """What ``trackstore show`` prints of a run's data: ``{"metrics": [...], "records": {...}}``,
    per metric key (every key, sorted) its :data:`OVERVIEW_COLUMNS` from the ``metric_summary``
    view, and the counts of :func:`trackstore.read.browse.record_counts`.

    Derived from the run's part files alone, so the store's catalog keeps it for the parts it was
    derived from (:meth:`trackstore.store.catalog.Catalog.overview`): while no part of the run
    changed, the answer costs ``stat`` calls and neither DuckDB nor pyarrow is started.
    ``open_connection()`` gives a :func:`trackstore.read.views.connect` connection (as a context
    manager) when the parts must be read. A run with a damaged part is never kept (its answer
    depends on what the views skip, and says so each time).
    """
    catalog = info.catalog
    basis = None
    if catalog is not None:
        basis, kept = catalog.overview(info.project, info.run_id)
        if kept is not None:
            return kept
    from ..store.arrays import to_pylist  # Table.to_pylist would import pandas
    from .browse import record_counts

    with open_connection() as con:
        metrics = [{c: m[c] for c in OVERVIEW_COLUMNS} for m in to_pylist(metric_overview(con, [info]))]
        found = {"metrics": metrics, "records": record_counts(con, info)}
    if catalog is not None:
        catalog.put_overview(info.project, info.run_id, basis, found)
        catalog.save()
    return found


def select_keys(metrics: list[dict[str, Any]], patterns: Sequence[str] | None) -> list[dict[str, Any]]:
    """The rows of ``metrics`` (each with a ``key``) whose key matches one of ``patterns`` as
    :func:`key_filter` matches (exact, or SQL ``GLOB``); all of them without patterns."""
    if not patterns:
        return metrics
    wanted = set(matching_keys(patterns, [m["key"] for m in metrics]))
    return [m for m in metrics if m["key"] in wanted]


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (how configs are compared and shown)."""
    out: dict[str, Any] = {}
    for k, v in (d or {}).items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def config_diff(runs: Sequence[RunInfo], *, include_equal: bool = False) -> list[dict[str, Any]]:
    """Config keys (flattened) whose values differ between runs: ``{"key", <run_id>: value...}``."""
    flat = [flatten(r.meta.get("config") or {}) for r in runs]
    keys = sorted(set().union(*flat)) if flat else []
    rows = []
    missing = object()
    for k in keys:
        values = [f.get(k, missing) for f in flat]
        canon = {json.dumps(v, sort_keys=True, default=str) if v is not missing else "\0missing" for v in values}
        if include_equal or len(canon) > 1:
            row: dict[str, Any] = {"key": k}
            for r, v in zip(runs, values):
                row[r.run_id] = None if v is missing else v
            rows.append(row)
    return rows


def curves(runs: Sequence[RunInfo], keys: Sequence[str], *, points: int = 1000, smooth: int | None = None,
           x: str = "step", on_corrupt: str = "warn") -> pa.Table:
    """Downsampled curves: ``project, run_id, key, x, value, min, max, n`` ordered by run, key, x.

    ``keys`` are exact keys or globs (``*``, ``?``, ``[``, matched as SQL ``GLOB`` does).
    ``x`` is ``step`` or ``time`` (seconds since the run's first point of that key).
    ``smooth=N`` first replaces each value by the mean of the last N points (a trailing moving
    average over logged points, in log order), then the curve is cut into at most ``points``
    buckets. NaN and infinite values are left out of the drawn curve.

    A curve is a question about one run: its points are read straight from the run's part
    files (:mod:`trackstore.read.points`, which reads only the row groups holding the key in a
    compacted run) and numpy cuts them into buckets. Damaged files are skipped with a
    warning, or raise with ``on_corrupt="error"``, as the SQL views do.
    """
    import numpy as np
    import pyarrow as pa

    from .points import read_points, run_keys

    if x not in ("step", "time"):
        raise UsageError(f"--x must be 'step' or 'time', got {x!r}")
    if not keys:
        raise UsageError("give at least one --key")
    points = int(points)
    if points < 2:
        raise UsageError("points must be at least 2")
    window = int(smooth) if smooth and int(smooth) > 1 else 1
    columns = ("step", "value") + (("ts", "seq") if window > 1 or x == "time" else ())
    names: dict[str, list[str]] = {"project": [], "run_id": [], "key": []}
    xs, vs = [], []
    for run in runs:
        wanted = matching_keys(keys, run_keys(run.paths, on_corrupt=on_corrupt)) if any(
            _GLOB.search(k) for k in keys) else sorted(set(keys))
        for key, rows in sorted(read_points(run.paths, wanted, columns, on_corrupt=on_corrupt).items()):
            step = rows.column("step").to_numpy()
            value = rows.column("value").to_numpy()
            if window > 1 or x == "time":
                ts = rows.column("ts").cast(pa.int64()).to_numpy()
                order = np.lexsort((rows.column("seq").to_numpy(), ts, step))  # log order, as the views
            else:
                ts, order = None, np.argsort(step, kind="stable")
            finite = np.isfinite(value[order])
            order = order[finite]
            if not len(order):
                continue
            v = value[order]
            if window > 1:  # trailing mean over the last `window` finite points
                c = np.concatenate(([0.0], np.cumsum(v)))
                i = np.arange(1, len(v) + 1)
                lo = np.maximum(i - window, 0)
                v = (c[i] - c[lo]) / (i - lo)
            if x == "step":
                px = step[order].astype(np.float64)
            else:  # seconds since the curve's first point, from exact integer microseconds
                t = ts[order]
                by_x = np.argsort(t, kind="stable")
                px, v = (t[by_x] - t[by_x[0]]).astype(np.float64) / 1e6, v[by_x]
            xs.append(px)
            vs.append(v)
            for col, val in (("project", run.project), ("run_id", run.run_id), ("key", key)):
                names[col].append(val)
    return _buckets(names, xs, vs, points)


def matching_keys(patterns: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The ``keys`` matching any of ``patterns`` (exact, or globs with SQL ``GLOB`` semantics)."""
    exact = set(patterns)  # a key holding glob characters ('acc@[1]') matches as written too
    globs = [p for p in patterns if _GLOB.search(p)]
    found = {k for k in keys if k in exact}
    if globs and keys:
        import duckdb

        params: dict[str, Any] = {"keys": list(keys)}
        con = duckdb.connect(":memory:")
        try:
            rows = con.execute(f"SELECT k FROM unnest($keys::VARCHAR[]) t(k) WHERE {key_filter(globs, params, 'k')}",
                               params).fetchall()
        finally:
            con.close()
        found.update(r[0] for r in rows)
    return sorted(found)


def _buckets(names: dict[str, list], xs: list, vs: list, points: int) -> pa.Table:
    """Cut each curve (``xs[i]``, ``vs[i]``: sorted by x, finite) into buckets, as a table.

    A curve of at most ``points`` points (or a single x) keeps one bucket per distinct x; a
    longer one is cut into ``points`` equal-width buckets of x, each drawn at the mean x and
    mean value of its points, with their min, max and count.
    """
    import numpy as np
    import pyarrow as pa

    cols: dict[str, list] = {c: [] for c in (*names, "x", "value", "min", "max", "n")}
    for i, (cx, cv) in enumerate(zip(xs, vs)):
        x0, x1 = cx[0], cx[-1]
        if len(cx) <= points or x1 == x0:
            edge = cx[1:] != cx[:-1]  # one bucket per distinct x
        else:
            b = np.minimum(np.floor((cx - x0) * points / (x1 - x0)), points - 1)
            edge = b[1:] != b[:-1]
        at = np.concatenate(([0], np.flatnonzero(edge) + 1))
        counts = np.diff(np.append(at, len(cx)))
        for c in names:
            cols[c].append([names[c][i]] * len(at))
        cols["x"].append(np.add.reduceat(cx, at) / counts)
        cols["value"].append(np.add.reduceat(cv, at) / counts)
        cols["min"].append(np.minimum.reduceat(cv, at))
        cols["max"].append(np.maximum.reduceat(cv, at))
        cols["n"].append(counts.astype(np.int64))
    types = {**{c: pa.string() for c in names}, "x": pa.float64(), "value": pa.float64(), "min": pa.float64(),
             "max": pa.float64(), "n": pa.int64()}
    return pa.table({c: pa.array([x for part in v for x in part] if c in names else (np.concatenate(v) if v else []),
                                 types[c]) for c, v in cols.items()})


def run_label(run: RunInfo, runs: Sequence[RunInfo]) -> str:
    """A short label for legends: the run name, made unique with the run's handle when needed
    (:func:`trackstore.read.refs.handles`, among ``runs``)."""
    from .refs import handles

    same = [r for r in runs if r.name == run.name]
    if len(same) == 1:
        return run.name
    return f"{run.name} ({handles([run.run_id], [r.run_id for r in runs])[run.run_id]})"
