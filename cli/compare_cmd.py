"""``trackstore compare``: runs side by side — what differs in their configs, and their metrics.

One column per run. Config rows list only keys whose values differ (``--all-config`` shows
every key); metric rows give, per key, the last logged value and the min/max over the run.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from .common import (
    RUN_REF,
    Format,
    FormatOpt,
    OutputOpt,
    ReaderRootOpt,
    cell,
    console,
    emit,
    literal,
    resolve_for_reading,
)
from .sql_cmd import StrictOpt, open_store

STATS = ("last", "min", "max", "last_step")


def compare(
    ctx: typer.Context,
    runs: Annotated[List[str], typer.Argument(help=f"Two or more runs: {RUN_REF}.")],
    root: ReaderRootOpt = None,
    keys: Annotated[Optional[List[str]], typer.Option("--keys", "-k", help="Metric keys to compare (repeatable; globs like 'critic/*'). Default: all.")] = None,
    all_config: Annotated[bool, typer.Option("--all-config", help="Show every config key, not only those that differ.")] = False,
    fmt: FormatOpt = Format.table,
    output: OutputOpt = None,
    strict: StrictOpt = False,
) -> None:
    """Compare runs side by side: config differences and metric summaries (last, min, max)."""
    from trackstore.errors import UsageError
    from trackstore.read.overview import config_diff, metric_overview, run_label
    from trackstore.store.arrays import to_pylist

    infos = resolve_for_reading(ctx, runs, root)
    if len({(r.project, r.run_id) for r in infos}) < 2:
        raise UsageError("compare needs at least two different runs")
    with open_store(root, strict=strict, sync_state=False, runs=infos) as con:
        overview = to_pylist(metric_overview(con, infos, keys))  # Table.to_pylist would import pandas
    ids = [r.run_id for r in infos]
    config_rows = [{"section": "config", "key": r.pop("key"), "stat": "value", **r}
                   for r in config_diff(infos, include_equal=all_config)]
    by_key: dict[str, dict[str, dict]] = {}
    for row in overview:
        by_key.setdefault(row["key"], {})[row["run_id"]] = row
    metric_rows = []
    for key in sorted(by_key):
        for stat in STATS:
            metric_rows.append({"section": "metrics", "key": key, "stat": stat,
                                **{rid: by_key[key].get(rid, {}).get(stat) for rid in ids}})
    columns = ["section", "key", "stat", *ids]
    if fmt is not Format.table or output is not None:
        emit(config_rows + metric_rows, fmt, columns=columns, output=output)
        return
    from rich.table import Table

    con_out = console()
    header = [run_label(r, infos) for r in infos]
    meta = Table(title="runs", title_justify="left", header_style="bold")
    meta.add_column("")
    for h in header:
        meta.add_column(literal(h), overflow="fold")
    for field in ("run_id", "project", "status", "last_step", "created_at"):
        meta.add_row(field, *[literal(r.row().get(field)) for r in infos])
    con_out.print(meta)
    title = "config (all keys)" if all_config else "config differences"
    cfg = Table(title=title, title_justify="left", header_style="bold")
    cfg.add_column("key")
    for h in header:
        cfg.add_column(literal(h), overflow="fold")
    for row in config_rows:
        cfg.add_row(literal(row["key"]), *[literal(row[rid]) if rid in row and row[rid] is not None else "-" for rid in ids])
    if not config_rows:
        cfg.add_row("(identical)", *["" for _ in ids])
    con_out.print(cfg)
    met = Table(title="metrics (last / min / max)", title_justify="left", header_style="bold")
    met.add_column("key")
    for h in header:
        met.add_column(literal(h), overflow="fold")
    for key in sorted(by_key):
        cells = []
        for rid in ids:
            r = by_key[key].get(rid)
            cells.append("-" if r is None else f"{cell(r['last'])}  ({cell(r['min'])} .. {cell(r['max'])})")
        met.add_row(literal(key), *cells)
    if not by_key:
        met.add_row("(no metrics)", *["" for _ in ids])
    con_out.print(met)
