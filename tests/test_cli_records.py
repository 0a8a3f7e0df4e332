"""``trackstore samples`` and ``trackstore trace`` through the real CLI: on the demo run, and on a
verl-shaped multi-turn trajectory (agent loop, generate calls with chat messages and tool calls,
a tool call, a reward), with a run that has neither for the errors; and ``show``'s summary."""

from __future__ import annotations

import json
import shlex

import pytest

import trackstore
from tests.helpers import run_cli
from trackstore.read.listing import list_runs

# its tests share a module-scoped server/store: `make test` (--dist loadgroup) keeps them on one
# worker, so it is set up once, not once per worker
pytestmark = pytest.mark.xdist_group("test_cli_records")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    out = run_cli("demo", "--steps", "40", root=root)
    assert out.returncode == 0, out.stderr
    [info] = list_runs(root)
    return root, info


def _ok(out):
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    return out.stdout


def test_samples_on_the_demo_run(demo):
    root, info = demo
    text = _ok(run_cli("samples", info.run_id, root=root))
    assert f"{info.project}/{info.run_id}: 16 samples" in text  # 8 per validation, at steps 20 and 40
    assert text.index("step 40 · val · #0") < text.index("step 20 · val · #0")  # newest step first
    assert "input: What is" in text and "output: Let me compute." in text and "ground_truth:" in text

    rows = json.loads(_ok(run_cli("samples", f"{info.project}/{info.name}", "--step", "20", "-f", "json", root=root)))
    assert len(rows) == 8 and {r["step"] for r in rows} == {20} and [r["sample_index"] for r in rows] == list(range(8))
    assert set(rows[0]) >= {"step", "split", "sample_index", "input", "output", "score", "ground_truth"}

    good = json.loads(_ok(run_cli("samples", info.run_id[:20], "--min-score", "1", "-f", "json", "-n", "0", root=root)))
    assert good and all(r["score"] >= 1 for r in good)
    wanted = rows[3]["input"]
    jsonl = _ok(run_cli("samples", info.run_id, "--grep", wanted.upper(), "--step", "20", "-f", "jsonl", root=root))
    hits = [json.loads(line) for line in jsonl.splitlines()]
    assert [h["input"] for h in hits] == [wanted]
    limited = _ok(run_cli("samples", info.run_id, "-n", "3", "--split", "val", root=root))
    assert "3 of 16 samples" in limited and "13 more: --limit 0 shows all" in limited
    none = run_cli("samples", info.run_id, "--grep", "no such text anywhere", root=root)
    assert _ok(none).count("no sample matches") == 1


def test_samples_and_trace_errors(demo):
    root, info = demo
    bad = run_cli("samples", info.run_id, "--step", "21", root=root)
    assert bad.returncode == 2 and "--step 21" in bad.stderr and "20, 40" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_cli("trace", info.run_id, "--step", "7", root=root)
    assert bad.returncode == 2 and "steps with trajectories: 20, 40" in bad.stderr
    bad = run_cli("trace", info.run_id, "--sample-index", "5", root=root)
    assert bad.returncode == 2 and "--sample-index 5" in bad.stderr
    bare = trackstore.init("plain", name="metrics-only", root=root)
    bare.log({"loss": 1.0}, step=0)
    bare.finish()
    for cmd, what in (("samples", "has no samples"), ("trace", "has no trajectories")):
        out = run_cli(cmd, "plain/metrics-only", root=root)
        assert out.returncode == 3 and what in out.stderr and "docs/records.md" in out.stderr, out.stderr
    out = run_cli("samples", "no-such-run", root=root)
    assert out.returncode == 3 and "no run matches" in out.stderr


