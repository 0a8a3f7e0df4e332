"""``trackstore samples`` and ``trackstore trace``: validation generations and trajectories, to read.

Both print what a model wrote as literal text: newlines kept, every other control or invisible
character shown as an escape (:func:`cli.common.visible`), rich markup never interpreted. Long
texts are folded to their first lines (``--full`` shows everything). On a terminal, output
longer than the screen goes through the pager (``$PAGER``, else ``less``); when stdout is not a
terminal nothing is paged. ``--format json`` gives the records whole.
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Annotated, Any, Callable, Optional

import typer

from .common import RUN_REF, ReaderRootOpt, choices, console, literal, ranges_text, resolve_for_reading, visible

RecordFormat = choices("RecordFormat", ("table", "json", "jsonl"))
FoldOpt = Annotated[bool, typer.Option("--full", help="Show long texts whole instead of their first lines.")]
NoPagerOpt = Annotated[bool, typer.Option("--no-pager", help="Never page, even on a terminal.")]
FormatOpt = Annotated[RecordFormat, typer.Option("--format", "-f", help="Output format: table (for people), json or jsonl (records whole).",
                                                 case_sensitive=False)]
TABLE = RecordFormat("table")
FOLD_LINES = 8  # a folded text shows at most this many lines...
FOLD_CHARS = 600  # ...and this many characters


def samples(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help=f"The run: {RUN_REF}.")],
    root: ReaderRootOpt = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Only samples of this step (default: every step, newest first).")] = None,
    split: Annotated[Optional[str], typer.Option("--split", help="Only samples of this split (val, train, ...).")] = None,
    grep: Annotated[Optional[str], typer.Option("--grep", "-g", help="Only samples whose input or output contains this text (case-insensitive).")] = None,
    min_score: Annotated[Optional[float], typer.Option("--min-score", help="Only samples scored at least this (NaN and missing scores never pass).")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=0, help="Show at most this many samples (0 = all).")] = 20,
    full: FoldOpt = False,
    no_pager: NoPagerOpt = False,
    fmt: FormatOpt = TABLE,
) -> None:
    """Read a run's samples (validation generations): input, output, score and the other fields
    logged with them, newest step first. Exit 3 when the run has no samples, 2 when --step names
    a step without samples."""
    from trackstore.errors import RunNotFoundError
    from trackstore.read.browse import find_samples, kind_steps, record_counts

    from .sql_cmd import open_store

    [info] = resolve_for_reading(ctx, [run], root)
    with open_store(root, sync_state=False, runs=[info]) as con:
        counts = record_counts(con, info)["samples"]
        if not counts["rows"]:
            raise RunNotFoundError(f"run {info.project}/{info.run_id} has no samples (log them with "
                                   "run.log_samples(...), see docs/records.md)")
        if step is not None:
            _check_step(step, kind_steps(con, info, "samples"), "samples")
        rows, total = find_samples(con, info, step=step, split=split, grep=grep, min_score=min_score, limit=limit)
    fmt_value = getattr(fmt, "value", fmt)
    if fmt_value != "table":
        _dump([_row_json(r) for r in rows], fmt_value)
        return
    head = literal(f"{info.project}/{info.run_id}: {_shown(len(rows), total, 'sample')}")

    def render(con) -> None:
        con.print(head)
        for r in rows:
            _print_sample(con, r, full)
        if not rows:
            con.print("[dim]no sample matches[/dim]")
        elif total > len(rows):
            con.print(f"[dim]{total - len(rows)} more: --limit 0 shows all[/dim]")

    _paged(render, no_pager)


def trace(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help=f"The run: {RUN_REF}.")],
    root: ReaderRootOpt = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Trajectories of this step (default: the last step that has any).")] = None,
    sample_index: Annotated[Optional[int], typer.Option("--sample-index", "-i", help="Only the trajectories of this sample (prompt) index.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=0, help="Show at most this many trajectories (0 = all).")] = 5,
    full: FoldOpt = False,
    no_pager: NoPagerOpt = False,
    fmt: FormatOpt = TABLE,
) -> None:
    """Read a run's trajectories as conversation trees: each span (user turn, assistant call,
    tool call with its arguments and result, reward) with its timing, children indented.
    Exit 3 when the run has no spans, 2 when --step names a step without any."""
    from trackstore.errors import RunNotFoundError, UsageError
    from trackstore.read.browse import find_trajectories, kind_steps, trace_sample_indices

    from .sql_cmd import open_store

    [info] = resolve_for_reading(ctx, [run], root)
    with open_store(root, sync_state=False, runs=[info]) as con:
        steps = kind_steps(con, info, "spans")
        if not steps:
            roots, total = find_trajectories(con, info, limit=1)
            if not total:
                raise RunNotFoundError(f"run {info.project}/{info.run_id} has no trajectories (log them with "
                                       "run.trace(...), see docs/records.md)")
        if step is not None:
            _check_step(step, steps, "trajectories")
        elif steps:
            step = steps[-1]
        roots, total = find_trajectories(con, info, step=step, sample_index=sample_index, limit=limit)
        indices = trace_sample_indices(con, info, step) if not total and sample_index is not None else []
    if not total and sample_index is not None:
        at = f" at step {step}" if step is not None else ""
        there = f"sample indices{at}: {ranges_text(indices)}" if indices else f"none{at} has a sample index"
        raise UsageError(f"--sample-index {sample_index}: no trajectory of {info.project}/{info.run_id}{at} has it; "
                         f"{there}")
    fmt_value = getattr(fmt, "value", fmt)
    if fmt_value != "table":
        _dump([_jsonable(n.to_dict()) for n in roots], fmt_value)
        return
    where = f" at step {step}" if step is not None else ""
    head = literal(f"{info.project}/{info.run_id}: {_shown(len(roots), total, 'trajectory', 'trajectories')}{where}")

    def render(con) -> None:
        con.print(head)
        for node in roots:
            _print_trajectory(con, node, full)
        if total > len(roots):
            con.print(f"[dim]{total - len(roots)} more: --limit 0 shows all, --sample-index I picks one[/dim]")
        if step is not None and len(steps) > 1:
            con.print(literal(f"steps with trajectories: {_steps_text(steps)} (--step N)"), style="dim")

    _paged(render, no_pager)


# ---------------------------------------------------------------------- shared pieces
def _check_step(step: int, steps: list[int], what: str) -> None:
    from trackstore.errors import UsageError

    if step not in steps:
        raise UsageError(f"--step {step}: the run has no {what} at that step; steps with {what}: {_steps_text(steps)}")


def _steps_text(steps: list[int]) -> str:
    if len(steps) <= 12:
        return ", ".join(map(str, steps))
    return ", ".join(map(str, steps[:5])) + f", ... ({len(steps) - 10} more) ..., " + ", ".join(map(str, steps[-5:]))


def _shown(n: int, total: int, word: str, words: str | None = None) -> str:
    noun = word if total == 1 else (words or word + "s")
    return f"{total} {noun}" if n == total else f"{n} of {total} {noun}"


def _paged(render: Callable[[Any], None], no_pager: bool) -> None:
    """Print through ``render(console)``; on a terminal, through the pager when it is longer than
    the screen. Never pages when stdout is not a terminal (pipes, files, cron)."""
    con = console()
    if no_pager or not sys.stdout.isatty() or not con.is_terminal:
        render(con)
        return
    with con.capture() as cap:
        render(con)
    text = cap.get()
    if text.count("\n") < con.size.height - 1:
        sys.stdout.write(text)
        return
    # colours only when the pager shows them (less -R); otherwise plain text
    styles = "R" in os.environ.get("LESS", "") or "-R" in os.environ.get("PAGER", "")
    with con.pager(styles=styles):
        render(con)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _row_json(r: dict) -> dict:
    return _jsonable({k: v for k, v in r.items() if k != "json_fields"})


def _dump(records: list, fmt: str) -> None:
    if fmt == "jsonl":
        for r in records:
            sys.stdout.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")
    else:
        sys.stdout.write(json.dumps(records, ensure_ascii=False, indent=1, default=str) + "\n")


def _text(value: Any) -> str:
    from trackstore.read.browse import as_text

    return as_text(value)


def _fold(text: str, full: bool) -> tuple[list[str], str]:
    """``(lines, note)``: the text's lines, folded unless ``full``, each line made visible."""
    lines = text.split("\n")
    note = ""
    if not full:
        kept, size = [], 0
        for line in lines:
            if len(kept) >= FOLD_LINES or size >= FOLD_CHARS:
                break
            if size + len(line) > FOLD_CHARS:  # cut at a space when there is one near the limit
                cut = FOLD_CHARS - size
                space = line.rfind(" ", max(cut - 40, 0), cut)
                line = line[: space if space > 0 else cut]
            kept.append(line)
            size += len(line) + 1
        hidden = len(text) - sum(len(k) + 1 for k in kept) + 1
        if hidden > 0:
            more_lines = len(lines) - len(kept)
            note = f"... {hidden:,} more characters" + (f" ({more_lines} more lines)" if more_lines > 0 else "") \
                   + "; --full shows all"
        lines = kept
    return [visible(line) for line in lines], note


