"""What survives ``kill -9`` for samples and spans: every flushed part is whole and readable, no
row is lost between flushed parts, and a trace killed mid-span keeps its finished spans with the
open ones marked ``unfinished``."""

from __future__ import annotations

import json
import signal
import textwrap
import time

import duckdb
import pyarrow.parquet as pq

from tests.helpers import kill9, python_child
from trackstore.read.listing import list_runs
from trackstore.records.samples import decode_row
from trackstore.records.trace import latest_rows
from trackstore.store.layout import RunPaths


def wait_for(pred, timeout=60.0, every=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(every)
    return False


def read_parts(paths: RunPaths, kind: str) -> list[dict]:
    rows = []
    for p in paths.parts(kind):
        t = pq.read_table(p)  # raises if a visible file were partial
        assert t.schema.metadata[b"trackstore.kind"] == kind.encode()
        rows += t.to_pylist()
    return sorted(rows, key=lambda r: r["seq"])


SAMPLER = textwrap.dedent(
    """
    import time, trackstore
    run = trackstore.init("crash", root={root!r}, run_id="samples", flush_interval=0.05)
    print("started", flush=True)
    step = 0
    while True:
        run.log_samples([{{"input": f"prompt {{step}}/{{i}} 问题" * 50, "output": {{"answer": step * 10 + i}},
                          "score": i / 4, "ground_truth": str(i)}} for i in range(4)], step=step)
        step += 1
        time.sleep(0.002)
    """
)


def test_sigkill_keeps_flushed_samples(root):
    child = python_child(SAMPLER.format(root=str(root)))
    assert child.stdout.readline().strip() == "started", child.stderr.read()
    paths = RunPaths(root, "crash", "samples")
    assert wait_for(lambda: len(paths.parts("samples")) >= 3), child.stderr.read() if child.poll() else "no parts"
    kill9(child)
    rows = read_parts(paths, "samples")
    assert [r["seq"] for r in rows] == list(range(len(rows))), "a flushed part is missing or duplicated"
    assert len(rows) >= 3
    for r in rows:  # each row is whole and what was logged
        got = decode_row(r)
        step, i = got["step"], got["sample_index"]
        assert got["input"] == f"prompt {step}/{i} 问题" * 50
        assert got["output"] == {"answer": step * 10 + i} and got["score"] == i / 4 and got["ground_truth"] == str(i)
    # steps are contiguous: nothing between two flushed parts was lost
    steps = sorted({r["step"] for r in rows})
    assert steps == list(range(len(steps)))
    assert [r.status for r in list_runs(root)] == ["crashed"]


TRACER = textwrap.dedent(
    """
    import time, trackstore
    from trackstore.records.trace import traced
    run = trackstore.init("crash", root={root!r}, run_id="spans", flush_interval=0.05)

    @traced(kind="llm")
    def generate(prompt):
        return "call search(" + prompt + ")"

    @traced(kind="tool")
    def search(query):
        print("in tool", flush=True)
        time.sleep(3600)  # the tool hangs; the process is killed here

    with run.trace(step=3, sample_index=1, task="demo") as tr:
        with tr.span("assistant_turn", kind="agent", inputs={{"messages": [{{"role": "user", "content": "天气?"}}]}}):
            generate("weather")
            search("weather in Paris")
    """
)


def test_sigkill_mid_span_keeps_finished_spans_and_marks_open_ones(root):
    child = python_child(TRACER.format(root=str(root)))
    assert child.stdout.readline().strip() == "in tool", child.stderr.read()
    paths = RunPaths(root, "crash", "spans")

    def open_spans_on_disk():
        if not paths.parts("spans"):
            return False
        rows = latest_rows(read_parts(paths, "spans"))
        return sum(r["status"] == "unfinished" for r in rows) == 3

    assert wait_for(open_spans_on_disk), "open spans never reached the disk"
    kill9(child)
    raw = read_parts(paths, "spans")
    assert [r["seq"] for r in raw] == list(range(len(raw)))
    rows = {r["name"]: r for r in latest_rows(raw)}
    assert set(rows) == {"episode", "assistant_turn", "generate", "search"}
    assert rows["generate"]["status"] == "ok" and json.loads(rows["generate"]["outputs"]) == "call search(weather)"
    for name in ("episode", "assistant_turn", "search"):
        assert rows[name]["status"] == "unfinished" and rows[name]["end_ns"] is None
    assert json.loads(rows["search"]["inputs"]) == {"query": "weather in Paris"}
    assert json.loads(rows["assistant_turn"]["inputs"])["messages"][0]["content"] == "天气?"
    assert json.loads(rows["episode"]["attributes"]) == {"task": "demo"}
    assert rows["search"]["parent_span_id"] == rows["assistant_turn"]["span_id"]
    assert rows["assistant_turn"]["parent_span_id"] == rows["episode"]["span_id"]

    # The same rule in SQL, as the spans view applies it: one row per span, the final one if any.
    con = duckdb.connect()
    got = con.execute(
        "SELECT name, status FROM read_parquet(?) QUALIFY row_number() OVER (PARTITION BY trace_id, span_id "
        "ORDER BY (status <> 'unfinished') DESC, seq DESC) = 1 ORDER BY start_ns",
        [str(paths.kind_dir("spans") / "*.parquet")],
    ).fetchall()
    assert got == [("episode", "unfinished"), ("assistant_turn", "unfinished"), ("generate", "ok"),
                   ("search", "unfinished")]
    assert [r.status for r in list_runs(root)] == ["crashed"]


SIGTERM_TRACER = textwrap.dedent(
    """
    import time, trackstore
    run = trackstore.init("crash", root={root!r}, run_id="term")  # default flush interval: 2 s
    with run.trace(step=0) as tr:
        with tr.span("done", kind="llm") as s:
            s.set_outputs("fine")
        with tr.span("generate", kind="llm", inputs={{"prompt": "p"}}):
            print("generating", flush=True)
            time.sleep(3600)  # pre-empted here, long before any checkpoint or flush
    """
)


def test_sigterm_mid_span_records_open_spans(root):
    child = python_child(SIGTERM_TRACER.format(root=str(root)))
    assert child.stdout.readline().strip() == "generating", child.stderr.read()
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=60)
    child.stdout.close()
    child.stderr.close()
    assert child.returncode == -signal.SIGTERM
    rows = {r["name"]: r for r in latest_rows(read_parts(RunPaths(root, "crash", "term"), "spans"))}
    assert {n: r["status"] for n, r in rows.items()} == {"episode": "unfinished", "done": "ok",
                                                          "generate": "unfinished"}
    assert json.loads(rows["generate"]["inputs"]) == {"prompt": "p"}
    assert [r.status for r in list_runs(root)] == ["failed"]


def test_finish_with_an_open_span_keeps_it(root):
    import trackstore

    run = trackstore.init("p", root=root)
    tr = run.trace(step=0)
    tr.__enter__()
    tr.span("left_open", kind="tool").start()
    run.finish()
    tr.__exit__(None, None, None)  # leave the context as it was (ending after finish records nothing)
    rows = {r["name"]: r["status"] for r in latest_rows(read_parts(RunPaths(root, "p", run.id), "spans"))}
    assert rows == {"episode": "unfinished", "left_open": "unfinished"}
