"""``trackstore show``: one run in a screen — metadata, config, what it holds, its main curves.

It summarises instead of listing: counts of every record kind (metric keys and points, samples,
trajectories and spans, histograms, artifacts), the config (the first keys; ``--all-keys`` for
every one), a short chosen set of metric keys (verl's headline keys, validation keys, losses,
rewards and scores) and the commands that show the rest (``samples``, ``trace``, ``plot``,
``sql``). ``--format json`` gives everything: the run, every key's overview and the counts.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from typing import Annotated, List, Optional

import typer

from trackstore.store.vocab import Kind

from .common import (
    RUN_REF,
    Format,
    FormatOpt,
    ReaderRootOpt,
    cell,
    console,
    emit,
    literal,
    resolve_for_reading,
    short_ids,
    store_run_ids,
)

TOP_KEYS = 12  # metric keys shown without --all-keys
CONFIG_KEYS = 25  # config keys shown without --all-keys
# the keys a person looks at first, in this order (globs); the rest of the TOP_KEYS places go to
# the first keys in sorted order
PREFERRED_KEYS = (
    "critic/score/mean", "critic/rewards/mean", "val-core/*", "val/*", "eval/*", "actor/entropy", "actor/pg_loss",
    "actor/kl_loss", "actor/grad_norm", "response_length/mean", "timing_s/step", "perf/throughput",
    "*loss", "*reward*", "*score*", "*acc*",
)
SHORT_CHARS = 240  # a longer value (notes, an error, a config value) is cut here; --format json has it whole


def short(value) -> object:
    """A value from the run as literal text, cut to :data:`SHORT_CHARS` with a note of the rest."""
    text = value if isinstance(value, str) else cell(value) if isinstance(value, float) else \
        json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > SHORT_CHARS:
        out = literal(text[:SHORT_CHARS])
        out.append(f" ... ({len(text) - SHORT_CHARS:,} more characters; --format json shows all)", style="dim")
        return out
    return literal(text)


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def top_keys(keys: list[str], n: int = TOP_KEYS) -> list[str]:
    """At most ``n`` of ``keys``: those matching :data:`PREFERRED_KEYS` first (in that order),
    then the first others in sorted order."""
    chosen: list[str] = []
    for pattern in PREFERRED_KEYS:
        for k in sorted(keys):
            if len(chosen) < n and k not in chosen and fnmatch.fnmatchcase(k, pattern):
                chosen.append(k)
    for k in sorted(keys):
        if len(chosen) >= n:
            break
        if k not in chosen:
            chosen.append(k)
    return chosen


def show(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help=f"The run: {RUN_REF}.")],
    root: ReaderRootOpt = None,
    keys: Annotated[Optional[List[str]], typer.Option("--keys", "-k", help="Only these metric keys in the overview (repeatable; globs like 'actor/*').")] = None,
    all_keys: Annotated[bool, typer.Option("--all-keys", "-a", help="List every metric key and every config key, not a chosen few.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Show one run: metadata, config, counts of every record kind, its main metric keys
    (last/min/max), and the commands that show the rest (samples, trace, plot, sql)."""
    from trackstore.read.overview import flatten, run_overview, select_keys

    from .sql_cmd import open_store, report_skipped_files

    with report_skipped_files():  # a run.json read in part is named on stderr
        [info] = resolve_for_reading(ctx, [run], root, unreadable=True)  # shown with what can be read
        row = info.row()
    # kept in the catalog while the run's parts do not change: DuckDB starts only when they did
    found = run_overview(info, lambda: open_store(root, sync_state=False, runs=[info]))
    overview = select_keys(found["metrics"], keys)
    counts = dict(found["records"])
    counts["metrics"] = {"keys": len(overview), "points": sum(m["points"] for m in overview),
                         "first_step": min((m["first_step"] for m in overview if m["first_step"] is not None), default=None),
                         "last_step": max((m["last_step"] for m in overview if m["last_step"] is not None), default=None)}
    if fmt is not Format.table:
        row["metrics"] = overview  # trackstore.read.overview.OVERVIEW_COLUMNS per key
        row["records"] = counts
        emit([row], fmt)
        return
    from rich.table import Table

    con_out = console()
    meta = Table(show_header=False, title=literal(f"{info.project}/{info.run_id}"), title_justify="left")
    meta.add_column(style="bold", no_wrap=True)
    meta.add_column(overflow="fold")
    meta.add_row("handle", literal(short_ids([info.run_id], store_run_ids(root))[info.run_id]))
    for key in ("name", "status", "created_at", "ended_at", "last_step", "host", "user", "tags", "notes",
                "group", "job_type", "exit_code", "error", "write_errors"):
        value = row.get(key)
        if value not in (None, [], ""):
            meta.add_row(key, short(", ".join(map(str, value)) if isinstance(value, list) else value))
    m = info.meta
    if isinstance(m.get("git"), dict):
        git = m["git"]
        meta.add_row("git", literal(f"{(git.get('commit') or '')[:12]} ({git.get('branch')})" + (" dirty" if git.get("dirty") else "")))
    if m.get("command"):
        meta.add_row("command", short(" ".join(map(str, m.get("command") or []))))
    meta.add_row("path", literal(info.paths.dir))
    con_out.print(meta)

    config = flatten(row["config"] or {})
    if config:
        shown = list(config.items()) if all_keys else list(config.items())[:CONFIG_KEYS]
        title = plural(len(config), "key") if len(shown) == len(config) else \
            f"{len(shown)} of {len(config)} keys; --all-keys for all"
        t = Table(title=f"config ({title})", title_justify="left", header_style="bold")
        t.add_column("key", overflow="fold")
        t.add_column("value", overflow="fold")
        for k, v in shown:
            t.add_row(literal(k), short(v))
        con_out.print(t)

    con_out.print(_records_table(counts))

    user_summary = flatten(m.get("summary_user") or {}) if isinstance(m.get("summary_user"), dict) else {}
    if user_summary:
        t = Table(title="summary set by the run", title_justify="left", header_style="bold")
        t.add_column("key", overflow="fold")
        t.add_column("value", overflow="fold")
        for k, v in user_summary.items():
            t.add_row(literal(k), short(v))
        con_out.print(t)

    by_key = {o["key"]: o for o in overview}
    chosen = list(by_key) if (all_keys or keys) else top_keys(list(by_key))
    if chosen:
        if len(chosen) == len(by_key):
            title = f"metrics ({plural(len(by_key), 'key')})"
        else:
            title = f"metrics ({len(chosen)} of {len(by_key)} keys; --all-keys or --keys 'actor/*' for more)"
        t = Table(title=title, title_justify="left", header_style="bold")
        t.add_column("key", overflow="fold", ratio=1, min_width=20)
        for c in ("steps", "last", "min", "max"):
            t.add_column(c, no_wrap=True, justify="left" if c == "steps" else "right")
        for k in chosen:
            o = by_key[k]
            t.add_row(literal(k), f"{o['first_step']}..{o['last_step']}", *[cell(o[c]) for c in ("last", "min", "max")])
        con_out.print(t)
    else:
        con_out.print("[dim]no metrics match[/dim]" if keys else "[dim]no metrics logged yet[/dim]")
    given = getattr(ctx.get_parameter_source("root"), "name", "") == "COMMANDLINE"
    _next_steps(con_out, info, root if given else None, counts, chosen)


