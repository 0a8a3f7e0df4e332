"""Durations typed on the command line have one vocabulary (trackstore.cli.quantities): a number
needs a unit, ``m`` (minutes or months?) and months/years are refused, and a refused
``gc --older-than`` in a cron line deletes nothing."""

from __future__ import annotations

import pytest

from tests.fixtures.stores import make_run, mark_synced
from tests.helpers import run_cli
from trackstore.cli.quantities import parse_duration, parse_since
from trackstore.errors import UsageError
from trackstore.read.listing import list_runs

DAY = 86400

# input -> seconds (the "gc duration table" of docs/gc.md)
ACCEPTED = {"45s": 45, "45sec": 45, "90min": 5400, "12h": 43200, "12H": 43200, "30d": 30 * DAY, "1.5d": 1.5 * DAY,
            "0d": 0, "2w": 14 * DAY, "30 d": 30 * DAY, "36500d": 36500 * DAY}
# input -> a word the one-line error must hold
REFUSED = {"30": "needs a unit", "6m": "minutes or months", "6M": "minutes or months", "3mo": "no fixed length",
           "1y": "no fixed length", "2years": "no fixed length", "-3d": "negative", "garbage": "not a duration",
           "": "not a duration", "30days": "unknown unit", "1e3s": "not a duration", "nan": "not a duration",
           "inf": "not a duration", "36501d": "100 years", "9" * 400 + "d": "100 years", "\u0663d": "not a duration"}


@pytest.mark.parametrize("text,seconds", ACCEPTED.items())
def test_accepted_durations(text, seconds):
    assert parse_duration(text, "--older-than") == seconds


@pytest.mark.parametrize("text,why", REFUSED.items())
def test_refused_durations_say_why_and_show_the_spellings(text, why):
    with pytest.raises(UsageError) as err:
        parse_duration(text, "--older-than")
    message = str(err.value)
    assert why in message and "--older-than" in message and "\n" not in message
    assert "30d" in message and "12h" in message and "90min" in message


def test_since_takes_a_duration_or_a_date_and_never_overflows():
    assert parse_since("7d", now=10 * DAY) == 3 * DAY
    assert parse_since("2026-11-30") == 1795996800.0
    for bad in ("30", "6m", "9" * 400 + "d"):
        with pytest.raises(UsageError, match="2026-11-30"):
            parse_since(bad)


@pytest.mark.parametrize("args", [["gc", "--older-than", "30"], ["gc", "--older-than", "6m"],
                                  ["runs", "--since", "30"], ["sync", "--to", "mlflow", "--since", "6m"],
                                  ["export", "--since", "30", "-o", "x.tar"]])
def test_every_duration_option_refuses_a_bare_number_and_m(root, args):
    out = run_cli(*args, root=root)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "90min" in out.stderr


def test_cron_gc_with_a_bare_number_refuses_and_deletes_nothing(root):
    runs = [make_run(root, ended_days_ago=days) for days in (1, 40)]
    for r in runs:
        mark_synced(root, r)
    before = {r.run_id for r in list_runs(root)}
    out = run_cli("gc", "--older-than", "30", "--yes", root=root)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs a unit" in out.stderr and "30d" in out.stderr
    assert {r.run_id for r in list_runs(root)} == before and all(r.dir.exists() for r in runs)
    out = run_cli("gc", "--older-than", "6m", "--yes", root=root)
    assert out.returncode == 2 and {r.run_id for r in list_runs(root)} == before
