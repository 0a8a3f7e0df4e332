"""A failing disk (here: RLIMIT_FSIZE, as a quota or a full disk behaves) never raises into the
training loop: data stays in memory, one loud warning, everything written once the disk
recovers; at finish, what could not be written is reported with a WriteError. Metrics, samples
and spans alike."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pyarrow.parquet as pq

from trackstore.read.listing import list_runs
from trackstore.records.samples import decode_row
from trackstore.records.trace import latest_rows
from trackstore.store.layout import RunPaths

PRELUDE = textwrap.dedent(
    """
    import json, resource, signal, sys, time, trackstore
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    SOFT, HARD = resource.getrlimit(resource.RLIMIT_FSIZE)

    def disk_fails():
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, HARD))  # no file may grow by one byte

    def disk_recovers():
        resource.setrlimit(resource.RLIMIT_FSIZE, (HARD, HARD))

    def wait(pred, timeout=30):
        end = time.monotonic() + timeout
        while not pred() and time.monotonic() < end:
            time.sleep(0.02)
        return pred()

    def log_steps(run, first, n):
        for step in range(first, first + n):
            run.log({f"k{i:02d}": step * 100 + i for i in range(50)}, step=step)

    run = trackstore.init("disk", root=sys.argv[1], run_id="r1", flush_interval=0.05)
    log_steps(run, 0, 10)
    assert run.flush()
    """
)

RECOVERS = PRELUDE + textwrap.dedent(
    """
    disk_fails()
    log_steps(run, 10, 400)
    failing = wait(lambda: run._writer.failing)
    time.sleep(0.3)  # several retries while the disk is still failing
    log_steps(run, 410, 90)
    print(json.dumps({"failing": failing}), flush=True)
    sys.stdin.readline()  # the parent looks at the disk while nothing can be written
    disk_recovers()
    assert wait(lambda: not run._writer.failing)
    log_steps(run, 500, 100)
    run.finish()
    print(json.dumps({"done": True}), flush=True)
    """
)

SAMPLES_AND_SPANS = PRELUDE + textwrap.dedent(
    """
    from trackstore.records.trace import traced

    @traced(kind="tool")
    def tool(query):
        return f"result[{query}]"

    def episodes(first, n):  # per step: 4 samples, and one trace of 3 spans
        for step in range(first, first + n):
            got = run.log_samples([{"input": f"问题 {step}-{j} ✓", "output": f"answer {step}-{j}", "score": j / 4,
                                    "group_id": f"g{step}"} for j in range(4)], step=step)
            assert got == 4
            with run.trace(step=step, sample_index=0, rollout_n=1) as tr:
                with tr.span("generate", kind="llm", inputs={"prompt": f"p{step}"}) as s:
                    s.set_outputs(f"o{step}")
                tool(f"q{step}")
                tr.set_reward(step)

    disk_fails()
    # a trajectory open across the whole failure: its 'unfinished' checkpoints are buffered too
    long = run.trace(step=1000, sample_index=0, name="long_episode").start()
    slow = long.span("slow_tool", kind="tool", inputs={"q": "slow"}).start()
    episodes(0, 100)
    failing = wait(lambda: run._writer.failing)
    time.sleep(0.3)  # several retries (and checkpoints of the open spans) while the disk fails
    episodes(100, 50)
    print(json.dumps({"failing": failing}), flush=True)
    sys.stdin.readline()  # the parent looks at the disk while nothing can be written
    disk_recovers()
    assert wait(lambda: not run._writer.failing)
    slow.set_outputs("done").end()
    long.end()
    episodes(150, 50)
    run.finish()
    print(json.dumps({"done": True}), flush=True)
    """
)

STILL_FAILING = PRELUDE + textwrap.dedent(
    """
    disk_fails()
    log_steps(run, 10, 200)
    try:
        run.finish()
    except trackstore.WriteError as exc:
        print(json.dumps({"error": str(exc), "type": type(exc).__name__}), flush=True)
    """
)

OVER_BOUND = PRELUDE + textwrap.dedent(
    """
    disk_fails()
    log_steps(run, 10, 100)
    wait(lambda: run._writer.failing)
    time.sleep(0.2)
    run._writer.max_pending_bytes = 1  # the memory bound, now reached by what is held
    log_steps(run, 110, 100)  # beyond the bound: counted as dropped, still never raises
    disk_recovers()
    try:
        run.finish()
    except trackstore.WriteError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
    """
)


def child(code, root):
    return subprocess.Popen([sys.executable, "-c", code, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def no_temp_files_remain(folder, timeout=10.0):
    """True once a listing shows no hidden temp file: a leaked one would show in every listing."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not [f for f in folder.iterdir() if f.name.startswith(".")]:
            return True
        time.sleep(0.001)
    return False


def rows(paths):
    return pq.read_table(paths.kind_dir("metrics")).to_pydict()


