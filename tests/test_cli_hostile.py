"""What users and models log never drives the terminal: every command prints it as literal text.

Hostile strings (rich markup, terminal escape sequences, a carriage return, a bidi override,
very long text, emoji) go into every field that takes free text — run name, tags, notes,
config keys and values, metric keys (markup only: keys refuse control characters), sample
inputs, outputs and extra fields, span names, inputs, outputs, errors and attributes, artifact
metadata; project and artifact names get what names allow — and every command that shows them
runs through the real CLI in a subprocess. Each must exit as documented, print no traceback,
write no raw ESC byte, and show the text (markup as written, control characters as escapes).
"""

from __future__ import annotations

import json

import pytest

import trackstore
from tests.helpers import python_child, run_cli

MARKUP = ["[/bold]", "[INST] hi [/INST]", "[bold red]RED", "[link=http://x]click[/link]"]
CONTROL = ["\x1b[2J", "\x1b]0;title\x07", "one\rtwo", "\u202eevil", "\x9b31m", "zero\u200bwidth"]
EMOJI = "🚀🤖 中文"
LONG = "word " * 3000
ALL = " ".join(MARKUP + CONTROL) + " " + EMOJI
PROJECT = "[red]proj [INST] 🚀"  # project names refuse '/', '=', '%' and control characters
NAME = "[/bold] " + ALL


def _hostile_run(root, name: str, extra_config: dict | None = None):
    run = trackstore.init(PROJECT, name=name, root=root, tags=MARKUP + CONTROL + [EMOJI], notes=ALL + "\n" + LONG,
                          config={"[/bold]": ALL, "lr": 1e-4, "nested": {"\x1b[2J": "[INST] x [/INST]", "long": LONG},
                                  **(extra_config or {})})
    for step in range(3):
        run.log({"[/bold]/loss": 1.0 / (step + 1), "[bold red]acc 🚀": 0.5, "[INST] x [/INST]": step}, step=step)
    run.log_samples([{"input": "[INST] hi [/INST] " + " ".join(CONTROL), "output": ALL + "\n" + LONG, "score": 1.0,
                      "[/bold]": "\x1b]0;title\x07", "ground_truth": "[bold red]42"},
                     {"input": [{"role": "[bold]user", "content": "\x1b[2J[INST] chat [/INST]"}], "output": EMOJI,
                      "score": float("nan")}], step=2, split="[val]")
    with run.trace(step=2, sample_index=0, rollout_n=0, name="[/bold] episode \x1b[2J", tag="[bold red]t") as tr:
        with tr.span("[INST] turn [/INST]", kind="llm", inputs=[{"role": "user", "content": ALL}]) as s:
            s.set_outputs({"content": "[/bold]" + LONG, "tool_calls": [{"name": "[red]calc\x1b[2J",
                                                                        "arguments": {"x": "\x1b]0;title\x07"}}]})
            with s.span("[red]tool\x1b[2J", kind="tool", inputs={"\x1b[2J": "[/bold]"}, outputs="one\rtwo"):
                pass
        try:
            with tr.span("failing [/bold]", kind="tool", inputs="x"):
                raise KeyError("\x1b[2J [bold red]boom \u202e")
        except KeyError:
            pass
        with tr.span("reward", kind="reward", inputs={"answer": ALL}, outputs=1.0):
            pass
        tr.set_reward(1.0)
    return run


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    a = _hostile_run(root, NAME)
    src = tmp_path_factory.mktemp("art") / "weights.bin"
    src.write_bytes(b"x" * 10)
    a.log_artifact(src, name="[red]ckpt 🚀", type="model", metadata={"\x1b[2J": "[/bold]", "note": ALL})
    a.finish()
    b = _hostile_run(root, "[bold red]second \x1b]0;title\x07", {"lr": 3e-4})
    try:
        with b:  # the run ends failed, its error text is the exception's
            raise ValueError("\x1b[2J [bold red]boom[/bold red] \u202e")
    except ValueError:
        pass
    # a crashed run (its process died without finishing): doctor reports it, with its name
    child = python_child(
        "import os, trackstore\n"
        f"r = trackstore.init({PROJECT!r}, name={NAME!r}, root={str(root)!r})\n"
        "r.log({'[/bold]': 1.0}, step=0); r.flush(); os._exit(0)\n")
    child.communicate(timeout=60)
    return root, a, b


def _check(out, *, codes=(0,)):
    text = out.stdout + out.stderr
    assert out.returncode in codes, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in text, out.stderr[-3000:]
    for raw in ("\x1b", "\x07", "\x9b", "\r", "\u202e", "\u200b"):
        assert raw not in text, (repr(raw), [line for line in text.splitlines() if raw in line][:3])
    return out.stdout


