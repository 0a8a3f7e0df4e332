"""How trackstore records look inside SwanLab: samples and trajectories as text, histograms as
bar charts (SwanLab 0.10 has no histogram type). Pure rendering; the adapter logs the values.

SwanLab shows a list of ``swanlab.Text`` as a table of (caption, text) rows and folds each text
onto one line (white space collapses), so structure goes into rows and captions:

* a sample is one row per part: ``#3 input``, ``#3 output``, ``#3 score``, then one row per
  extra field (:func:`sample_items`); a chat shows as ``role: content`` lines;
* a trajectory is a header row (``▸ sample 3``: trace id, reward) and then one row per span: the
  caption is the span name indented by depth with no-break spaces (which HTML keeps) and a tree
  mark; the text says kind, status (``ERROR`` in capitals), duration, inputs, outputs and error
  (:func:`trajectory_items`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from trackstore.records.samples import decode_json

TRACE_MARK = "▸ "  # the caption of a trajectory's header row starts with it
_SAMPLE_HEAD = re.compile(r"#-?\d+ input")


def counts_as(caption: str) -> str | None:
    """What one Text item stands for in trackstore's units (for read-back counts): ``"sample"``
    for a sample's first row, ``"trace"`` for a trajectory's header row, else None."""
    if _SAMPLE_HEAD.fullmatch(caption or ""):
        return "sample"
    if (caption or "").startswith(TRACE_MARK):
        return "trace"
    return None


INDENT = "\u00a0\u00a0\u00a0"  # no-break spaces: SwanLab's text view keeps them


def _plain(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and v and all(isinstance(m, dict) and "content" in m for m in v):
        return "\n".join(f"{m.get('role', '?')}: {_plain(m['content'])}" for m in v)
    return json.dumps(v, ensure_ascii=False, default=str)


def sample_items(rows: list[dict]) -> list[tuple[str, str]]:
    """(caption, text) rows for samples: input, output (with the score) and extra apart."""
    from trackstore.records.samples import decode_row

    out = []
    for r in rows:
        d = decode_row(r)
        i = d.get("sample_index")
        out.append((f"#{i} input", _plain(d.get("input")) if d.get("input") is not None else ""))
        out.append((f"#{i} output", _plain(d.get("output")) if d.get("output") is not None else ""))
        if d.get("score") is not None:
            out.append((f"#{i} score", str(d["score"])))
        for k, v in d.items():
            if k not in ("input", "output", "score", "sample_index", "step", "split", "ts", "seq", "writer", "json_fields"):
                out.append((f"#{i} {k}", _plain(v)))
    return out


def trajectory_items(rows: list[dict]) -> list[tuple[str, str]]:
    """(caption, text) rows for the trajectories of one step: per trace a header, then its
    spans in tree order with the caption indented by depth."""
    out = []
    for caption, text, spans in _trees(rows):
        out.append((caption, text))
        for depth, s in spans:
            dur = "" if s["end_ns"] is None else f"{(s['end_ns'] - s['start_ns']) / 1e9:.3f}s"
            head = f"{INDENT * depth}{'└ ' if depth else ''}{s['name']}"
            status = "ERROR" if s["status"] == "error" else s["status"]
            parts = [" ".join(p for p in (s["kind"], status, dur) if p)]
            for field in ("inputs", "outputs"):
                v = decode_json(s.get(field))
                if v is not None:
                    parts.append(f"{field}: {_plain(v)}")
            if s.get("error"):
                parts.append(f"error: {s['error']}")
            out.append((head, "  ·  ".join(parts)))
    return out


def _trees(rows: list[dict]):
    """Per trace: (caption, text, [(depth, span), ...]) in tree order."""
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
    for trace_id, spans in traces.items():
        children: dict[Any, list[dict]] = {}
        ids = {s["span_id"] for s in spans}
        for s in spans:
            children.setdefault(s["parent_span_id"] if s["parent_span_id"] in ids else None, []).append(s)
        order: list[tuple[int, dict]] = []

        def walk(parent, depth, children=children, order=order):
            for s in children.get(parent, []):
                order.append((depth, s))
                walk(s["span_id"], depth + 1)

        walk(None, 0)
        root = children.get(None, [spans[0]])[0]
        caption = TRACE_MARK + (f"sample {root['sample_index']}" if root.get("sample_index") is not None else "trajectory")
        text = f"trace {trace_id}"
        if root.get("reward") is not None:
            text += f" · reward {root['reward']}"
        yield caption, text, order


def histogram_chart(r: dict):
    import swanlab
    from swanlab import echarts

    edges, counts = list(r["edges"]), list(r["counts"])
    labels = [f"{edges[i]:.4g}..{edges[i + 1]:.4g}" for i in range(len(counts))]
    bar = echarts.Bar()
    bar.add_xaxis(labels)
    bar.add_yaxis("count", [c if math.isfinite(c) else 0 for c in counts])
    return swanlab.ECharts(bar)


def present_images(rows: list[dict], run, result) -> list[dict]:
    """The image rows whose file is in the run folder; the others are counted in ``result``."""
    from .adapter import IMAGE_MISSING, image_file

    if run is None:  # a dry run without the run's folder: judged when sent
        return rows
    out = [r for r in rows if image_file(run.paths.dir, r) is not None]
    if len(out) < len(rows):
        result.skip(IMAGE_MISSING, len(rows) - len(out))
    return out


def swanlab_images(swanlab, run_dir, rows: list[dict]) -> list:
    """A step's images of one key as ``swanlab.Image`` values in ``index`` order. SwanLab decodes
    every image and encodes it again; ``file_type="png"`` keeps the pixels (a JPEG's decoded
    pixels), not the bytes."""
    from .adapter import image_file

    ordered = sorted(rows, key=lambda r: (r["index"], r["writer"], r["seq"]))
    return [swanlab.Image(str(image_file(run_dir, r)), caption=r["caption"] or None, file_type="png")
            for r in ordered]