def test_disk_failure_keeps_data_in_memory_until_it_recovers(root):
    paths = RunPaths(root, "disk", "r1")
    p = child(RECOVERS, root)
    line = p.stdout.readline()
    assert json.loads(line or "{}") == {"failing": True}, p.stderr.read() if not line else line
    # While failing: only the part flushed before, no half-written or temp file left behind.
    assert len(paths.parts("metrics")) == 1
    # A retry may hold a temp file for an instant; none may outlive the attempt that made it.
    assert no_temp_files_remain(paths.kind_dir("metrics"))
    assert len(rows(paths)["seq"]) == 10 * 50
    out, err = p.communicate("go\n", timeout=120)
    assert p.returncode == 0, err
    assert json.loads(out) == {"done": True}
    # One loud warning for the failure (not one per retry), one notice for the recovery.
    assert err.count("trackstore: WARNING") == 2, err
    assert err.count("Training continues") == 1 and "File too large" in err
    assert err.count("works again") == 1
    got = rows(paths)
    assert len(got["seq"]) == 600 * 50 and sorted(got["seq"]) == list(range(600 * 50))
    assert {(s, k, v) for s, k, v in zip(got["step"], got["key"], got["value"])} == {
        (s, f"k{i:02d}", s * 100.0 + i) for s in range(600) for i in range(50)}
    [info] = list_runs(root)
    assert info.status == "finished" and info.meta["last_step"] == 599
    assert "write_errors" not in info.meta


def test_samples_and_spans_survive_a_disk_failure(root):
    paths = RunPaths(root, "disk", "r1")
    p = child(SAMPLES_AND_SPANS, root)
    line = p.stdout.readline()
    assert json.loads(line or "{}") == {"failing": True}, p.stderr.read() if not line else line
    # While failing: neither kind has a part on disk, and no temp file outlives its attempt.
    for kind in ("samples", "spans"):
        assert paths.parts(kind) == []
        assert not paths.kind_dir(kind).exists() or no_temp_files_remain(paths.kind_dir(kind))
    out, err = p.communicate("go\n", timeout=120)
    assert p.returncode == 0, err  # log_samples and tracing never raised into the caller
    assert json.loads(out) == {"done": True}
    assert err.count("trackstore: WARNING") == 2, err
    assert err.count("Training continues") == 1 and "File too large" in err
    assert err.count("works again") == 1

    samples = sorted(pq.read_table(paths.kind_dir("samples")).to_pylist(), key=lambda r: r["seq"])
    assert [r["seq"] for r in samples] == list(range(200 * 4))
    assert [(r["step"], r["sample_index"]) for r in samples] == [(s, j) for s in range(200) for j in range(4)]
    for r in map(decode_row, samples):
        s, j = r["step"], r["sample_index"]
        assert (r["input"], r["output"], r["score"], r["group_id"]) == (f"问题 {s}-{j} ✓", f"answer {s}-{j}",
                                                                        j / 4, f"g{s}")

    raw = sorted(pq.read_table(paths.kind_dir("spans")).to_pylist(), key=lambda r: r["seq"])
    assert [r["seq"] for r in raw] == list(range(len(raw)))
    # the open trajectory was checkpointed while the disk failed, and those rows landed too
    assert {(r["name"], r["status"]) for r in raw if r["step"] == 1000} == {
        ("long_episode", "unfinished"), ("slow_tool", "unfinished"), ("long_episode", "ok"), ("slow_tool", "ok")}
    spans = latest_rows(raw)
    assert len(spans) == 200 * 3 + 2 and {r["status"] for r in spans} == {"ok"}
    roots = {r["step"]: r for r in spans if r["parent_span_id"] is None}
    assert sorted(roots) == [*range(200), 1000]
    for step in range(200):
        tid = roots[step]["trace_id"]
        children = sorted((r["name"], r["kind"], r["inputs"], r["outputs"]) for r in spans
                          if r["trace_id"] == tid and r["parent_span_id"] == roots[step]["span_id"])
        assert children == [("generate", "llm", json.dumps({"prompt": f"p{step}"}, separators=(",", ":")),
                             json.dumps(f"o{step}")),
                            ("tool", "tool", json.dumps({"query": f"q{step}"}, separators=(",", ":")),
                             json.dumps(f"result[q{step}]"))]
        assert roots[step]["reward"] == float(step) and roots[step]["rollout_n"] == 1
    slow = next(r for r in spans if r["name"] == "slow_tool")
    assert slow["outputs"] == '"done"' and slow["parent_span_id"] == roots[1000]["span_id"]
    assert len(rows(paths)["seq"]) == 10 * 50  # the metrics flushed before the failure are intact
    [info] = list_runs(root)
    assert info.status == "finished" and "write_errors" not in info.meta


def test_finish_with_disk_still_failing_raises_write_error(root):
    p = child(STILL_FAILING, root)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    result = json.loads(out)
    assert result["type"] == "WriteError"
    assert "10000 metrics rows not written" in result["error"], result
    assert "File too large" in result["error"]
    assert err.count("Training continues") == 1
    paths = RunPaths(root, "disk", "r1")
    assert len(rows(paths)["seq"]) == 10 * 50  # what was flushed before the failure is intact


def test_memory_bound_reports_dropped_rows(root):
    p = child(OVER_BOUND, root)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    msg = json.loads(out)["error"]
    assert "5000 metrics rows dropped (memory bound reached while the disk failed)" in msg, msg
    # a run missing rows never looks complete: it ends failed, saying what was lost
    meta = json.loads((RunPaths(root, "disk", "r1").run_file).read_text())
    assert meta["status"] == "failed" and "5000 metrics rows dropped" in meta["write_errors"]
    assert "could not be stored" in meta["error"]
    # Everything up to the bound was kept and written once the disk came back.
    got = rows(RunPaths(root, "disk", "r1"))
    assert len(got["seq"]) == 110 * 50 and sorted(set(got["step"])) == list(range(110))
