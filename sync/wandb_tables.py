"""How samples and trajectories read in wandb (translation only; the adapter logs them).

Samples: one ``wandb.Table`` per (step, split) in the history row of its step, as a training
script's ``run.log({"samples/val": table})`` puts it. wandb writes a table's history entry as
``{_type: table-file, path, sha256, size, ncols, nrows, ...}``, flattened into items
``samples/val.ncols``, ``samples/val.nrows``; readers that chart every number of a history row
(``wandb leet``, exports of ``run.history()``) then show two made-up metrics per table.
:func:`history_table` leaves those two counts out of the history entry (the table file, which
the UI reads, still has every row and column; the artifact copy wandb makes keeps its counts).

Trajectories: besides the ``trajectories`` table (one row per trajectory, its span tree as JSON in ``turns``,
exact), the same artifact holds a ``turns`` table with one row per span, readable in wandb's
table view: the trajectory's ids, the span's depth and its name indented by depth (``└``), kind,
status, error, duration, and inputs/outputs as text (a chat as ``role: content`` lines).
"""

from __future__ import annotations

import json
from typing import Any

from trackstore.records.samples import decode_json

TURN_COLUMNS = ["trace_id", "step", "sample_index", "rollout_n", "turn", "depth", "span", "kind", "status", "error",
                "duration_s", "inputs", "outputs"]


def history_table(wandb, columns: list[str], data: list[list]):
    """A ``wandb.Table`` whose history entry has no ``ncols``/``nrows`` items (see above)."""
    table = wandb.Table(columns=columns, data=data)
    as_json = table.to_json

    def to_json(run_or_artifact):
        out = as_json(run_or_artifact)
        if out.get("_type") == "table-file":  # the run's history entry, not an artifact's copy
            out.pop("ncols", None)
            out.pop("nrows", None)
        return out

    table.to_json = to_json  # wandb.log serialises each value with value.to_json(run)
    return table


def table_rows(path) -> int:
    """The number of rows of a table file wandb wrote (``media/table/....table.json``)."""
    with open(path, encoding="utf-8") as f:
        return len(json.load(f).get("data") or [])


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, list) and v and all(isinstance(m, dict) and "content" in m for m in v):
        return "\n".join(f"{m.get('role', '?')}: {_text(m['content'])}" for m in v)
    return json.dumps(v, ensure_ascii=False, default=str)


def turn_rows(trace_id: str, root: dict, spans: list[dict]) -> list[list]:
    """One row per span of one trajectory, in tree order (parents before children, by start)."""
    ids = {s["span_id"] for s in spans}
    children: dict[Any, list[dict]] = {}
    for s in spans:
        parent = None if s is root else (s["parent_span_id"] if s["parent_span_id"] in ids else root["span_id"])
        children.setdefault(parent, []).append(s)
    rows: list[list] = []

    def walk(parent, depth):
        for s in sorted(children.get(parent, []), key=lambda x: (x["start_ns"] or 0)):
            dur = None if s["end_ns"] is None else (s["end_ns"] - s["start_ns"]) / 1e9
            name = ("  " * (depth - 1) + "└ " if depth else "") + s["name"]
            rows.append([trace_id, root["step"], root["sample_index"], root["rollout_n"], len(rows), depth, name,
                         s["kind"], s["status"], s["error"], dur, _text(decode_json(s["inputs"])),
                         _text(decode_json(s["outputs"]))])
            walk(s["span_id"], depth + 1)

    walk(None, 0)
    return rows
