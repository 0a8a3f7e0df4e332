"""A number passed with --param meets a JSON config number: the documented comparison compares
numbers (1e-6, 0.000001 and 1e-06 all match a stored 1e-06), the value stays a bound parameter,
and the text comparison that finds nothing says why instead of answering 0 runs silently."""

from __future__ import annotations

import json

import trackstore
from tests.helpers import run_cli

NUMERIC = "(config->'actor'->>'lr')::DOUBLE = $lr"
TEXT = "config->'actor'->>'lr' = $lr"


def _store(root):
    for lr in (1e-6, 3e-6):
        run = trackstore.init("p", root=root, config={"actor": {"lr": lr}})
        run.finish()


def test_numeric_param_matches_every_spelling_of_a_config_number(root):
    _store(root)
    for spelling in ("1e-6", "0.000001", "1e-06", "1E-6"):
        out = run_cli("runs", "-w", NUMERIC, "-P", f"lr={spelling}", "-f", "json", root=root)
        assert out.returncode == 0, out.stderr
        assert [r["config"]["actor"]["lr"] for r in json.loads(out.stdout)] == [1e-6], spelling
        out = run_cli("sql", f"SELECT count(*) AS n FROM runs WHERE {NUMERIC}", "-P", f"lr={spelling}", "-f", "json",
                      root=root)
        assert json.loads(out.stdout) == [{"n": 1}], (spelling, out.stderr)


def test_text_comparison_of_a_number_is_not_silent(root):
    _store(root)
    out = run_cli("runs", "-w", TEXT, "-P", "lr=1e-6", "-f", "json", root=root)
    assert out.returncode == 0 and json.loads(out.stdout) == []
    assert "::DOUBLE = $lr" in out.stderr and "0.000001" in out.stderr
    out = run_cli("sql", f"SELECT * FROM runs WHERE {TEXT}", "-P", "lr=1e-6", root=root)
    assert "::DOUBLE = $lr" in out.stderr
    # a text parameter spelt as the JSON text is matches, and says nothing
    texts = json.loads(run_cli("sql", "SELECT config->'actor'->>'lr' AS t FROM runs ORDER BY t", "-f", "json",
                               root=root).stdout)
    out = run_cli("runs", "-w", TEXT, "-P", f"lr={texts[0]['t']}", "-f", "json", root=root)
    assert len(json.loads(out.stdout)) == 1 and "note" not in out.stderr


def test_help_shows_the_numeric_comparison_and_values_stay_bound(root):
    _store(root)
    for command in ("runs", "sql"):
        out = run_cli(command, "--help", root=None, env={"COLUMNS": "200"})
        assert "::DOUBLE" in out.stdout, command
    out = run_cli("runs", "-w", NUMERIC, "-P", "lr=1e-6 OR 1=1", "-f", "json", root=root)
    assert out.returncode != 0 or json.loads(out.stdout) == []  # a value, never SQL
