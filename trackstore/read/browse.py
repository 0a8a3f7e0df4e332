"""One run's records beyond metrics, as ``trackstore show``, ``samples`` and ``trace`` present them.

* :func:`record_counts`: how many samples, spans and trajectories, histograms and artifacts a
  run holds (``show`` prints them beside the metric counts).
* :func:`find_samples`: validation generations filtered by step, split, text and score, decoded
  back to what was logged (:func:`trackstore.records.samples.decode_row`).
* :func:`find_trajectories`: span trees, one per trace, children in start order;
  :func:`trace_sample_indices`: the sample indices they can be picked by.

Every function takes a connection from :func:`trackstore.read.views.connect` (ideally limited
to the run with ``runs=[info]``) and binds every user value as a parameter. They live here, not
in the CLI, so a notebook gets the same answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..records.samples import decode_json, decode_row
from ..store.arrays import to_pylist
from ..store.vocab import Kind
from .views import run_sql

if TYPE_CHECKING:  # pragma: no cover
    from .listing import RunInfo

_ONE_RUN = "project = $project AND run_id = $run_id"


def _params(run: RunInfo, **more: Any) -> dict[str, Any]:
    return {"project": run.project, "run_id": run.run_id, **more}


def _one_run_where(run: RunInfo, **equal: Any) -> tuple[list[str], dict[str, Any]]:
    """The conditions and bound parameters selecting the rows of ``run`` whose columns equal the
    given values; a value of None filters nothing. Column names are ours, values always bound."""
    given = {column: value for column, value in equal.items() if value is not None}
    return [_ONE_RUN, *(f"{column} = ${column}" for column in given)], _params(run, **given)


def record_counts(con, run: RunInfo) -> dict[str, dict[str, Any]]:
    """Per record kind other than metrics, the counts ``show`` prints.

    ``samples``: rows, steps (distinct), splits (sorted); ``spans``: spans (one per span, final
    row kept), trajectories (distinct traces), steps; ``histograms``: rows, keys; ``artifacts``:
    names, versions, files; ``images``: rows, keys.
    """
    p = _params(run)

    def one(sql: str) -> dict[str, Any]:
        return to_pylist(run_sql(con, sql, p))[0]

    samples = one(f"SELECT count(*) AS rows, count(DISTINCT step) AS steps, list(DISTINCT split ORDER BY split) AS splits, "
                  f"min(step) AS first_step, max(step) AS last_step FROM samples WHERE {_ONE_RUN}")
    spans = one(f"SELECT count(*) AS spans, count(DISTINCT trace_id) AS trajectories, count(DISTINCT step) AS steps, "
                f"min(step) AS first_step, max(step) AS last_step FROM spans WHERE {_ONE_RUN}")
    histograms = one(f"SELECT count(*) AS rows, count(DISTINCT key) AS keys FROM histograms WHERE {_ONE_RUN}")
    artifacts = one(f"SELECT count(DISTINCT name) AS names, count(DISTINCT (name, version)) AS versions, "
                    f"count(*) AS files FROM artifacts WHERE {_ONE_RUN}")
    images = one(f"SELECT count(*) AS rows, count(DISTINCT key) AS keys FROM images WHERE {_ONE_RUN}")
    samples["splits"] = [s for s in samples["splits"] or [] if s is not None]
    return {"samples": samples, "spans": spans, "histograms": histograms, "artifacts": artifacts, "images": images}


def artifact_versions(con, run: RunInfo, name: str | None = None) -> list[dict[str, Any]]:
    """One row per artifact version of ``run`` (or of artifact ``name``): name, version, type,
    storage, files, bytes, step, aliases it holds now, logged (first file's time), in name and
    version order."""
    where = _ONE_RUN + (" AND name = $name" if name is not None else "")
    params = _params(run, **({"name": name} if name is not None else {}))
    sql = ("SELECT name, version, any_value(type) AS type, coalesce(any_value(storage), 'copy') AS storage, "
           "count(*) AS files, sum(size)::BIGINT AS bytes, any_value(step) AS step, any_value(aliases) AS aliases, "
           f"min(ts) AS logged FROM artifacts WHERE {where} GROUP BY name, version ORDER BY name, version")
    return to_pylist(run_sql(con, sql, params))


def kind_steps(con, run: RunInfo, kind: str) -> list[int]:
    """The distinct steps at which the run holds ``samples`` or ``spans``, ascending."""
    if kind not in (Kind.SAMPLES, Kind.SPANS):
        raise ValueError(f"kind must be samples or spans, got {kind!r}")
    table = run_sql(con, f"SELECT DISTINCT step FROM {kind} WHERE {_ONE_RUN} AND step IS NOT NULL ORDER BY step",
                    _params(run))
    return table.column("step").to_pylist()


def trace_sample_indices(con, run: RunInfo, step: int | None) -> list[int]:
    """The distinct sample indices of the run's trajectories at ``step`` (every step when None),
    ascending: what ``trace --sample-index`` can pick."""
    conds, p = _one_run_where(run, step=step)
    table = run_sql(con, f"SELECT DISTINCT sample_index FROM spans WHERE {' AND '.join(conds)} AND sample_index IS NOT NULL "
                         "ORDER BY sample_index", p)
    return table.column("sample_index").to_pylist()


def find_samples(con, run: RunInfo, *, step: int | None = None, split: str | None = None, grep: str | None = None,
                 min_score: float | None = None, limit: int = 0) -> tuple[list[dict], int]:
    """``(rows, total)``: the run's samples that pass every filter, decoded, newest step first
    (then split, sample_index); at most ``limit`` rows (0 = all), ``total`` counts them all.

    ``grep`` matches a case-insensitive substring of the input or the output (as stored: the
    JSON text of a chat message list). ``min_score`` keeps scores ``>=`` it (NaN and NULL never).
    """
    conds, p = _one_run_where(run, step=step, split=split)
    if grep:
        p["grep"] = grep.lower()
        conds.append("(strpos(lower(coalesce(input, '')), $grep) > 0 OR strpos(lower(coalesce(output, '')), $grep) > 0)")
    if min_score is not None:
        p["min_score"] = float(min_score)
        conds.append("score >= $min_score AND NOT isnan(score)")
    where = " AND ".join(conds)
    total = run_sql(con, f"SELECT count(*) AS n FROM samples WHERE {where}", p).column("n")[0].as_py()
    sql = (f"SELECT step, split, sample_index, input, output, score, extra, json_fields FROM samples WHERE {where} "
           "ORDER BY step DESC, split, sample_index, writer, seq")
    if limit:
        sql += f" LIMIT {int(limit)}"
    return [decode_row(r) for r in run_sql(con, sql, p).to_pylist()], total


@dataclass
class SpanNode:
    """One span of a trajectory with its children (in start order); ``inputs``, ``outputs`` and
    ``attributes`` decoded from JSON."""

    row: dict[str, Any]
    children: list[SpanNode] = field(default_factory=list)

    @property
    def inputs(self) -> Any:
        return decode_json(self.row.get("inputs"))

    @property
    def outputs(self) -> Any:
        return decode_json(self.row.get("outputs"))

    @property
    def attributes(self) -> dict:
        value = decode_json(self.row.get("attributes"))
        return value if isinstance(value, dict) else {}

    @property
    def duration_s(self) -> float | None:
        start, end = self.row.get("start_ns"), self.row.get("end_ns")
        return None if start is None or end is None else (end - start) / 1e9

    def to_dict(self) -> dict[str, Any]:
        """The span as JSON-ready data: its columns (JSON fields decoded) and its children."""
        out = {k: v for k, v in self.row.items() if k not in ("inputs", "outputs", "attributes", "writer", "seq", "ts")}
        out.update(inputs=self.inputs, outputs=self.outputs, attributes=self.attributes,
                   duration_s=self.duration_s, children=[c.to_dict() for c in self.children])
        return out


def find_trajectories(con, run: RunInfo, *, step: int | None = None, sample_index: int | None = None,
                      limit: int = 0) -> tuple[list[SpanNode], int]:
    """``(roots, total)``: the trajectories of the run at ``step`` (every step when None) and
    ``sample_index``, each as its root :class:`SpanNode`; ordered by step, sample_index,
    rollout_n, start time; at most ``limit`` (0 = all), ``total`` counts them all.

    A span whose parent was never written (a crash before the parent's first row) hangs under
    the root, so nothing logged is hidden.
    """
    conds, p = _one_run_where(run, step=step, sample_index=sample_index)
    where = " AND ".join(conds)
    traces = run_sql(con, f"SELECT trace_id, min(step) AS step, min(sample_index) AS sample_index, "
                          f"min(rollout_n) AS rollout_n, min(start_ns) AS start_ns FROM spans WHERE {where} "
                          "GROUP BY trace_id ORDER BY step NULLS LAST, sample_index NULLS LAST, rollout_n NULLS LAST, "
                          "start_ns, trace_id", p).column("trace_id").to_pylist()
    total = len(traces)
    if limit:
        traces = traces[:limit]
    if not traces:
        return [], total
    p2 = _params(run, traces=traces)
    rows = run_sql(con, f"SELECT * EXCLUDE (project, run_id) FROM spans WHERE {_ONE_RUN} AND list_contains($traces, trace_id) "
                        "ORDER BY start_ns, seq", p2).to_pylist()
    by_trace: dict[str, list[dict]] = {}
    for r in rows:
        by_trace.setdefault(r["trace_id"], []).append(r)
    return [_tree(by_trace.get(t, [])) for t in traces if by_trace.get(t)], total


def _tree(rows: list[dict]) -> SpanNode:
    nodes = {r["span_id"]: SpanNode(r) for r in rows}
    roots = [n for n in nodes.values() if n.row.get("parent_span_id") is None]
    root = roots[0] if roots else SpanNode({**rows[0], "name": "(no root span)", "kind": "agent", "span_id": None,
                                             "parent_span_id": None, "start_ns": None, "end_ns": None,
                                             "status": None, "reward": None, "inputs": None, "outputs": None,
                                             "attributes": None, "error": None})
    for n in nodes.values():
        if n is root:
            continue
        parent = nodes.get(n.row.get("parent_span_id") or "")
        (parent if parent is not None and parent is not n else root).children.append(n)
    return root  # a second root (two writers of one trace id) hangs under the first


def as_text(value: Any) -> str:
    """A decoded input or output as text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