def test_trace_on_the_demo_run(demo):
    root, info = demo
    text = _ok(run_cli("trace", info.run_id, root=root, env={"COLUMNS": "80"}))
    assert "1 trajectory at step 40" in text and "step 40 · sample 0 · rollout 0 · validation · reward 1" in text
    lines = text.splitlines()
    depth = {name: next(len(line) - len(line.lstrip()) for line in lines if line.lstrip().startswith(name + " ["))
             for name in ("episode", "user", "assistant", "calculator", "reward")}
    assert depth == {"episode": 0, "user": 2, "assistant": 2, "calculator": 4, "reward": 2}  # nesting by indentation
    assert "arguments: {\"expression\":" in text and "result: " in text and "reward: 1.0" in text
    assert "steps with trajectories: 20, 40 (--step N)" in text
    assert all(len(line) <= 80 for line in lines)

    [tree] = json.loads(_ok(run_cli("trace", info.run_id, "--step", "20", "-f", "json", root=root)))
    assert tree["name"] == "episode" and tree["reward"] == 1.0 and tree["step"] == 20
    assert [c["name"] for c in tree["children"]] == ["user", "assistant", "reward"]
    assert tree["children"][1]["children"][0]["name"] == "calculator"
    assert tree["children"][1]["children"][0]["inputs"] == {"expression": tree["children"][1]["inputs"][0]["content"]}


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    """A trajectory shaped as verl's tool agent loop writes it (trackstore/integrations/verl_trace.py)."""
    root = tmp_path_factory.mktemp("verl")
    run = trackstore.init("verl", name="tool-agent", root=root)
    long_answer = "\n".join(f"line {i}: reasoning step" for i in range(40))
    for rollout_n in range(2):
        with run.trace(step=3, sample_index=7, rollout_n=rollout_n, name="agent_loop", data_source="gsm8k") as tr:
            messages = [{"role": "system", "content": "You can call tools."},
                        {"role": "user", "content": "How many r in strawberry?"}]
            with tr.span("AsyncLLMServerManager.generate", kind="llm", inputs=messages) as gen:
                gen.set_outputs({"role": "assistant", "content": "Let me count.",
                                 "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "count_letters",
                                                              "arguments": "{\"word\": \"strawberry\", \"letter\": \"r\"}"}}]})
            with tr.span("ToolAgentLoop._call_tool", kind="tool", inputs={"word": "strawberry", "letter": "r"}) as tool:
                tool.set_outputs({"count": 3})
            history = [*messages, {"role": "assistant", "content": "Let me count.",
                                   "tool_calls": [{"name": "count_letters", "arguments": {"word": "strawberry"}}]},
                       {"role": "tool", "content": "3", "tool_call_id": "c1"}]
            with tr.span("AsyncLLMServerManager.generate", kind="llm",
                         inputs={"prompt_ids": list(range(300)), "prompt_text": "…", "messages": history}) as gen:
                gen.set_outputs({"token_ids": list(range(200)), "response_text": long_answer + "\nThere are 3."})
            with tr.span("compute_score", kind="reward", inputs={"response": "There are 3.", "ground_truth": "3"},
                         outputs=1.0 - 0.5 * rollout_n):
                pass
            tr.set_reward(1.0 - 0.5 * rollout_n)
    run.finish()
    return root, run


