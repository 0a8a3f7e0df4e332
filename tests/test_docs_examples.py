"""Every code example in README.md and docs/*.md runs as written, or says why it cannot.

A code example is a fenced block tagged ``bash``, ``sh``, ``shell``, ``console``, ``python`` or
``py``; every other fence (``text``, ``sql``, ``json``, ``cron``, ``ini``, untagged layout and
expected output) is not code and is left alone. Each doc file is one session, run in a process
of its own: a fresh folder as working directory and ``$HOME``, ``TRACKSTORE_DIR`` set to its
``tsruns/`` (the default store of a shell in that folder), and the run ``make demo`` writes
already in that store (``trackstore demo``: 200 steps, run ``demo-grpo/qwen2.5-0.5b-grpo-gsm8k``,
under a second), so a doc can say ``RUN=demo-grpo/qwen2.5-0.5b-grpo-gsm8k``.
The file's examples then run in order, as a reader pasting them would: the Python ones in one
interpreter (one namespace, like a REPL), the shell ones in bash with ``set -e``, each seeing the
variables the file's earlier shell examples set. An example passes when it exits 0 without a
traceback, within its time limit. The sessions' ``trackstore`` is the real CLI, each command
a process forked from the tests' fork server (tests/forkcli.py, tests/zygote.py: the same
file descriptors, environment, arguments, exit code and signals as the console script, a
fresh interpreter wherever a forked one could differ) rather than one importing DuckDB,
pyarrow and mlflow again per command.

Contributors: an example that cannot run here (it needs a GPU cluster, verl, the internet, a
real wandb or SwanLab account, a cron daemon, or it takes minutes) is opted out with an HTML
comment on the line right above its fence, which Markdown does not show::

    <!-- not-run: needs a SwanLab server and an API key -->

The reason is required and is for the reader of the doc: name what is missing. Prefer making an
example runnable (define what it uses, take a run from an earlier line such as
``RUN=demo-grpo/qwen2.5-0.5b-grpo-gsm8k`` rather than a fixed run id) over opting it out. A
marker without a reason, or one not directly above a code fence, fails the test. The CLI
reference (docs/cli.md) is checked against ``--help`` by tests/test_cli_docs.py instead, and
the README's quick start after ``make demo`` by tests/test_readme_runs.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from tests.helpers import REPO, forked_cli_command

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
PYTHON = {"python", "py"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})(?P<lang>[^\s`]*)")
MARKER = re.compile(r"^\s*<!--\s*not-run\b(?P<rest>.*?)-->\s*$")
BLOCK_TIMEOUT = 120  # seconds for one example; `trackstore ui` and other servers never end
DEMO_RUN = "demo-grpo/qwen2.5-0.5b-grpo-gsm8k"


@dataclass(frozen=True)
class Example:
    doc: str     # path relative to the repository
    line: int    # line of the opening fence, 1-based
    lang: str    # "bash" or "python"
    code: str
    not_run: str | None  # the reason given by a marker above the fence, else None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def parse(path: Path, base: Path = REPO) -> tuple[list[Example], list[str]]:
    """The code examples of one Markdown file, and what is wrong with its not-run markers."""
    doc = path.relative_to(base).as_posix()
    lines = path.read_text().split("\n")
    examples: list[Example] = []
    problems: list[str] = []
    markers: dict[int, str] = {}  # line index of a marker -> its reason
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            reason = m.group("rest").strip().lstrip(":").strip()
            if not m.group("rest").strip().startswith(":") or not reason:
                problems.append(f"{doc}:{i + 1}: not-run marker without a reason: write <!-- not-run: REASON -->")
            markers[i] = reason
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            i += 1
            continue
        close = re.compile(rf"^[ \t]*{re.escape(f.group('ticks')[0])}{{{len(f.group('ticks'))},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        lang = f.group("lang").lower()
        above = i - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        marker = markers.pop(above, None) if above >= 0 else None
        if lang in SHELL or lang in PYTHON:
            body = textwrap.dedent("\n".join(lines[i + 1:j]))
            if lang == "console":  # a transcript: the commands are the lines after a "$ " prompt
                body = "\n".join(ln[2:] for ln in body.splitlines() if ln.startswith("$ "))
            examples.append(Example(doc, i + 1, "python" if lang in PYTHON else "bash", body + "\n", marker))
        elif marker is not None:
            problems.append(f"{doc}:{above + 1}: not-run marker above a {lang or 'untagged'} block, which is not code")
        i = j + 1
    problems += [f"{doc}:{k + 1}: not-run marker not directly above a code block" for k in markers]
    return examples, problems


# The session driver: run in the doc's folder by the doc's own interpreter, one per doc file.
DRIVER = r'''
import json, os, subprocess, sys, time, traceback
examples = json.load(open(sys.argv[1]))
state = os.path.abspath(".doc-session-env")
namespace = {"__name__": "__main__"}
for ex in examples:
    print(f"\n### {ex['doc']}:{ex['line']} ({ex['lang']})", flush=True)
    print(f"\n### {ex['doc']}:{ex['line']} ({ex['lang']})", file=sys.stderr, flush=True)
    started = time.monotonic()
    if ex["lang"] == "python":
        try:
            exec(compile(ex["code"], f"{ex['doc']}:{ex['line']}", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"FAILED {ex['doc']}:{ex['line']}", file=sys.stderr, flush=True)
            sys.exit(1)
        sys.stdout.flush(); sys.stderr.flush()
        print(f"### {ex['doc']}:{ex['line']} took {time.monotonic() - started:.1f} s", flush=True)
        continue
    script = (f"set -a\n[ -f {state} ] && . {state}\nset +a\nset -e\n" + ex["code"]
              + f"\nset +e\nexport -p > {state}\n")
    try:
        rc = subprocess.run(["bash", "-c", script], timeout=float(sys.argv[2])).returncode
    except subprocess.TimeoutExpired:
        print(f"FAILED {ex['doc']}:{ex['line']}: still running after {sys.argv[2]} s", file=sys.stderr, flush=True)
        sys.exit(1)
    if rc != 0:
        print(f"FAILED {ex['doc']}:{ex['line']}: exit {rc}", file=sys.stderr, flush=True)
        sys.exit(1)
    print(f"### {ex['doc']}:{ex['line']} took {time.monotonic() - started:.1f} s", flush=True)
'''


def session_env(folder: Path) -> dict[str, str]:
    """The hermetic test environment (tests/conftest.py), as a reader's shell in ``folder``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACKSTORE_", "VIRTUAL_ENV"))}
    env.update(
        HOME=str(folder), TRACKSTORE_DIR=str(folder / "tsruns"), TRACKSTORE_DISABLE_GIT="1", COLUMNS="80",
        PAGER="cat", PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)]),
    )
    return env


