"""At 80 columns the tables keep what tells rows apart and what they mean: gc's plan keeps the
end of run names (runs named alike differ there), and `status` labels rows still to send as
pending and keeps "synced" and "last sync" before columns of zeros."""

from __future__ import annotations

import re

from tests.fixtures.stores import make_run, mark_synced
from tests.helpers import run_cli
from tests.test_cli_width import check_fits, table_rows

NAMES = [f"qwen2.5-0.5b-grpo-gsm8k-{s}" for s in ("lr1e-6-kl0.001-seed1", "lr1e-6-kl0.001-seed2", "lr3e-6-kl0.01-seed1")]


def _alike(root, fraction=1.0):
    runs = [make_run(root, "grpo", ended_days_ago=40, name=n, chunks=1) for n in NAMES]
    for r in runs:
        mark_synced(root, r, fraction=fraction)
    return runs


def test_gc_plan_at_80_columns_keeps_names_that_differ_at_the_end(root):
    _alike(root)
    for args in (["--dry-run"], []):  # the plan, and the plan above the "Delete 3 runs?" prompt
        out = run_cli("gc", "--older-than", "30d", *args, root=root, env={"COLUMNS": "80"})
        check_fits(out.stdout, 80)
        header, rows = table_rows(out.stdout)
        shown = [row[header.index("name")] for row in rows]
        assert len(rows) == 3 and len(set(shown)) == 3, out.stdout  # one line each, told apart
        for cell in shown:  # each is the start and the end of one of the names
            head, _, tail = cell.partition("…")
            assert [n for n in NAMES if n.startswith(head) and n.endswith(tail)], cell
        assert any(cell.endswith("-seed2") for cell in shown)
    assert out.returncode == 2  # no terminal to ask: nothing deleted


def test_status_at_80_columns_says_pending_and_keeps_synced_and_last_sync(root):
    _alike(root)
    out = run_cli("status", "--all", root=root, env={"COLUMNS": "80"})
    assert out.returncode == 0, out.stderr
    check_fits(out.stdout, 80)
    header, rows = table_rows(out.stdout)
    assert {"pending", "synced", "last sync"} <= set(header), header
    assert "metrics" not in header and "unreadable" not in header
    assert all(row[header.index("pending")] == "0" for row in rows)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", row[header.index("last sync")]) for row in rows)


def test_status_pending_counts_every_kind_and_shows_unreadable_only_when_there_is_some(root):
    _alike(root, fraction=0.5)
    out = run_cli("status", root=root, env={"COLUMNS": "80"})
    header, rows = table_rows(out.stdout)
    pending = run_cli("status", "--format", "json", root=root).stdout
    import json

    want = sorted(r["pending_metrics"] + r["pending_other"] for r in json.loads(pending))
    assert sorted(int(row[header.index("pending")].replace(",", "")) for row in rows) == want and all(want)
    assert "unreadable" not in header
