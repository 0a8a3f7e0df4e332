"""A cursor holding a number out of the format's ranges (an acknowledged row id past int64, a
negative count): refused where it is read, by every reader through one check
(``trackstore.store.ledger.check_cursor``). On disk it makes only its own destination's row
"damaged", reported with the problem, while every other command and run works; ``doctor``
finds and quarantines it; a receipt carrying one is refused whole."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.stores import make_run, mark_synced
from tests.helpers import run_cli
from trackstore.store.ledger import Cursor, check_cursor, cursor_path, scan_cursors, sync_state_rows
from trackstore.store.ranges import RangeValueError
from trackstore.store.vocab import KINDS
from trackstore.upkeep import doctor as D

DEST = "http://127.0.0.1:5000"


def _cursor(**fields):
    base = {"version": 1, "target": "mlflow", "destination": DEST, "project": "p", "run_id": "r",
            "acked": {"metrics": {"w": [[0, 9]]}}, "skipped": {"metrics": 0}}
    return {**base, **fields}


@pytest.mark.parametrize("fields, where", [
    ({"acked": {"metrics": {"w": [[0, 2**70]]}}}, "acked.metrics['w']"),
    ({"recheck": {"samples": {"w": [[3, 1]]}}}, "recheck.samples['w']"),
    ({"skipped": {"metrics": -1}}, "skipped.metrics"),
    ({"skipped": {"metrics": 2**64}}, "skipped.metrics"),
    ({"in_doubt": {"kind": "metrics", "rows": {"w": [[0, -5]]}}}, "in_doubt.rows['w']"),
    ({"in_doubt": {"kind": "steps", "rows": {"samples": {"w": [[0, 2**63]]}}}}, "in_doubt.rows.samples['w']"),
    ({"session": {"acked": {"metrics": {"w": [[0, 2**70]]}}, "skipped": {}}}, "session.acked.metrics['w']"),
    ({"session": {"acked": {}, "skipped": {"metrics": 1.5}}}, "session.skipped.metrics"),
    ({"remote": {"carried": {"metrics": {"w": [[0, 2**70]]}}}}, "row-id set['w']"),  # an older cursor's field
    ({"run_id": 7}, "run_id"),
])
def test_cursor_numbers_out_of_range_are_refused_naming_the_field(fields, where):
    data = _cursor(**fields)
    with pytest.raises(RangeValueError) as err:
        Cursor.from_json(data)
    assert str(err.value).startswith(where), str(err.value)
    assert Cursor.from_json(_cursor()).acked["metrics"].to_json() == {"w": [[0, 9]]}
    assert check_cursor(_cursor()) == _cursor()


@pytest.fixture
def bad_store(root):
    """Two synced runs; the cursor of the first acknowledges rows [0, 2**70] (written by hand)."""
    bad, good = make_run(root), make_run(root, "q")
    c = mark_synced(root, bad, destination=DEST)
    mark_synced(root, good, destination=DEST)
    f = cursor_path(root, c.target, c.destination, c.project, c.run_id)
    data = json.loads(f.read_text())
    writer = next(iter(data["acked"]["metrics"]))
    data["acked"]["metrics"][writer] = [[0, 2**70]]
    f.write_text(json.dumps(data))
    return root, bad, good, f


def test_a_cursor_past_int64_on_disk_breaks_no_command(bad_store):
    root, bad, good, f = bad_store
    assert [c.run_id for c in scan_cursors(root)[0]] == [good.run_id] and scan_cursors(root)[1] == [f]

    status = run_cli("status", "--format", "json", root=root)
    assert status.returncode == 0, status.stderr
    rows = {r["run_id"]: r for r in json.loads(status.stdout)}
    assert rows[bad.run_id]["destination"] == DEST and rows[bad.run_id]["pending_metrics"] is None
    assert "sync state unreadable" in rows[bad.run_id]["last_error"]
    assert "1180591620717411303424 is not a row sequence number" in rows[bad.run_id]["last_error"]
    assert rows[good.run_id]["pending_metrics"] == 0 and rows[good.run_id]["last_error"] is None
    table = run_cli("status", root=root, env={"COLUMNS": "80"})
    assert table.returncode == 0 and "sync state unreadable" in table.stdout and "Traceback" not in table.stderr

    sql = run_cli("sql", "--format", "json", "select run_id, kind, acked_rows, pending_rows, last_error "
                  "from sync_state where kind = 'metrics' order by project", root=root)
    assert sql.returncode == 0, sql.stderr
    (damaged, fine) = json.loads(sql.stdout)
    assert damaged["run_id"] == bad.run_id and damaged["acked_rows"] is None and damaged["pending_rows"] is None
    assert "acked.metrics" in damaged["last_error"] and "doctor --fix" in damaged["last_error"]
    assert fine == {"run_id": good.run_id, "kind": "metrics", "acked_rows": 40, "pending_rows": 0,
                    "last_error": None}
    assert len(sync_state_rows(root)) == 2 * len(KINDS)  # two runs, a row per kind each

    gc = run_cli("gc", "--dry-run", "--keep-last", "0", root=root, env={"COLUMNS": "80"})
    assert gc.returncode == 0, gc.stderr
    assert "sync state unreadable" in gc.stdout and good.run_id[-8:] in gc.stdout  # the good run may go, the bad stays

    sync = run_cli("sync", "--to", "mlflow", "--uri", DEST, "--dry-run", root=root, env={"COLUMNS": "200"})
    assert sync.returncode == 8 and "Traceback" not in sync.stderr, sync.stderr  # partial failure: one run
    assert "unreadable" in sync.stdout and "is not a row sequence number" in sync.stdout


def test_doctor_finds_and_quarantines_a_cursor_past_int64(bad_store):
    root, bad, good, f = bad_store
    report = D.diagnose(root)
    (finding,) = report.findings
    assert finding.check == "unreadable_cursor" and finding.path == f and not report.healthy
    assert "acked.metrics" in finding.problem and "is not a row sequence number" in finding.problem
    cli = run_cli("doctor", root=root)
    assert cli.returncode == 4 and "unreadable_cursor" in cli.stdout, cli.stdout + cli.stderr

    fixed = run_cli("doctor", "--fix", root=root)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert not f.exists()
    (moved,) = D.quarantine_listing(root)
    assert moved["from"] == str(f.relative_to(root)) and "is not a row sequence number" in moved["why"]
    assert (root / moved["to"]).is_file()
    assert D.diagnose(root).healthy
    rows = {r["run_id"]: r for r in json.loads(run_cli("status", "--format", "json", root=root).stdout)}
    assert rows[bad.run_id]["destination"] == "(never synced)" and rows[bad.run_id]["pending_metrics"] == 40
