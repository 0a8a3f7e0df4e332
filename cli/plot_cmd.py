"""``trackstore plot``: metric curves in the terminal (plotext) or as a PNG (matplotlib).

Terminal charts work over SSH on a cluster login node with no display and no network. Long
runs are downsampled at query time (:func:`trackstore.read.overview.curves`), so plotting a
10-million-point run draws ``--points`` buckets, not 10 million points.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from .common import RUN_REF, Format, ReaderRootOpt, choices, emit, plural, resolve_for_reading, visible
from .sql_cmd import StrictOpt, report_skipped_files

XAxis = choices("XAxis", ("step", "time"))


def plot(
    ctx: typer.Context,
    runs: Annotated[List[str], typer.Argument(help=f"Runs to plot: {RUN_REF}.")],
    key: Annotated[List[str], typer.Option("--key", "-k", help="Metric key to plot (repeatable; globs like 'actor/*' allowed). One chart per key.")],
    root: ReaderRootOpt = None,
    smooth: Annotated[Optional[int], typer.Option("--smooth", "-s", min=1, help="Trailing moving average over N logged points.")] = None,
    x: Annotated[XAxis, typer.Option("--x", help="X axis: 'step', or 'time' (seconds since the run's first point).")] = XAxis.step,
    points: Annotated[int, typer.Option("--points", min=2, help="Downsample each curve to at most this many points.")] = 1000,
    png: Annotated[Optional[Path], typer.Option("--png", help="Write a PNG image here instead of drawing in the terminal (needs matplotlib: pip install 'trackstore[plot]').")] = None,
    fmt: Annotated[Optional[Format], typer.Option("--format", "-f", case_sensitive=False, help="Print the downsampled points in this format instead of drawing.")] = None,
    width: Annotated[Optional[int], typer.Option("--width", help="Chart width in terminal columns (default: the terminal's).")] = None,
    height: Annotated[Optional[int], typer.Option("--height", help="Chart height in terminal rows per key.")] = 20,
    strict: StrictOpt = False,
) -> None:
    """Draw metric curves of one or more runs (terminal chart, --png image, or --format data)."""
    from trackstore.errors import UsageError
    from trackstore.read.overview import curves, run_label
    from trackstore.read.points import run_keys

    x = XAxis(x).value
    infos = _unique(resolve_for_reading(ctx, runs, root))
    on_corrupt = "error" if strict else "warn"
    with report_skipped_files():
        data = curves(infos, key, points=points, smooth=smooth, x=x, on_corrupt=on_corrupt)
        if data.num_rows == 0:
            known = sorted({k for r in infos for k in run_keys(r.paths, on_corrupt=on_corrupt)})
            raise UsageError(f"no finite points for --key {' '.join(key)}{_keys_hint(key, known)}")
    if fmt is not None:
        emit(data.to_pylist(), fmt, columns=data.column_names, arrow_table=data)
        return
    labels = {(r.project, r.run_id): run_label(r, infos) for r in infos}
    series = _series(data, labels)
    xlabel = "step" if x == "step" else "seconds since start"
    if png is not None:
        _png(series, png, xlabel, smooth)
        sys.stderr.write(f"wrote {png}\n")
    else:
        _terminal(series, xlabel, smooth, width, height)


def _keys_hint(asked: list[str], known: list[str], most: int = 6) -> str:
    """What follows "no finite points for --key ...": the keys closest to those that name no key
    of the runs (:func:`trackstore.read.refs.closest`), else the first keys there are; or that
    the keys named hold no finite value."""
    import fnmatch

    from trackstore.read.refs import closest

    if not known:
        return "; these runs have no metrics yet"
    missing = [k for k in asked if not fnmatch.filter(known, k)]
    if not missing:
        return " (every value logged under it is NaN or infinite)"
    near = list(dict.fromkeys(c for k in missing for c in closest(k, known, n=most)))[:most]
    if near:
        return f"; did you mean: {', '.join(near)}? (these runs have {plural(len(known), 'key')})"
    more = f" (and {len(known) - 30} more)" if len(known) > 30 else ""
    return f"; keys in these runs: {', '.join(known[:30])}{more}"


def _unique(infos):
    seen, out = set(), []
    for r in infos:
        if (r.project, r.run_id) not in seen:
            seen.add((r.project, r.run_id))
            out.append(r)
    return out


Curve = tuple  # (run label, xs, values, mins, maxs): the bucket means and each bucket's extremes
MARKERS = ("•", "x", "+", "o", "*", "#", "@", "%")  # one per run: two runs differ without colour too
PNG_MARKERS = ("o", "x", "+", "s", "^", "D", "v", "*")


def _series(data, labels) -> dict[str, list[Curve]]:
    """``{key: [(run label, xs, ys, mins, maxs), ...]}`` in the order the rows come (run, key, x)."""
    out: dict[str, dict[str, tuple[list, list, list, list]]] = {}
    cols = data.to_pydict()
    lows = cols.get("min") or cols["value"]
    highs = cols.get("max") or cols["value"]
    for project, run_id, key, xv, yv, lo, hi in zip(cols["project"], cols["run_id"], cols["key"], cols["x"],
                                                   cols["value"], lows, highs):
        xs, ys, mins, maxs = out.setdefault(key, {}).setdefault(labels[(project, run_id)], ([], [], [], []))
        xs.append(xv)
        ys.append(yv)
        mins.append(yv if lo is None else lo)
        maxs.append(yv if hi is None else hi)
    return {k: [(label, *v) for label, v in sorted(runs.items())] for k, runs in sorted(out.items())}


def integer_ticks(lo: float, hi: float, most: int) -> list[int]:
    """At most ``most`` round integer positions (1, 2, 5 x 10^k apart) between ``lo`` and ``hi``."""
    import math

    span = max(hi - lo, 1)
    step = 1
    for power in range(0, 19):
        for mult in (1, 2, 5):
            step = mult * 10 ** power
            if span / step <= max(most - 1, 1):
                first = math.ceil(lo / step) * step
                return list(range(int(first), int(hi) + 1, step))
    return [int(lo), int(hi)]


def _has_spread(curve: Curve) -> bool:
    _label, _xs, ys, mins, maxs = curve
    return any(lo < y or hi > y for y, lo, hi in zip(ys, mins, maxs))


def _terminal(series, xlabel: str, smooth: int | None, width: int | None, height: int | None) -> None:
    import plotext as plt

    fig = plt.figure
    cols = width or int(os.environ.get("COLUMNS", "0") or 0) or shutil.get_terminal_size((100, 24)).columns
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    for key, curves in series.items():
        fig.clear()
        fig.plot_size(max(40, cols), max(8, height or 20))
        fig.legend(False)  # it would cover the data: the legend is printed below the chart
        spread = False
        for i, curve in enumerate(curves):
            _label, xs, ys, mins, maxs = curve
            if _has_spread(curve):  # each bucket's extremes, so a spike inside a bucket shows
                spread = True
                fig.draw(fig.signal(xs, mins, marker="·"))
                fig.draw(fig.signal(xs, maxs, marker="·"))
            fig.draw(fig.signal(xs, ys, marker=MARKERS[i % len(MARKERS)]).lines())
        if xlabel == "step":
            lo = min(min(c[1]) for c in curves)
            hi = max(max(c[1]) for c in curves)
            ticks = integer_ticks(lo, hi, max(2, cols // 12))
            fig.ruler("x").ticks(ticks, [str(t) for t in ticks])
        fig.title(visible(key) + (f"  (smoothed over {plural(smooth, 'point')})" if smooth and smooth > 1 else ""))
        fig.label(xlabel)
        sys.stdout.write(fig.build().string(colorless=not color) + "\n")
        legend = [f"  {MARKERS[i % len(MARKERS)]} {visible(c[0])}" for i, c in enumerate(curves)]
        if spread:
            legend.append("  · lowest and highest value in each plotted bucket")
        sys.stdout.write("\n".join(legend) + "\n")
    sys.stdout.flush()


def _png(series, path: Path, xlabel: str, smooth: int | None) -> None:
    from trackstore.errors import UsageError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--png needs matplotlib: pip install 'trackstore[plot]'") from None
    from matplotlib.ticker import MaxNLocator

    n = len(series)
    fig, axes = plt.subplots(n, 1, figsize=(10, 3.2 * n), squeeze=False)
    for ax, (key, curves) in zip(axes[:, 0], series.items()):
        for i, curve in enumerate(curves):
            label, xs, ys, mins, maxs = curve
            line, = ax.plot(xs, ys, label=label, linewidth=1.2, marker=PNG_MARKERS[i % len(PNG_MARKERS)],
                            markevery=max(1, len(xs) // 12), markersize=4)
            if _has_spread(curve):  # each bucket's extremes, so a spike inside a bucket shows
                ax.fill_between(xs, mins, maxs, color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(key + (f" (smoothed over {plural(smooth, 'point')})" if smooth and smooth > 1 else ""))
        ax.set_xlabel(xlabel)
        if xlabel == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside the data
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