def _block(con, label: str, value: Any, indent: int, full: bool, style: str = "") -> None:
    """``label: text`` with the text's lines under it, indented; folded unless ``full``."""
    from rich.text import Text

    label = visible(label)
    text = _text(value)
    lines, note = _fold(text, full)
    if len(lines) == 1 and not note and len(lines[0]) + len(label) + indent + 2 <= con.width:
        con.print(Text(" " * indent) + Text(label + ": ", style="bold" + (" " + style if style else "")) + Text(lines[0]))
        return
    con.print(Text(" " * indent) + Text(label + ":", style="bold" + (" " + style if style else "")))
    body = Text("\n".join(lines))
    if note:
        body.append("\n" + note, style="dim")
    pad = Text(" " * (indent + 2))
    for line in body.wrap(con, max(con.width - indent - 2, 20), overflow="fold"):  # indented, unpadded
        line.rstrip()
        con.print(pad + line, soft_wrap=True)


def _value(con, label: str, value: Any, indent: int, full: bool, style: str = "") -> None:
    """An input or output: a short value on one line; a larger object key by key under its label
    (verl's ``prompt_text``/``response_text`` readable, token id lists summarised unless ``full``)."""
    from rich.text import Text

    if _is_chat(value):
        con.print(Text(" " * indent) + Text(visible(label) + ":", style="bold" + (" " + style if style else "")))
        for msg in value:
            _print_message(con, msg, indent + 2, full)
        return
    if isinstance(value, dict) and value:
        one_line = _text(value)
        if len(one_line) + len(label) + indent + 2 > con.width or "\n" in one_line:
            con.print(Text(" " * indent) + Text(visible(label) + ":", style="bold" + (" " + style if style else "")))
            for k, v in value.items():
                _value(con, str(k), v, indent + 2, full, style="")
            return
    if not full and isinstance(value, list) and len(value) > 16 and all(isinstance(v, int) for v in value):
        head = ", ".join(map(str, value[:8]))
        value = f"[{len(value):,} ids: {head}, ...]"
    _block(con, label, value, indent, full, style)