def run_session(doc: str, examples: list[Example], folder: Path) -> subprocess.CompletedProcess:
    env = session_env(folder)
    # `trackstore` in the session: the real CLI, each command forked from the tests' fork server
    # (tests/forkcli.py) rather than a fresh interpreter paying the imports again
    forked = forked_cli_command(folder.parent / "bin", env)
    if forked is not None:
        env["PATH"] = os.pathsep.join([str(forked.parent), env["PATH"]])
    command = [str(forked)] if forked else [sys.executable, "-m", "trackstore.cli.main"]
    demo = subprocess.run([*command, "demo"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    assert demo.returncode == 0, demo.stderr
    plan = folder / ".doc-session.json"
    plan.write_text(json.dumps([asdict(e) for e in examples]))
    return subprocess.run([sys.executable, "-c", DRIVER, str(plan), str(BLOCK_TIMEOUT)], cwd=folder, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=BLOCK_TIMEOUT * (len(examples) + 1))


PARSED = {p.relative_to(REPO).as_posix(): parse(p) for p in DOCS}
WITH_CODE = [doc for doc, (examples, _) in PARSED.items() if examples]


def test_not_run_markers_give_a_reason_and_sit_above_code():
    problems = [p for _, found in PARSED.values() for p in found]
    assert problems == [], "\n".join(problems)


def test_the_parser_finds_examples_and_markers(tmp_path):
    md = tmp_path / "x.md"
    md.write_text("```bash\necho hi\n```\n\n<!-- not-run: needs a GPU -->\n\n```python\nimport torch\n```\n"
                  "<!-- not-run -->\n```sh\nfalse\n```\n```text\nout\n```\n<!-- not-run: stale -->\n")
    examples, problems = parse(md, base=tmp_path)
    assert [(e.lang, e.code, e.not_run) for e in examples] == [
        ("bash", "echo hi\n", None), ("python", "import torch\n", "needs a GPU"), ("bash", "false\n", "")]
    assert [p.split(": ", 1)[1] for p in problems] == [
        "not-run marker without a reason: write <!-- not-run: REASON -->",
        "not-run marker not directly above a code block"]


@pytest.mark.parametrize("doc", WITH_CODE)
def test_doc_examples_run(doc, tmp_path):
    examples = [e for e in PARSED[doc][0] if e.not_run is None]
    if not examples:
        pytest.skip(f"every example of {doc} is marked not-run")
    folder = tmp_path / "session"
    folder.mkdir()
    out = run_session(doc, examples, folder)
    failed = re.search(r"^FAILED (\S+)", out.stderr, flags=re.M)
    where = failed.group(1).rstrip(":") if failed else doc
    assert out.returncode == 0, (
        f"the example at {where} failed as pasted (fix it, or mark it <!-- not-run: REASON -->)\n"
        f"--- stdout (tail)\n{out.stdout[-3000:]}\n--- stderr (tail)\n{out.stderr[-4000:]}")
    assert "Traceback (most recent call last)" not in out.stderr, out.stderr[-4000:]


# Examples opted out with <!-- not-run: ... -->, by what they need: benchmarks of minutes; verl,
# GPUs or the framework venv; wandb, SwanLab or MLflow servers, accounts and proxies; the air
# gap's cluster store and drive; the venv `make demo` builds; systemd, SSH, and servers that run
# until stopped; the team store's S3 endpoint, replica, PySpark and Ray (docs/team-store.md: its
# DuckDB and Polars recipes run in tests/test_team_store_server.py, its Spark one in tests/spark;
# its reading and retention examples run here over a folder; the README's S3 lines do not; the
# team store benchmark takes six minutes); ingest's other sources (each run by its own
# tests/test_ingest_*.py) and the README's line of it (docs/ingest.md runs it); the system
# metrics and ingest benchmarks; the checkpoints of a verl run (tests/integrations/test_verl.py
# logs and reads them). Lower the cap when you make one run; raising it needs
# a reason in the commit.
MAX_NOT_RUN = 58


def test_opting_out_stays_the_exception():
    examples = [e for doc in WITH_CODE for e in PARSED[doc][0]]
    opted_out = [f"{e.where}: {e.not_run}" for e in examples if e.not_run is not None]
    assert len(opted_out) <= MAX_NOT_RUN, (
        f"{len(opted_out)} of {len(examples)} examples are not run (at most {MAX_NOT_RUN}): make the new one "
        "runnable, or raise MAX_NOT_RUN saying why\n" + "\n".join(opted_out))
