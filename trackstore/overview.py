"""Answers built on the SQL views: metric overviews, config differences, downsampled curves.

These are what ``trackstore show``, ``compare`` and ``plot`` print; they live here (not in the
CLI) so notebooks get the same answers. Every function takes a connection from
:func:`trackstore.views.connect` (ideally limited to the runs in question with ``runs=``)
and binds every user value as a parameter.

Curves are downsampled at query time, never at storage time: the store keeps every point, and
a curve of N points is cut into ``points`` equal-width buckets of x (step or seconds since the
run's first point), each drawn as the mean of its points (with min/max kept for envelopes).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from .errors import UsageError
from .views import run_sql

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from .catalog import RunInfo

_GLOB = re.compile(r"[*?\[]")


def key_filter(patterns: Sequence[str] | None, params: dict, column: str = "key") -> str:
    """A SQL condition matching any of ``patterns`` (exact keys, or globs with ``*``/``?``/``[``)."""
    if not patterns:
        return "TRUE"
    parts = []
    for i, pat in enumerate(patterns):
        name = f"key{i}"
        params[name] = pat
        parts.append(f"{column} GLOB ${name}" if _GLOB.search(pat) else f"{column} = ${name}")
    return "(" + " OR ".join(parts) + ")"


def _run_filter(runs: Iterable["RunInfo"], params: dict) -> str:
    parts = []
    for i, r in enumerate(runs):
        params[f"p{i}"], params[f"r{i}"] = r.project, r.run_id
        parts.append(f"(project = $p{i} AND run_id = $r{i})")
    return "(" + " OR ".join(parts) + ")" if parts else "FALSE"


def metric_overview(con, runs: Sequence["RunInfo"], keys: Sequence[str] | None = None) -> "pa.Table":
    """Per run and key: points, first/last step, last (most recently logged), min, max, mean."""
    params: dict[str, Any] = {}
    sql = (f"SELECT * FROM metric_summary WHERE {_run_filter(runs, params)} AND {key_filter(keys, params)} "
           "ORDER BY project, run_id, key")
    return run_sql(con, sql, params)


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


def config_diff(runs: Sequence["RunInfo"], *, include_equal: bool = False) -> list[dict[str, Any]]:
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


def curves(con, runs: Sequence["RunInfo"], keys: Sequence[str], *, points: int = 1000,
           smooth: int | None = None, x: str = "step") -> "pa.Table":
    """Downsampled curves: ``project, run_id, key, x, value, min, max, n`` ordered by run, key, x.

    ``x`` is ``step`` or ``time`` (seconds since the run's first point of that key).
    ``smooth=N`` first replaces each value by the mean of the last N points (a trailing moving
    average over logged points), then the curve is cut into at most ``points`` buckets.
    NaN and infinite values are left out of the drawn curve.
    """
    if x not in ("step", "time"):
        raise UsageError(f"--x must be 'step' or 'time', got {x!r}")
    if not keys:
        raise UsageError("give at least one --key")
    points = int(points)
    if points < 2:
        raise UsageError("points must be at least 2")
    params: dict[str, Any] = {"points": points}
    where = f"{_run_filter(runs, params)} AND {key_filter(keys, params)} AND isfinite(value)"
    xexpr = "step::DOUBLE" if x == "step" else "epoch_us(ts) / 1e6"
    value = "value"
    if smooth and int(smooth) > 1:
        n = int(smooth) - 1  # an integer we made: safe in the frame clause
        value = (f"avg(value) OVER (PARTITION BY project, run_id, key ORDER BY step, ts, seq "
                 f"ROWS BETWEEN {n} PRECEDING AND CURRENT ROW)")
    sql = f"""
        WITH pts AS (
            SELECT project, run_id, key, {xexpr} AS x, {value} AS value FROM metrics WHERE {where}
        ), rng AS (
            SELECT project, run_id, key, min(x) AS x0, max(x) AS x1, count(*) AS n FROM pts GROUP BY ALL
        ), b AS (
            SELECT p.project, p.run_id, p.key, p.x - CASE WHEN $x_is_time THEN r.x0 ELSE 0 END AS x, p.value,
                   CASE WHEN r.n <= $points OR r.x1 = r.x0 THEN p.x
                        ELSE least(floor((p.x - r.x0) * $points / (r.x1 - r.x0)), $points - 1) END AS bucket
            FROM pts p JOIN rng r USING (project, run_id, key)
        )
        SELECT project, run_id, key, avg(x) AS x, avg(value) AS value, min(value) AS min, max(value) AS max,
               count(*) AS n
        FROM b GROUP BY project, run_id, key, bucket ORDER BY project, run_id, key, x
    """
    params["x_is_time"] = x == "time"
    return run_sql(con, sql, params)


def run_label(run: "RunInfo", runs: Sequence["RunInfo"]) -> str:
    """A short label for legends: the run name, made unique with an id prefix when needed."""
    same = [r for r in runs if r.name == run.name]
    return run.name if len(same) == 1 else f"{run.name} ({run.run_id[-8:]})"
