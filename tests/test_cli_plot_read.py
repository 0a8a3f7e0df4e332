"""A terminal plot reads without colour at 80 columns: the legend below the chart,
integer step ticks, one marker per run, and each bucket's extremes so a spike shows."""

from __future__ import annotations

import re

import trackstore
from tests.helpers import run_cli
from trackstore.cli.plot_cmd import MARKERS, integer_ticks


def test_integer_ticks():
    assert integer_ticks(1, 200, 6) == [50, 100, 150, 200]
    assert integer_ticks(0, 7, 10) == list(range(8))
    assert all(isinstance(t, int) for t in integer_ticks(1, 34, 5))


def test_two_runs_without_colour(root):
    for name, offset in (("base", 0.0), ("hot", 1.0)):
        run = trackstore.init("p", name=name, root=root)
        for step in range(1, 201):
            spike = 50.0 if (name == "hot" and step == 77) else 0.0
            run.log({"loss": offset + 1.0 / step + spike}, step=step)
        run.finish()
    out = run_cli("plot", "p/base", "p/hot", "--key", "loss", "--points", "20", "--height", "16",
                  root=root, env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    chart_end = max(i for i, line in enumerate(lines) if line.lstrip().startswith("└"))
    legend = lines[chart_end + 1:]
    assert any(line.strip() == f"{MARKERS[0]} base" for line in legend)
    assert any(line.strip() == f"{MARKERS[1]} hot" for line in legend)
    assert any("lowest and highest" in line for line in legend)  # the spike at step 77 is in a bucket's max
    tick_line = next(line for line in legend if line.strip())  # the x tick labels, under the frame
    assert tick_line.split() and all(t.isdigit() for t in tick_line.split())  # integer steps, no 34.2
    body = "\n".join(lines[:chart_end])
    assert MARKERS[0] in body and MARKERS[1] in body
    top = float(next(m.group(1) for line in lines if (m := re.match(r"\s*([\d.]+)┤", line))))
    assert top > 40  # the spike at step 77 shows (bucket means alone would hide it)
