"""Trajectories (``spans`` rows) -> MLflow traces: one trace per trajectory, linked to the run.

A trace is sent only when it is complete: its root span has ended, or the run itself has ended
(then spans still open are sent as unfinished). Rows of incomplete traces of a live run are
*deferred*: not acknowledged, so the next sync presents the whole trace again.

Idempotency: each MLflow trace carries the tag ``trackstore.trace_id``; before creating a trace
the adapter searches for that tag and skips traces that exist. Resending a batch after a cut
therefore never creates a second copy.

Fidelity: original start/end times (ns), span names, types (llm/tool/agent/reward -> MLflow
LLM/TOOL/AGENT/EVALUATOR; an ``other`` span named like a judge, grader or verifier is an
EVALUATOR too), inputs, outputs, attributes, status and error; the trace-level step,
sample_index, rollout_n, validate and reward become trace tags, so the MLflow UI can filter on them.

What the MLflow UI shows (docs/sync.md):

* The trace list's Request and Response columns: the first user message of the trajectory and
  its final answer (:func:`request_text`, :func:`response_text`), cut to MLflow's preview
  length. The spans' own inputs and outputs are kept as logged.
* A failed span: status ERROR with the error text as the status description, and an
  ``exception`` event (type and message split as ``ValueError: boom`` was recorded); a trace
  with a failed span has the state ERROR, so the trace list and header show it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from trackstore.records.samples import decode_json
from trackstore.store.vocab import RunStatus

from .adapter import SendResult
from .trajectories import ready_trajectories

TRACE_TAG = "trackstore.trace_id"
_SPAN_TYPES = {"llm": "LLM", "tool": "TOOL", "agent": "AGENT", "reward": "EVALUATOR", "other": "UNKNOWN"}
_JUDGE = re.compile(r"judge|grader|verifier|reward|critic", re.IGNORECASE)
PREVIEW_CHARS = 1000  # MLflow's own preview length (open source server)


def span_type(row: dict) -> str:
    """The MLflow span type of a span row."""
    if row["kind"] == "other" and _JUDGE.search(row["name"] or ""):
        return "EVALUATOR"
    return _SPAN_TYPES.get(row["kind"], "UNKNOWN")


def _text(value: Any, role: str | None = None, first: bool = True) -> str | None:
    """Readable text of a logged input or output: a message's content, a chat's first message
    of ``role`` (or last, with ``first=False``), a plain string; other values as compact JSON."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for k in ("messages", "chat", "conversation"):
            if isinstance(value.get(k), list):
                return _text(value[k], role, first)
        if isinstance(value.get("content"), str) and (role is None or value.get("role") in (None, role)):
            return value["content"]
        for k in ("prompt", "question", "query", "input", "answer", "response", "output", "text"):
            if isinstance(value.get(k), str):
                return value[k]
    if isinstance(value, list):
        msgs = [m for m in value if isinstance(m, dict) and "content" in m]
        if msgs:
            picked = [m for m in msgs if role is None or m.get("role") == role] or msgs
            return _text(picked[0] if first else picked[-1])
    return json.dumps(value, ensure_ascii=False, default=str)


def _preview(text: str | None) -> str | None:
    if not text:
        return None
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 3] + "..."


def _whole(text: str | None) -> str | None:
    return text or None


def request_text(root: dict, spans: list[dict], cut: bool = True) -> str | None:
    """The trajectory's first user message: the root's inputs if it has any, else, from the
    earliest span on, the first chat message of role ``user`` or the inputs of a span named
    ``user`` (``prompt``, ``question``, ``input``), else the first span's inputs. Cut to
    MLflow's preview length unless ``cut`` is False."""
    fit = _preview if cut else _whole
    if decode_json(root.get("inputs")) is not None:
        return fit(_text(decode_json(root["inputs"]), "user"))
    ordered = [s for s in spans if s is not root]  # by start time
    for s in ordered:
        v = decode_json(s.get("inputs"))
        if v is None:
            continue
        if (s["name"] or "").lower() in ("user", "prompt", "question", "input"):
            return fit(_text(v, "user"))
        if isinstance(v, dict) and isinstance(v.get("messages"), list):
            v = v["messages"]
        if isinstance(v, list) and any(isinstance(m, dict) and m.get("role") == "user" for m in v):
            return fit(_text(v, "user"))
        if isinstance(v, dict) and v.get("role") == "user":
            return fit(_text(v))
    for s in ordered:
        if decode_json(s.get("inputs")) is not None:
            return fit(_text(decode_json(s["inputs"])))
    return None


