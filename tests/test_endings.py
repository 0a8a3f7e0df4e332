"""Nothing is lost at any ending: every record kind x every way a training process ends x two
environments, each a real Python process, with exact row counts and the run's status read back.

The environments: pandas and numpy installed but not imported by the script (the common
case of a plain script: pyarrow then imports pandas lazily on its first list conversion, which
Python refuses at interpreter shutdown), and both imported first (as verl, TRL or Transformers
do). Every row is still buffered when the ending comes (the flush interval is long), so the
final flush at the ending is what has to save it. For the endings that go through ``atexit``
the child also records every module imported while trackstore ends its run: there must be
none, because at interpreter shutdown an import can fail.

The SIGKILL column is the one ending that lets Python run nothing: everything flushed before
the kill is there, and the run reads as ``crashed``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trackstore

CHILD = textwrap.dedent(
    r'''
    import atexit, json, os, signal, sys, threading, time
    root, ending, env, report_path = sys.argv[1:5]
    # as in a terminal: a shell starts background jobs (and so this test, under `cmd &`) with
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if env == "imported":
        import numpy, pandas  # noqa: F401

    import trackstore

    report = {"imported_at_exit": [], "daemon_logged": 0}
    exiting = []

    def write_report():  # registered first, so it runs last: after trackstore ended the run
        while True:
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                break
            except KeyboardInterrupt:
                continue
        with open(report_path, "w") as f:
            json.dump(report, f)

    atexit.register(write_report)
    sys.addaudithook(lambda event, args: report["imported_at_exit"].append(args[0])
                     if event == "import" and exiting else None)

    run = trackstore.init("endings", root=root, run_id="r1", config={"lr": 0.1}, flush_interval=3600)
    atexit.register(lambda: exiting.append(True))  # runs just before trackstore's own exit hook

    def log_everything():
        for step in range(10):
            run.log({f"k{i:02d}": step + i / 100 for i in range(20)}, step=step)
        run.log_samples([{"input": f"q{i} 问题", "output": f"a{i}", "score": i / 30} for i in range(30)], step=9)
        with run.trace(step=9, sample_index=0) as tr:
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": "2+2?"}]) as s:
                s.set_outputs("4")
            with tr.span("calculator", kind="tool", inputs={"expr": "2+2"}) as s:
                s.set_outputs(4)
            with tr.span("reward", kind="reward") as s:
                s.set_outputs(1.0)
        for step in range(5):
            run.log({"grad/w": trackstore.Histogram([0.1 * step, 0.2, 0.2, 0.4])}, step=step)
        art = os.path.join(root, "..", "weights.bin")
        with open(art, "wb") as f:
            f.write(b"w" * 1000)
        run.log_artifact(art, name="policy", type="model")
        run.summary["best"] = 0.9

    def wait_for_signal():
        print("READY", flush=True)
        time.sleep(60)
        sys.exit("the signal never came")

    if ending == "with":
        with run:
            log_everything()
    else:
        log_everything()

    if ending == "finish":
        run.finish()
    elif ending == "exception":
        raise RuntimeError("boom in training")
    elif ending == "thread_exception":
        t = threading.Thread(target=lambda: 1 / 0)
        t.start()
        t.join()
    elif ending == "sys_exit":
        sys.exit(3)
    elif ending in ("sigterm", "sigint"):
        wait_for_signal()
    elif ending == "sigint_twice":
        def hammer():  # once the main thread is gone, Ctrl-C again and again during the final flush
            main = threading.main_thread()
            while main.is_alive():
                time.sleep(0.001)
            end = time.monotonic() + 10
            status_file = os.path.join(run.dir, "run.json")
            while time.monotonic() < end:
                with open(status_file) as f:
                    if json.load(f).get("status") != "running":
                        return
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.002)
        threading.Thread(target=hammer, daemon=True).start()
        wait_for_signal()
    elif ending == "daemon_threads":
        def more():  # still logging when the interpreter shuts down
            n = 0
            while True:
                try:
                    run.log({"daemon/x": n}, step=100 + n)
                except trackstore.UsageError:
                    return  # the run has ended
                n += 1
                report["daemon_logged"] = n
                time.sleep(0.0005)
        threading.Thread(target=more, daemon=True).start()
        time.sleep(0.2)
    elif ending == "sigkill":
        assert run.flush()
        wait_for_signal()
    # "exit": the script simply ends, without finish()
    '''
)

ENDINGS = ["finish", "with", "exit", "exception", "thread_exception", "sys_exit", "sigterm", "sigint", "sigint_twice",
           "daemon_threads"]
ENVS = ["not_imported", "imported"]
EXPECTED_STATUS = {"finish": "finished", "with": "finished", "exit": "finished", "thread_exception": "finished",
                   "daemon_threads": "finished", "exception": "failed", "sys_exit": "failed", "sigterm": "failed",
                   "sigint": "failed", "sigint_twice": "failed", "sigkill": "crashed"}
SIGNALS = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT, "sigint_twice": signal.SIGINT,
           "sigkill": signal.SIGKILL}
THROUGH_ATEXIT = {"exit", "exception", "thread_exception", "sys_exit", "sigint", "sigint_twice", "daemon_threads"}


def run_child(tmp_path: Path, ending: str, env: str) -> tuple[Path, dict, subprocess.CompletedProcess]:
    root = tmp_path / "store"
    root.mkdir()
    report_path = tmp_path / "report.json"
    script = tmp_path / "train.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(root), ending, env, str(report_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if ending in SIGNALS:
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(SIGNALS[ending])
    out, err = proc.communicate(timeout=120)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return root, report, done


def stored(root: Path) -> dict:
    con = trackstore.connect(root, sync_state=False)
    try:
        def one(sql):
            return con.execute(sql).fetchone()[0]

        run = con.execute("SELECT status FROM runs WHERE run_id = 'r1'").fetchone()
        return {
            "metrics": one("SELECT count(*) FROM metrics WHERE key LIKE 'k%'"),
            "metric_values": one("SELECT round(sum(value), 6) FROM metrics WHERE key LIKE 'k%'"),
            "daemon_points": one("SELECT count(*) FROM metrics WHERE key = 'daemon/x'"),
            "daemon_distinct": one("SELECT count(DISTINCT step) FROM metrics WHERE key = 'daemon/x'"),
            "samples": one("SELECT count(*) FROM samples"),
            "spans": one("SELECT count(DISTINCT span_id) FROM spans WHERE status = 'ok'"),
            "histograms": one("SELECT count(*) FROM histograms"),
            "artifacts": one("SELECT count(*) FROM artifacts"),
            "status": run[0] if run else None,
        }
    finally:
        con.close()


EXPECTED_ROWS = {"metrics": 200, "metric_values": round(sum(s + i / 100 for s in range(10) for i in range(20)), 6),
                 "samples": 30, "spans": 4, "histograms": 5, "artifacts": 1}


def check(root: Path, ending: str, report: dict, done: subprocess.CompletedProcess) -> None:
    assert "the signal never came" not in done.stderr, "the child ended by itself: the signal was not delivered"
    got = stored(root)
    meta = json.loads(next(root.glob("project=endings/run=r1/run.json")).read_text())
    wrong = {k: (got[k], v) for k, v in EXPECTED_ROWS.items() if got[k] != v}
    if got["status"] != EXPECTED_STATUS[ending]:
        wrong["status"] = (got["status"], EXPECTED_STATUS[ending])
    if (meta.get("summary") or {}).get("best") != 0.9:
        wrong["summary"] = ((meta.get("summary") or {}).get("best"), 0.9)
    if meta.get("write_errors"):
        wrong["write_errors"] = (meta["write_errors"], None)
    if ending in THROUGH_ATEXIT and report.get("imported_at_exit"):
        wrong["imported at exit"] = (report["imported_at_exit"], [])
    assert not wrong, f"(got, expected) per kind: {wrong}\nchild stderr:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("ending", ENDINGS)
def test_every_kind_survives_every_ending(tmp_path, ending, env):
    root, report, done = run_child(tmp_path, ending, env)
    check(root, ending, report, done)
    meta = json.loads(next(root.glob("project=endings/run=r1/run.json")).read_text())
    if ending == "sys_exit":
        assert meta.get("exit_code") == 3 and "sys.exit(3)" in (meta.get("error") or "")
    if ending == "exception":
        assert "boom in training" in (meta.get("error") or "")
    if ending == "sigterm":
        assert done.returncode == -signal.SIGTERM  # the process still dies of the signal
    if ending == "daemon_threads":
        got = stored(root)
        # every log call that returned is stored, once (one more may have been appended just
        # before the child counted it)
        assert report["daemon_logged"] > 0
        assert got["daemon_points"] == got["daemon_distinct"]
        assert report["daemon_logged"] <= got["daemon_points"] <= report["daemon_logged"] + 1


@pytest.mark.parametrize("env", ENVS)
def test_sigkill_keeps_everything_flushed(tmp_path, env):
    root, _report, done = run_child(tmp_path, "sigkill", env)
    assert done.returncode == -signal.SIGKILL
    check(root, "sigkill", {}, done)