def test_trace_reads_a_verl_trajectory_as_a_conversation(verl_run):
    root, run = verl_run
    text = _ok(run_cli("trace", "verl/tool-agent", root=root, env={"COLUMNS": "100"}))
    assert "2 trajectories at step 3" in text
    assert "step 3 · sample 7 · rollout 0 · reward 1 ·" in text and "step 3 · sample 7 · rollout 1 · reward 0.5 ·" in text
    for expected in ("system: You can call tools.", "user: How many r in strawberry?", "assistant: Let me count.",
                     'tool call count_letters: {"word": "strawberry", "letter": "r"}',
                     "ToolAgentLoop._call_tool [tool]", 'result: {"count": 3}', "tool: 3",
                     "prompt_ids: [300 ids: 0, 1, 2, 3, 4, 5, 6, 7, ...]", "response_text:", "line 0: reasoning step",
                     "--full shows all", "reward: 1.0", 'attributes: {"data_source": "gsm8k"}'):
        assert expected in text, (expected, text)
    assert "line 39: reasoning step" not in text  # folded
    assert " ms" in text or " µs" in text  # timing of each span
    full = _ok(run_cli("trace", run.id, "--full", "--sample-index", "7", root=root))
    assert "line 39: reasoning step" in full and "There are 3." in full and "--full shows all" not in full
    one = json.loads(_ok(run_cli("trace", run.id, "-n", "1", "-f", "json", root=root)))
    assert len(one) == 1 and one[0]["name"] == "agent_loop" and one[0]["rollout_n"] == 0
    assert [c["kind"] for c in one[0]["children"]] == ["llm", "tool", "llm", "reward"]
    assert one[0]["children"][2]["outputs"]["response_text"].endswith("There are 3.")
    limited = _ok(run_cli("trace", run.id, "-n", "1", root=root))
    assert "1 of 2 trajectories" in limited and "1 more: --limit 0 shows all" in limited


def test_no_pager_without_a_terminal(demo):
    """stdout is a pipe here: the whole text comes out, nothing waits for a key."""
    root, info = demo
    out = run_cli("samples", info.run_id, "-n", "0", "--full", root=root, env={"PAGER": "false", "LINES": "5"})
    assert _ok(out).count("· val ·") == 16


def test_show_summarises_the_demo_run(demo):
    root, info = demo
    text = _ok(run_cli("show", info.run_id, root=root, env={"COLUMNS": "80"}))
    lines = text.splitlines()
    assert len(lines) < 90, len(lines)  # it was ~240 lines: a 100-key summary, then the same keys again
    for expected in ("records", "16 samples at 2 steps (20..40), split val",
                     "2 trajectories (10 spans) at 2 steps (20..40)", "2 histograms of 1 key", "artifacts",
                     "metrics (12 of", "critic/score/mean", "val-core/gsm8k/reward/mean@1",
                     f"trackstore samples {info.run_id}", f"trackstore trace {info.run_id}",
                     f"trackstore plot {info.run_id} -k critic/score/mean", "trackstore sql"):
        assert expected in text, expected
    assert "actor/layer_00/grad_norm" not in text  # a chosen few keys, not all of them
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("trackstore sql"))
    suggested = lines[at].strip()
    while suggested.endswith("\\"):  # continued on the next line (a backslash, as a shell reads it)
        at += 1
        suggested = suggested[:-1] + lines[at].strip()
    assert suggested.startswith(f'trackstore sql -r {info.run_id} "SELECT * FROM metrics"'), suggested
    argv = shlex.split(suggested)[1:]
    argv = argv[:argv.index("--root")] if "--root" in argv else argv
    pasted = _ok(run_cli(*argv, "-f", "json", root=root))  # as pasted: this run's points
    assert {r["run_id"] for r in json.loads(pasted)} == {info.run_id}
    every = _ok(run_cli("show", info.run_id, "--all-keys", root=root))
    assert "actor/layer_00/grad_norm" in every and "metrics (12 of" not in every
    data = json.loads(_ok(run_cli("show", info.run_id, "-f", "json", root=root)))[0]
    assert data["records"]["samples"]["rows"] == 16 and data["records"]["spans"]["trajectories"] == 2
    assert data["records"]["metrics"]["keys"] == len(data["metrics"]) > 90
    assert data["records"]["histograms"] == {"rows": 2, "keys": 1}


def _in_terminal(args: list[str], env: dict, columns: int = 80, lines: int = 20) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal of ``columns`` x ``lines``; what it printed."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", *args], stdin=slave,
                            stdout=slave, stderr=slave, env={**os.environ, **env, "COLUMNS": str(columns),
                                                             "LINES": str(lines)})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace")


