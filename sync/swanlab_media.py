"""How trackstore records look inside SwanLab: samples and trajectories as text, histograms as
bar charts (SwanLab 0.10 has no histogram type). Pure rendering; the adapter logs the values.
"""

from __future__ import annotations

import json
import math
from typing import Any

from trackstore.records.samples import decode_json


def sample_text(r: dict) -> str:
    lines = []
    for field in ("input", "output"):
        if r.get(field) is not None:
            lines.append(f"[{field}]\n{r[field]}")
    if r.get("score") is not None:
        lines.append(f"[score] {r['score']}")
    extra = decode_json(r.get("extra"))
    if extra:
        lines.append("[extra] " + json.dumps(extra, ensure_ascii=False, default=str))
    return "\n\n".join(lines) or "(empty sample)"


def histogram_chart(r: dict):
    import swanlab
    from swanlab import echarts

    edges, counts = list(r["edges"]), list(r["counts"])
    labels = [f"{edges[i]:.4g}..{edges[i + 1]:.4g}" for i in range(len(counts))]
    bar = echarts.Bar()
    bar.add_xaxis(labels)
    bar.add_yaxis("count", [c if math.isfinite(c) else 0 for c in counts])
    return swanlab.ECharts(bar)


def trajectories(rows: list[dict]) -> list[tuple[str, str]]:
    """One (caption, text) per trace: the span tree, indented, with inputs and outputs."""
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        k = (r["trace_id"], r["span_id"])
        cur = best.get(k)
        if cur is None or (r["status"] != "unfinished") > (cur["status"] != "unfinished") or (
                (r["status"] != "unfinished") == (cur["status"] != "unfinished") and r["seq"] > cur["seq"]):
            best[k] = r
    traces: dict[str, list[dict]] = {}
    for r in sorted(best.values(), key=lambda r: (r["start_ns"], r["seq"])):
        traces.setdefault(r["trace_id"], []).append(r)
    out = []
    for trace_id, spans in traces.items():
        children: dict[Any, list[dict]] = {}
        ids = {s["span_id"] for s in spans}
        for s in spans:
            parent = s["parent_span_id"] if s["parent_span_id"] in ids else None
            children.setdefault(parent, []).append(s)
        lines: list[str] = []

        def walk(parent, depth, children=children, lines=lines):
            for s in children.get(parent, []):
                dur = "" if s["end_ns"] is None else f" {(s['end_ns'] - s['start_ns']) / 1e9:.3f}s"
                head = f"{'  ' * depth}- {s['name']} [{s['kind']}, {s['status']}{dur}]"
                if s.get("error"):
                    head += f" error: {s['error']}"
                lines.append(head)
                for field in ("inputs", "outputs"):
                    v = decode_json(s.get(field))
                    if v is not None:
                        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
                        lines.append(f"{'  ' * depth}  {field}: {text}")
                walk(s["span_id"], depth + 1)

        walk(None, 0)
        root = children.get(None, [spans[0]])[0]
        caption = f"trace {trace_id}"
        if root.get("sample_index") is not None:
            caption += f" sample {root['sample_index']}"
        if root.get("reward") is not None:
            caption += f" reward {root['reward']}"
        out.append((caption, "\n".join(lines)))
    return out
