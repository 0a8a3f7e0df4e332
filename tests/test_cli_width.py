"""What the CLI prints fits a terminal of 80 or 120 columns.

The tables of `runs`, `status`, `gc --dry-run` and the sync summary are rendered at a fixed
width (COLUMNS, as a pipe or cron sees it, and once through a pseudo-terminal) on the demo
store (`demo` run twice) and on a store whose sync target fails with a long multi-line error.
Each must keep every line within the width, print one line per table row, show run ids whole
or as a handle that `trackstore show` accepts, and numbers whole.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import threading

import pytest

from tests.helpers import cli_in_pty, run_cli
from trackstore.read.listing import list_runs

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
WIDTHS = (80, 120)


class _FailingMlflow(http.server.BaseHTTPRequestHandler):
    """Answers MLflow's health check, then refuses every API call with a 60-line HTML page."""

    def _any(self):
        if self.path.endswith("/health"):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")
            return
        body = ("<html><body><h1>Bad Gateway</h1>\n"
                + "\n".join(f"<p>upstream {i} failed with a rather long explanation</p>" for i in range(60))
                + "</body></html>").encode()
        self.send_response(400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _any

    def log_message(self, *args):
        pass


# its tests share a module-scoped server/store: `make test` (--dist loadgroup) keeps them on one
# worker, so it is set up once, not once per worker
pytestmark = pytest.mark.xdist_group("test_cli_width")


@pytest.fixture(scope="module")
def failing_uri():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FailingMlflow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    """The demo store after `trackstore demo` ran twice (two runs, same project and name)."""
    root = tmp_path_factory.mktemp("demo") / "store"
    for _ in range(2):
        out = run_cli("demo", "--steps", "20", root=root)
        assert out.returncode == 0, out.stderr
    return root


@pytest.fixture(scope="module")
def failing_store(demo_store, failing_uri, tmp_path_factory):
    """The demo store after a sync whose target refused every request (a long error per run)."""
    root = tmp_path_factory.mktemp("failing") / "store"
    shutil.copytree(demo_store, root)
    out = run_cli("sync", "--to", "mlflow", "--uri", failing_uri, "--max-retries", "0", "--timeout", "5", root=root)
    assert out.returncode == 8, out.stdout + out.stderr
    return root


def at(width: int, *args, root) -> subprocess.CompletedProcess:
    return run_cli(*args, root=root, env={"COLUMNS": str(width)})


def table_rows(text: str) -> tuple[list[str], list[list[str]]]:
    """The header and the body rows of the (first) rich table in ``text``, cells stripped."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    header = next(line for line in lines if line.startswith("┃"))
    body = [line for line in lines if line.startswith("│")]
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in body]
    return [c.strip() for c in header.strip("┃").split("┃")], cells


def check_fits(text: str, width: int) -> None:
    for line in text.splitlines():
        assert len(ANSI.sub("", line)) <= width, f"longer than {width}: {line!r}"


def summary(text: str) -> str:
    """The sync summary: the table (from its title) and what follows it. The lines before are the
    log of a sync without a terminal (one per run, whole, as cron mail keeps them)."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    return "\n".join(lines[top - 1:])


def check_ids(header: list[str], rows: list[list[str]], root) -> list[str]:
    """Every run id cell is a whole id or the handle of exactly one run id of the store."""
    from trackstore.read.refs import IdIndex

    index = IdIndex(r.run_id for r in list_runs(root))
    col = header.index("run_id")
    shown = [row[col] for row in rows]
    for value in shown:
        assert "…" not in value
        assert len(index.matching(value)) == 1, (value, index.ids)
    return shown


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_fits(demo_store, width):
    out = at(width, "runs", root=demo_store)
    assert out.returncode == 0, out.stderr
    check_fits(out.stdout, width)
    header, rows = table_rows(out.stdout)
    assert len(rows) == 2  # one line per run
    shown = check_ids(header, rows, demo_store)
    assert [row[header.index("step")] for row in rows] == ["20", "20"]
    assert out.stdout.splitlines()[0].strip() == "2 runs"
    # the handle is a run reference `show` accepts
    res = run_cli("show", shown[0], "--format", "json", root=demo_store)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["run_id"].endswith(shown[0])


def test_runs_full_ids_in_json_and_wide(demo_store):
    ids = sorted(r.run_id for r in list_runs(demo_store))
    out = at(80, "runs", "--format", "json", root=demo_store)
    assert sorted(r["run_id"] for r in json.loads(out.stdout)) == ids
    for flag in ("--wide", "--no-trunc"):
        out = at(80, "runs", flag, root=demo_store)
        header, rows = table_rows(out.stdout)
        assert sorted(row[header.index("run_id")] for row in rows) == ids
        assert "updated_at" in header or "updated" in header  # every column


@pytest.mark.parametrize("width", WIDTHS)
def test_status_fits(demo_store, failing_store, width):
    for root in (demo_store, failing_store):
        out = at(width, "status", root=root)
        assert out.returncode == 0, out.stderr
        check_fits(out.stdout, width)
        header, rows = table_rows(out.stdout)
        assert len(rows) == 2
        check_ids(header, rows, root)
        pending = json.loads(at(width, "status", "--format", "json", root=root).stdout)
        assert sorted(row[header.index("pending")].replace(",", "") for row in rows) == sorted(
            str(p["pending_metrics"] + p["pending_other"]) for p in pending)
    # the failing store: each error is one line in the table, and in full (once) below it
    assert "error" in header
    assert all(row[header.index("error")].endswith("…") for row in rows)
    text = ANSI.sub("", out.stdout)
    assert text.count("upstream 59 failed") == 1 and "upstream 0 failed" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_gc_dry_run_fits(demo_store, width):
    out = at(width, "gc", "--dry-run", "--older-than", "0d", "--include-unsynced", root=demo_store)
    assert out.returncode == 0, out.stderr
    check_fits(out.stdout, width)
    header, rows = table_rows(out.stdout)
    assert len(rows) == 2
    check_ids(header, rows, demo_store)
    assert "would delete: 2 runs" in out.stdout
    assert all(re.fullmatch(r"\d+(\.\d+)? (B|KiB|MiB)", row[header.index("bytes")]) for row in rows)


@pytest.mark.parametrize("width", WIDTHS)
def test_failed_sync_summary_fits(failing_store, failing_uri, tmp_path, width):
    root = tmp_path / "store"
    shutil.copytree(failing_store, root)
    out = at(width, "sync", "--to", "mlflow", "--uri", failing_uri, "--max-retries", "0", "--timeout", "5", root=root)
    assert out.returncode == 8
    check_fits(summary(out.stdout), width)
    header, rows = table_rows(out.stdout)
    assert len(rows) == 2  # one line per run, not ~60 lines of fragments
    check_ids(header, rows, root)
    assert all(row[header.index("result")].startswith("FAILED: ") for row in rows)
    text = ANSI.sub("", out.stdout)
    assert text.count("upstream 59 failed") == 1  # the whole text once, below the table
    progress = [line for line in text.splitlines() if line.startswith("sync ") and "FAILED" in line]
    assert len(progress) == 2 and all("upstream 1 failed" not in line for line in progress)  # one line each


def test_first_sync_summary_fits(demo_store, tmp_path):
    root = tmp_path / "store"
    shutil.copytree(demo_store, root)
    out = at(80, "sync", "--to", "mlflow", root=root)
    assert out.returncode == 0, out.stdout + out.stderr
    # what follows "to see them in mlflow's UI" is to paste: a command and an address, each whole
    text, view = summary(out.stdout).split("to see them in mlflow's UI, run and open:\n")
    check_fits(text, 80)
    command, page = view.splitlines()
    assert command == f"  mlflow ui --backend-store-uri sqlite:///{root}/_mlflow/mlflow.db", view
    assert page.startswith("  http://127.0.0.1:5000/#/experiments/") and len(page) <= 80, view
    assert "sync: opening mlflow at " in out.stdout  # said before the first run opens the target
    header, rows = table_rows(out.stdout)
    assert len(rows) == 2 and all(row[header.index("result")] == "ok" for row in rows)
    assert all(row[header.index("status")] == "finished" for row in rows)  # not "finishe" / "d"
    check_ids(header, rows, root)
    again = at(80, "sync", "--to", "mlflow", root=root)
    assert again.stdout.strip().startswith("2 runs already up to date")


def test_runs_in_a_terminal(demo_store):
    """Through a pseudo-terminal of 80 columns, as a person over ssh sees it."""
    code, text = cli_in_pty("runs", "--root", demo_store, columns=80)
    assert code == 0, text
    check_fits(text, 80)
    header, rows = table_rows(text)
    assert len(rows) == 2
    check_ids(header, rows, demo_store)


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_fits(demo_store, tmp_path, width):
    root = tmp_path / "store"
    shutil.copytree(demo_store, root)
    [run] = list_runs(root)[:1]
    (run.paths.kind_dir("metrics") / "part-broken-0.parquet").write_bytes(b"not parquet at all")
    out = at(width, "doctor", root=root)
    assert out.returncode == 4
    check_fits(out.stdout, width)
    assert "1 finding in" in ANSI.sub("", out.stdout).replace("\n", " ")
    assert "corrupt_parquet" in out.stdout  # the check's name whole, never cut


def test_dry_run_plan_fits_80_columns(tmp_path):
    """The dry-run plan names some columns both first and in the summary's drop order: hiding
    them at 80 columns crashed with a traceback (list.remove of a column already hidden)."""
    import trackstore
    from tests.helpers import cli_in_pty

    root = tmp_path / "store"
    for i in range(2):
        r = trackstore.init("proj", name=f"r{i}", root=root)
        r.log({"val/acc/mean@1": 1.0}, step=0)
        r.finish()
    code, out = cli_in_pty("sync", "--to", "mlflow", "--dry-run", "--root", root, columns=80)
    assert code == 0 and "Traceback" not in out and "dry run: would sync to mlflow" in out, out


def test_up_to_date_lines_fit_80_columns(tmp_path):
    """The one-line answers that name a destination (status's "up to date", a dry run or a sync
    with nothing to do) put a URI too long for the terminal on a line of its own, whole, instead
    of letting the terminal break it; a pipe still gets one line."""
    import trackstore

    root = tmp_path / "a-store-kept-in-a-rather-deeply-nested-folder-of-experiments" / "store"
    r = trackstore.init("proj", name="r0", root=root)
    r.log({"loss": 1.0}, step=0)
    r.finish()
    assert run_cli("sync", "--to", "mlflow", root=root).returncode == 0
    uri = f"sqlite:///{root}/_mlflow/mlflow.db"
    assert len(uri) > 80
    for args in (["status"], ["sync", "--to", "mlflow", "--dry-run"], ["sync", "--to", "mlflow"]):
        code, out = cli_in_pty(*args, "--root", root, columns=80)
        lines = [ANSI.sub("", line) for line in out.splitlines() if ANSI.sub("", line).strip()]
        assert code == 0 and f"  {uri}" in lines, out
        assert all(len(line) <= 80 for line in lines if line.strip() != uri), out
        assert any("1 run" in line and "up to date at mlflow" in line for line in lines), out
    piped = run_cli("status", root=root).stdout
    assert f"1 run up to date at mlflow {uri} (--all lists them)" in piped


def test_dry_run_shows_each_step_of_the_plan_whole_at_80_columns(demo_store):
    """What a dry run is read for, the plan of each run, wraps in its cell: at 80 columns every
    step is there in full, never cut to "create the mlflo…"."""
    out = at(80, "sync", "--to", "mlflow", "--dry-run", root=demo_store)
    assert out.returncode == 0, out.stderr
    cells = " ".join(line.split("│")[-3].strip() for line in out.stdout.splitlines() if line.count("│") > 3)
    for step in ("create the mlflow run (or find it);", "send config and tags;", "push status finished"):
        assert step in " ".join(cells.split()), cells