def test_pager_on_a_terminal_only_when_the_text_is_longer_than_the_screen(demo, tmp_path):
    root, info = demo
    paged = tmp_path / "paged.txt"
    env = {"PAGER": f"cat > {paged}"}
    shown = _in_terminal(["samples", info.run_id, "-n", "0", "--root", str(root)], env)
    assert paged.exists() and paged.read_text().count("· val ·") == 16  # 16 samples: longer than 20 lines
    assert "· val ·" not in shown
    assert "\x1b[" not in paged.read_text()  # plain text: the pager was not asked to show colours
    paged.unlink()
    shown = _in_terminal(["samples", info.run_id, "-n", "1", "--root", str(root)], env)
    assert not paged.exists() and "step 40 · val · #0" in shown  # fits the screen: printed directly
    shown = _in_terminal(["samples", info.run_id, "-n", "0", "--no-pager", "--root", str(root)], env)
    assert not paged.exists() and shown.count("· val ·") == 16


@pytest.mark.parametrize("columns", [80, 120])
def test_samples_trace_show_fit_the_width(demo, verl_run, columns):
    import re

    root, info = demo
    vroot, vrun = verl_run
    for args, r in ((["samples", info.run_id], root), (["show", info.run_id], root),
                    (["trace", vrun.id, "-n", "0"], vroot), (["trace", vrun.id, "--full"], vroot)):
        text = _in_terminal([*args, "--root", str(r), *(["--no-pager"] if args[0] != "show" else [])], {},
                            columns=columns, lines=500)
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")
        too_long = [line for line in plain.splitlines() if len(line) > columns]
        assert too_long == [], (args, too_long[:3])


def test_damaged_trees_hide_nothing(tmp_path):
    """A span whose parent was never written hangs under the root; a checkpointed span shows
    as unfinished; a trajectory without a root span is still shown; steps may be NULL."""
    from tests.query_fixtures import part
    from trackstore.read.browse import find_trajectories
    from trackstore.read.views import connect

    root = tmp_path / "store"
    run = trackstore.init("p", name="broken", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish()
    spans = [
        {"trace_id": "t1", "span_id": "r", "name": "rollout", "kind": "agent", "step": 1, "reward": 0.5,
         "start_ns": 0, "end_ns": 9_000_000, "status": "ok"},
        {"trace_id": "t1", "span_id": "o", "parent_span_id": "never-written", "name": "orphan", "kind": "tool",
         "step": 1, "start_ns": 1_000_000, "end_ns": 2_000_000, "status": "ok"},
        {"trace_id": "t1", "span_id": "u", "parent_span_id": "r", "name": "hanging", "kind": "tool", "step": 1,
         "start_ns": 3_000_000, "status": "unfinished", "inputs": "{\"cmd\": \"sleep 1000\"}"},
        {"trace_id": "t2", "span_id": "c", "parent_span_id": "gone", "name": "rootless", "kind": "llm", "step": 1,
         "start_ns": 5_000_000, "end_ns": 6_000_000, "status": "error", "error": "TimeoutError: 30 s"},
    ]
    part(root, "p", run.id, "spans", spans, writer="w9")
    with connect(root) as con:
        roots, total = find_trajectories(con, resolve(root, run.id), step=1)
    assert total == 2
    assert [c.row["name"] for c in roots[0].children] == ["orphan", "hanging"]
    assert roots[1].row["name"] == "(no root span)" and [c.row["name"] for c in roots[1].children] == ["rootless"]
    text = _ok(run_cli("trace", "p/broken", "-n", "0", root=root))
    for expected in ("rollout [agent]", "  orphan [tool] 1.0 ms", "  hanging [tool] unfinished",
                     'arguments: {"cmd": "sleep 1000"}', "(no root span)", "rootless [llm] 1.0 ms error",
                     "error: TimeoutError: 30 s", "reward 0.5"):
        assert expected in text, (expected, text)


def resolve(root, run_id):
    from trackstore.read.listing import resolve_run

    return resolve_run(run_id, root)
