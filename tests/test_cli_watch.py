"""`sync --watch` prints what changed, not the whole summary and "already up to date" every pass."""

from __future__ import annotations

from trackstore.cli.common import Format
from trackstore.cli.sync_cmd import render_summary
from trackstore.sync.engine import RunResult, SyncReport


def report(*runs: RunResult) -> SyncReport:
    return SyncReport("mlflow", "sqlite:///x.db", list(runs))


def result(run_id: str, sent: int = 0, error: str | None = None) -> RunResult:
    return RunResult("p", run_id, run_id, "running", sent={"metrics": sent} if sent else {}, error=error,
                     up_to_date=not sent and error is None)


def test_watch_prints_only_what_changed(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    seen = render_summary(report(result("a"), result("b")), Format.table)
    assert "2 runs already up to date" in capsys.readouterr().out  # the first pass says so, once
    seen = render_summary(report(result("a"), result("b")), Format.table, seen=seen)
    assert capsys.readouterr().out == ""  # nothing new: nothing printed
    seen = render_summary(report(result("a", sent=10), result("b")), Format.table, seen=seen)
    out = capsys.readouterr().out
    assert "│ a " in out and "│ b " not in out  # only the run that sent rows
    seen = render_summary(report(result("a"), result("b", error="HTTP 503")), Format.table, seen=seen)
    assert "│ b " in capsys.readouterr().out  # a new failure
    render_summary(report(result("a"), result("b", error="HTTP 503")), Format.table, seen=seen)
    assert capsys.readouterr().out == ""  # the same failure again: already said
