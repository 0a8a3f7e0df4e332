"""Trajectories (``spans`` rows) -> MLflow traces: one trace per trajectory, linked to the run.

A trace is sent only when it is complete: its root span has ended, or the run itself has ended
(then spans still open are sent as unfinished). Rows of incomplete traces of a live run are
*deferred*: not acknowledged, so the next sync presents the whole trace again.

Idempotency: each MLflow trace carries the tag ``trackstore.trace_id``; before creating a trace
the adapter searches for that tag and skips traces that exist. Resending a batch after a cut
therefore never creates a second copy.

Fidelity: original start/end times (ns), span names, types (llm/tool/reward/agent -> MLflow
LLM/TOOL/UNKNOWN/AGENT), inputs, outputs, attributes, status and error; the trace-level step,
sample_index, rollout_n, validate and reward become trace tags, so the MLflow UI can filter on them.
"""

from __future__ import annotations

from trackstore.records.samples import decode_json

from .adapter import SendResult
from .trajectories import ready_trajectories

TRACE_TAG = "trackstore.trace_id"
_SPAN_TYPES = {"llm": "LLM", "tool": "TOOL", "agent": "AGENT", "reward": "UNKNOWN", "other": "UNKNOWN"}


def _attributes(row: dict) -> dict:
    attrs = decode_json(row.get("attributes")) or {}
    if not isinstance(attrs, dict):
        attrs = {"attributes": attrs}
    attrs = {f"trackstore.{k}" if k.startswith("mlflow") else k: v for k, v in attrs.items()}
    attrs["trackstore.kind"] = row["kind"]
    if row["status"] == "unfinished":
        attrs["trackstore.status"] = "unfinished"
    if row.get("error"):
        attrs["trackstore.error"] = row["error"]
    return attrs


def _status(row: dict) -> str:
    return {"ok": "OK", "error": "ERROR"}.get(row["status"], "UNSET")


def send_traces(adapter, rows, cursor) -> SendResult:
    """Create the complete traces among ``rows`` that MLflow does not hold yet."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # export before we acknowledge
    result = SendResult()
    client = adapter.client
    rid = cursor.remote["run_id"]
    exp_id = cursor.remote["experiment_id"]
    run_live = getattr(adapter, "_run_status", "finished") == "running"
    for trace_id, root, spans in ready_trajectories(rows, run_live, result):
        existing = adapter.call("search traces", client.search_traces, locations=[exp_id],
                               filter_string=f"tags.`{TRACE_TAG}` = '{trace_id}'", max_results=1,
                               include_spans=False)
        if existing:
            continue
        _create_trace(adapter, client, exp_id, rid, trace_id, root, spans)
    return result


def _create_trace(adapter, client, exp_id: str, rid: str, trace_id: str, root: dict, spans: list[dict]) -> None:
    tags = {TRACE_TAG: trace_id}
    for field in ("step", "sample_index", "rollout_n", "validate", "reward"):
        if root.get(field) is not None:
            tags[f"trackstore.{field}"] = str(root[field])
    end_of = {s["span_id"]: (s["end_ns"] if s["end_ns"] is not None else max(x["start_ns"] for x in spans))
              for s in spans}
    top = adapter.call("start trace", client.start_trace, root["name"], span_type=_SPAN_TYPES.get(root["kind"], "UNKNOWN"),
                      inputs=decode_json(root["inputs"]), attributes=_attributes(root), tags=tags, experiment_id=exp_id,
                      start_time_ns=root["start_ns"], run_id=rid)
    mlflow_trace_id = top.trace_id
    ids = {root["span_id"]: top.span_id}
    known = {s["span_id"] for s in spans}
    pending = [s for s in spans if s is not root]
    opened = []
    while pending:  # parents before children (a parent may start after a checkpointed child)
        progressed = False
        for s in list(pending):
            parent = s["parent_span_id"] if s["parent_span_id"] in known else root["span_id"]  # orphan -> root
            if parent not in ids:
                continue
            span = adapter.call("start span", client.start_span, s["name"], trace_id=mlflow_trace_id, parent_id=ids[parent],
                               span_type=_SPAN_TYPES.get(s["kind"], "UNKNOWN"), inputs=decode_json(s["inputs"]),
                               attributes=_attributes(s), start_time_ns=s["start_ns"])
            ids[s["span_id"]] = span.span_id
            opened.append((s, span))
            pending.remove(s)
            progressed = True
        if not progressed:  # a parent cycle cannot happen in a span tree; be safe anyway
            for s in pending:
                s["parent_span_id"] = root["span_id"]
    for s, span in reversed(opened):  # children end before their parents
        adapter.call("end span", client.end_span, trace_id=mlflow_trace_id, span_id=span.span_id,
                    outputs=decode_json(s["outputs"]), status=_status(s), end_time_ns=end_of[s["span_id"]])
    adapter.call("end trace", client.end_trace, mlflow_trace_id, outputs=decode_json(root["outputs"]), status=_status(root),
                end_time_ns=end_of[root["span_id"]])


def count_traces(adapter, cursor) -> int:
    """How many trackstore traces the run's experiment holds (for --verify and tests)."""
    client = adapter.client
    total, token = 0, None
    while True:
        page = adapter.call("search traces", client.search_traces, locations=[cursor.remote["experiment_id"]],
                           run_id=cursor.remote["run_id"], max_results=500, page_token=token, include_spans=False)
        total += sum(1 for t in page if TRACE_TAG in (t.info.tags or {}))
        token = page.token
        if not token:
            return total