def response_text(root: dict, spans: list[dict], cut: bool = True) -> str | None:
    """The trajectory's final answer: the root's outputs if it has any, else the outputs of the
    last LLM span to end (the last span with outputs if there is no LLM span). Cut to MLflow's
    preview length unless ``cut`` is False."""
    fit = _preview if cut else _whole
    if decode_json(root.get("outputs")) is not None:
        return fit(_text(decode_json(root["outputs"]), "assistant", first=False))
    def end(s):
        return (s["end_ns"] or s["start_ns"] or 0, s["start_ns"] or 0)
    done = [s for s in spans if s is not root and decode_json(s.get("outputs")) is not None]
    llm = [s for s in done if s["kind"] == "llm"] or done
    if not llm:
        return None
    last = max(llm, key=end)
    return fit(_text(decode_json(last["outputs"]), "assistant", first=False))


def _split_error(error: str) -> tuple[str, str]:
    """``"ValueError: boom"`` -> ``("ValueError", "boom")``; a message without a type -> ``("Error", msg)``."""
    head, sep, rest = error.partition(": ")
    if sep and re.fullmatch(r"[A-Za-z_][\w.]*", head):
        return head, rest
    return "Error", error


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


def _status(row: dict):
    """The MLflow span status of a span row: a failed span's error text is its description."""
    from mlflow.entities import SpanStatus

    code = {"ok": "OK", "error": "ERROR"}.get(row["status"], "UNSET")
    if code == "ERROR":
        return SpanStatus("ERROR", description=row.get("error") or "error")
    return code


def _record_error(span, row: dict, at_ns: int) -> None:
    """An ``exception`` event on a failed span (MLflow's tree marks the span from it)."""
    if row["status"] != "error":
        return
    from mlflow.entities import SpanEvent

    etype, message = _split_error(row.get("error") or "error")
    span.add_event(SpanEvent("exception", timestamp=at_ns,
                             attributes={"exception.type": etype, "exception.message": message,
                                         "exception.stacktrace": row.get("error") or ""}))


def send_traces(adapter, rows, cursor) -> SendResult:
    """Create the complete traces among ``rows`` that MLflow does not hold yet."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # export before we acknowledge
    result = SendResult()
    client = adapter.client
    rid = cursor.remote["run_id"]
    exp_id = cursor.remote["experiment_id"]
    run_live = getattr(adapter, "_run_status", RunStatus.FINISHED) == RunStatus.RUNNING
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
    request, response = request_text(root, spans, cut=False), response_text(root, spans, cut=False)
    # the root span (the episode) shows what the trajectory was asked and answered when it
    # logged no inputs/outputs of its own
    inputs = decode_json(root["inputs"])
    inputs = inputs if inputs is not None else request
    outputs = decode_json(root["outputs"])
    outputs = outputs if outputs is not None else response
    top = adapter.call("start trace", client.start_trace, root["name"], span_type=span_type(root),
                      inputs=inputs, attributes=_attributes(root), tags=tags, experiment_id=exp_id,
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
                               span_type=span_type(s), inputs=decode_json(s["inputs"]),
                               attributes=_attributes(s), start_time_ns=s["start_ns"])
            ids[s["span_id"]] = span.span_id
            opened.append((s, span))
            pending.remove(s)
            progressed = True
        if not progressed:  # a parent cycle cannot happen in a span tree; be safe anyway
            for s in pending:
                s["parent_span_id"] = root["span_id"]
    for s, span in reversed(opened):  # children end before their parents
        _record_error(span, s, end_of[s["span_id"]])
        adapter.call("end span", client.end_span, trace_id=mlflow_trace_id, span_id=span.span_id,
                    outputs=decode_json(s["outputs"]), status=_status(s), end_time_ns=end_of[s["span_id"]])
    _record_error(top, root, end_of[root["span_id"]])
    _set_trace_info(top, _preview(request), _preview(response), failed=any(s["status"] == "error" for s in spans),
                    metadata=getattr(adapter, "trace_source", {}))
    adapter.call("end trace", client.end_trace, mlflow_trace_id, outputs=outputs, status=_status(root),
                end_time_ns=end_of[root["span_id"]])


def _set_trace_info(top, request: str | None, response: str | None, failed: bool, metadata: dict[str, str]) -> None:
    """The trace list's Request/Response previews, the ERROR state of a trace with a failed
    span, and the training run's ``mlflow.source.*``/``mlflow.user`` as the trace's metadata
    (MLflow fills them from the sync process, which is not the source), set on the trace while
    it is open (MLflow exports it when it ends)."""
    import mlflow
    from mlflow.tracing.provider import with_active_span

    with with_active_span(top):
        mlflow.update_current_trace(request_preview=request or None, response_preview=response or None,
                                    state="ERROR" if failed else None, metadata=metadata or None)


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