COMMANDS = {
    "runs": ["runs"],
    "runs json": ["runs", "--format", "json"],
    "show": ["show", "{a}"],
    "show all": ["show", "{a}", "--all-keys"],
    "compare": ["compare", "{a}", "{b}", "--all-config"],
    "sql samples": ["sql", "SELECT * FROM samples"],
    "sql input": ["sql", "SELECT input FROM samples"],
    "sql spans": ["sql", "SELECT name, inputs, outputs, error, attributes FROM spans"],
    "sql runs": ["sql", "SELECT name, tags, notes, config FROM runs"],
    "sql artifacts": ["sql", "SELECT name, metadata FROM artifacts"],
    "status": ["status"],
    "samples": ["samples", "{a}"],
    "samples full": ["samples", "{a}", "--full"],
    "samples grep": ["samples", "{a}", "--grep", "[INST]"],
    "trace": ["trace", "{a}"],
    "trace full": ["trace", "{a}", "--full"],
    "doctor": ["doctor"],
    "gc": ["gc", "--older-than", "0d", "--include-unsynced", "--dry-run", "--show-kept", "--wide"],
    "sync": ["sync", "--to", "mlflow", "--dry-run"],
    "plot": ["plot", "{a}", "-k", "[/bold]/loss"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_prints_hostile_text_literally(hostile, name):
    root, a, b = hostile
    args = [x.format(a=a.id, b=b.id) for x in COMMANDS[name]]
    out = run_cli(*args, root=root, env={"COLUMNS": "120"})
    stdout = _check(out)
    if name in ("runs", "show", "show all", "compare", "sql runs", "gc"):
        assert "[/bold]" in stdout and "\\x1b" in stdout, stdout[-3000:]
    if name in ("sql input", "samples", "samples grep"):
        assert "[INST] hi [/INST]" in stdout and "\\x1b[2J" in stdout, stdout[-3000:]
    if name in ("doctor", "gc", "status", "sync", "sql artifacts"):  # markup shown as written, however folded
        assert "[red]" in stdout, stdout[-3000:]
    if name == "compare":
        assert "failed" in stdout
    if name in ("show", "show all", "runs"):
        assert PROJECT in stdout
    if name.startswith("trace"):
        for text in ("[INST] turn [/INST]", "\\x1b[2J [bold red]boom \\u202e", "one\\rtwo", "[red]calc\\x1b[2J"):
            assert text in stdout, (text, stdout[-3000:])
    if name == "samples full":
        assert stdout.count("word") >= 3000
    if name in ("samples", "trace"):
        assert "--full shows all" in stdout
    if name == "runs json":  # machine output keeps the text exact (escaped the JSON way)
        assert NAME in {r["name"] for r in json.loads(stdout)}


def test_csv_keeps_text_exact_for_programs(hostile):
    """CSV for a program (stdout not a terminal) is the data as logged, control characters
    included; on a terminal, the same escapes as the table view."""
    root, a, b = hostile
    out = run_cli("sql", "SELECT name FROM runs WHERE run_id = $r", "-P", f"r={a.id}", "--format", "csv", root=root)
    assert out.returncode == 0, out.stderr
    assert "[INST] hi [/INST] [bold red]RED" in out.stdout  # (text mode reads the \r as a newline)
    assert "\x1b[2J \x1b]0;title\x07" in out.stdout and "\u202eevil \x9b31m zero\u200bwidth" in out.stdout


def test_errors_name_hostile_text_literally(hostile):
    root, a, b = hostile
    out = run_cli("show", b.id, root=root)
    assert "\\x1b[2J [bold red]boom[/bold red] \\u202e" in _check(out)  # the run's error
    out = run_cli("show", "[bold red]second \x1b]0;title\x07", root=root)  # by name: found
    _check(out)
    out = run_cli("show", "no \x1b[2J [/bold] run", root=root)
    _check(out, codes=(3,))
    assert "\\x1b[2J [/bold]" in out.stderr
    out = run_cli("sql", "SELECT '[/bold]' + \x1b[2J", root=root)
    _check(out, codes=(5,))


def test_sync_summary_prints_hostile_text_literally(hostile, tmp_path):
    """A real sync (the embedded MLflow store) of a copy of the store: progress lines, the
    summary table and the notes about renamed keys."""
    import shutil

    root, a, b = hostile
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    out = run_cli("sync", "--to", "mlflow", root=copy, env={"COLUMNS": "120"}, timeout=300)
    stdout = _check(out)
    assert "synced to mlflow" in stdout and PROJECT in stdout and "\\x1b[2J" in stdout