def _score(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------------- samples
def _print_sample(con, r: dict, full: bool) -> None:
    from rich.rule import Rule

    title = f"step {r['step']} · {r['split']} · #{r['sample_index']} · score {_score(r.get('score'))}"
    con.print(Rule(literal(title), align="left", style="dim"))
    for field in ("input", "output"):
        value = r.get(field)
        if value is None:
            continue
        if _is_chat(value):
            for msg in value:
                _print_message(con, msg, 0, full)
        else:
            _block(con, field, value, 0, full)
    extra = {k: v for k, v in r.items()
             if k not in ("step", "split", "sample_index", "input", "output", "score", "json_fields")}
    for k, v in extra.items():
        _block(con, str(k), v, 0, full, style="dim")


def _is_chat(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


# ---------------------------------------------------------------------- trajectories
def _print_trajectory(con, root, full: bool) -> None:
    from rich.rule import Rule

    r = root.row
    bits = [f"step {r.get('step')}"]
    if r.get("sample_index") is not None:
        bits.append(f"sample {r['sample_index']}")
    if r.get("rollout_n") is not None:
        bits.append(f"rollout {r['rollout_n']}")
    if r.get("validate"):
        bits.append("validation")
    if r.get("reward") is not None:
        bits.append(f"reward {_score(r['reward'])}")
    bits.append(f"trace {str(r.get('trace_id'))[:12]}")
    con.print(Rule(literal(" · ".join(bits)), align="left", style="dim"))
    _print_span(con, root, 0, full)


MAX_DEPTH = 40  # deeper spans are summarised, not drawn (the indentation would leave no room)


def _print_span(con, node, depth: int, full: bool) -> None:
    from rich.text import Text

    r = node.row
    indent = 2 * depth
    head = Text(" " * indent) + Text(visible(str(r.get("name"))), style="bold") + Text(f" [{r.get('kind')}]", style="cyan")
    dur = node.duration_s
    if dur is not None:
        head.append(f" {_duration(dur)}", style="dim")
    status = r.get("status")
    if status and status != "ok":
        head.append(f" {status}", style="red" if status == "error" else "yellow")
    con.print(head)
    kind = r.get("kind")
    inputs, outputs = node.inputs, node.outputs
    if kind == "llm":
        if _is_chat(inputs):
            for msg in inputs:
                _print_message(con, msg, indent + 2, full)
        elif inputs is not None:
            _value(con, "prompt", inputs, indent + 2, full)
        _print_llm_output(con, outputs, indent + 2, full)
    elif kind == "tool":
        if inputs is not None:
            _value(con, "arguments", inputs, indent + 2, full)
        if outputs is not None:
            _value(con, "result", outputs, indent + 2, full)
    elif kind == "reward":
        if inputs is not None:
            _value(con, "inputs", inputs, indent + 2, full)
        if outputs is not None:
            _value(con, "reward", outputs, indent + 2, full, style="green")
    else:
        if _is_chat(inputs):
            for msg in inputs:
                _print_message(con, msg, indent + 2, full)
        elif isinstance(inputs, dict) and set(inputs) == {"content"}:
            _block(con, str(r.get("name") or "content"), inputs["content"], indent + 2, full)
        elif inputs is not None:
            _value(con, "inputs", inputs, indent + 2, full)
        if outputs is not None:
            _value(con, "outputs", outputs, indent + 2, full)
    if r.get("error"):
        _block(con, "error", r["error"], indent + 2, full, style="red")
    attrs = {k: v for k, v in node.attributes.items()}
    if attrs and depth == 0:
        _block(con, "attributes", attrs, indent + 2, full, style="dim")
    if depth + 1 >= MAX_DEPTH and node.children:
        con.print(Text(" " * (indent + 2) + f"... {len(node.children)} deeper spans (--format json shows them)",
                       style="dim"))
        return
    for child in node.children:
        _print_span(con, child, depth + 1, full)


def _print_message(con, msg: dict, indent: int, full: bool) -> None:
    """One chat message: ``role: content``, then its tool calls."""
    role = str(msg.get("role") or "message")
    if msg.get("tool_calls") or set(msg) - {"role", "content"}:
        _print_llm_output(con, msg, indent, full, label=role)
    else:
        _block(con, role, msg.get("content"), indent, full)


def _print_llm_output(con, outputs: Any, indent: int, full: bool, label: str = "assistant") -> None:
    if outputs is None:
        return
    if isinstance(outputs, dict) and ("tool_calls" in outputs or "content" in outputs):
        if outputs.get("content") not in (None, ""):
            _block(con, label, outputs["content"], indent, full)
        for call in outputs.get("tool_calls") or []:
            if isinstance(call, dict):
                fn = call.get("function") if isinstance(call.get("function"), dict) else call
                name = fn.get("name", "?")
                args = fn.get("arguments", {})
                if isinstance(args, str):  # OpenAI-style: the arguments as JSON text
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass
                _value(con, f"tool call {name}", args, indent, full)
            else:
                _block(con, "tool call", call, indent, full)
        rest = {k: v for k, v in outputs.items() if k not in ("content", "tool_calls", "role")}
        if rest and label == "assistant":
            _value(con, "outputs", rest, indent, full)
        for k, v in rest.items() if label != "assistant" else ():  # a message's other fields (tool_call_id...)
            _block(con, str(k), v, indent + 2, full, style="dim")
    elif isinstance(outputs, str):
        _block(con, label, outputs, indent, full)
    else:
        _value(con, "outputs", outputs, indent, full)


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"
