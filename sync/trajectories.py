"""Which trajectories of a batch of span rows are ready to become one target record.

Targets that hold a trajectory as one unit (an MLflow trace, a row of wandb's trajectories
table) need its whole tree. A span appears as ``unfinished`` checkpoint rows and then one final
row; a trajectory is ready when its root span is final, or when its run has ended (a crashed
run's open spans are sent as they were last checkpointed). A trajectory whose root span was
never written cannot become a record: while the run is live the root may still come (the rows
are deferred); once the run has ended it is reported as skipped, not left pending for ever.
"""

from __future__ import annotations

from typing import Iterator

from .adapter import SendResult

NO_ROOT_SPAN = "trajectory without a root span (the run ended before its root span was written)"


def latest_per_span(rows: list[dict]) -> list[dict]:
    """One row per span: the final row if any, else the newest checkpoint; by start time."""
    best: dict[str, dict] = {}
    for r in rows:
        cur = best.get(r["span_id"])
        if cur is None:
            best[r["span_id"]] = r
            continue
        cur_final, new_final = cur["status"] != "unfinished", r["status"] != "unfinished"
        if new_final and not cur_final or (new_final == cur_final and (r["writer"], r["seq"]) > (cur["writer"], cur["seq"])):
            best[r["span_id"]] = r
    return sorted(best.values(), key=lambda r: (r["start_ns"], r["seq"]))


def ready_trajectories(rows, run_live: bool, result: SendResult) -> Iterator[tuple[str, dict, list[dict]]]:
    """``(trace_id, root span, spans)`` of each trajectory in ``rows`` (a pyarrow Table) that is
    ready; the rows of the others are deferred or skipped on ``result``."""
    by_trace: dict[str, list[dict]] = {}
    for i, r in enumerate(rows.to_pylist()):
        r["_index"] = i
        by_trace.setdefault(r["trace_id"], []).append(r)
    for trace_id, trace_rows in by_trace.items():
        spans = latest_per_span(trace_rows)
        root = next((s for s in spans if s["parent_span_id"] is None), None)
        if root is None and not run_live:
            result.skip(NO_ROOT_SPAN, len(trace_rows))
        elif root is None or (root["status"] == "unfinished" and run_live):
            result.defer([r["_index"] for r in trace_rows])
        else:
            yield trace_id, root, spans


def rootless_rows(rows) -> int:
    """Rows of the trajectories in ``rows`` that have no root span: what
    :func:`ready_trajectories` skips once the run has ended (the dry run predicts it)."""
    by_trace: dict[str, list[dict]] = {}
    for r in rows.select(["trace_id", "span_id", "parent_span_id", "status", "writer", "seq", "start_ns"]).to_pylist():
        by_trace.setdefault(r["trace_id"], []).append(r)
    return sum(len(t) for t in by_trace.values()
               if not any(s["parent_span_id"] is None for s in latest_per_span(t)))