def _records_table(counts: dict) -> object:
    from rich.table import Table

    def steps(c: dict) -> str:
        if not c.get("steps"):
            return ""
        if c["steps"] == 1:
            return f" at step {c['first_step']}"
        return f" at {c['steps']:,} steps ({c['first_step']}..{c['last_step']})"

    mt, sa, sp, hi, ar = (counts[k] for k in (Kind.METRICS, Kind.SAMPLES, Kind.SPANS, Kind.HISTOGRAMS, Kind.ARTIFACTS))
    lines = [
        ("metrics", f"{plural(mt['keys'], 'key')}, {plural(mt['points'], 'point')}"
                    + (f", steps {mt['first_step']}..{mt['last_step']}" if mt["keys"] else "")),
        ("samples", (plural(sa["rows"], "sample") + steps(sa)
                     + (f", split {', '.join(sa['splits'])}" if sa["splits"] else "")) if sa["rows"] else "none"),
        ("trajectories", f"{plural(sp['trajectories'], 'trajectory', 'trajectories')} "
                         f"({plural(sp['spans'], 'span')}){steps(sp)}" if sp["spans"] else "none"),
        ("histograms", f"{plural(hi['rows'], 'histogram')} of {plural(hi['keys'], 'key')}" if hi["rows"] else "none"),
        ("artifacts", f"{plural(ar['names'], 'name')}, {plural(ar['versions'], 'version')}, "
                      f"{plural(ar['files'], 'file')}" if ar["files"] else "none"),
    ]
    im = counts.get(Kind.IMAGES) or {}
    if im.get("rows"):  # a line only for runs that log images (most do not)
        lines.append(("images", f"{plural(im['rows'], 'image')} of {plural(im['keys'], 'key')}"))
    t = Table(title="records", title_justify="left", show_header=False)
    t.add_column(style="bold", no_wrap=True)
    t.add_column(overflow="fold")
    for kind, text in lines:
        t.add_row(kind, literal(text))
    return t


def _next_steps(con, info, root, counts: dict, chosen: list[str]) -> None:
    """The commands that show what the summary leaves out, for this run, ready to paste (a long
    one continues on the next line after a backslash, so it still pastes as one command).
    ``--root`` is repeated only when it was given on the command line."""
    root_flag = ["--root", shlex.quote(str(root))] if root is not None else []
    run_ref = shlex.quote(info.run_id)
    commands = []
    if counts["samples"]["rows"]:
        commands.append(["trackstore", "samples", run_ref, *root_flag])
    if counts["spans"]["spans"]:
        commands.append(["trackstore", "trace", run_ref, *root_flag])
    if chosen:
        commands.append(["trackstore", "plot", run_ref, "-k", shlex.quote(chosen[0]), *root_flag])
    # --run: the views hold this run alone, as fast in a store of 10,000 runs as of one
    commands.append(["trackstore", "sql", "-r", run_ref, "\"SELECT * FROM metrics\"", *root_flag])
    con.print("more:")
    for words in commands:
        for line in _shell_lines(words, con.width - 2):
            con.print(literal("  " + line))


def _shell_lines(words: list[str], width: int) -> list[str]:
    """``words`` as one shell command in lines of at most ``width`` characters where the words
    allow, continued with a trailing backslash and indented by four spaces."""
    lines: list[str] = []
    current = ""
    for w in words:
        if current and len(current) + 1 + len(w) + 2 > width:
            lines.append(current + " \\")
            current = "    " + w
        else:
            current = f"{current} {w}" if current else w
    lines.append(current)
    return lines
