"""A property of the whole write path, drawn at random by Hypothesis: whatever a training
process logs (valid and invalid values of every kind, in any order), whenever it flushes,
however long the disk fails, and however the process ends, the store afterwards holds exactly
the rows whose ``log`` call was accepted, less exactly what the final report says was lost
(only when the disk was still failing at the end), and every reader still reads the store.

Each example is a real child process running a drawn program (a list of operations as JSON):
``RLIMIT_FSIZE`` makes the disk fail the way a full disk or a quota does, and the ending is one
of the matrix of tests/test_endings.py. The child keeps a ledger of what each call was accepted
with; the parent compares it with what DuckDB reads back.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackstore
from trackstore.read.listing import list_runs
from trackstore.upkeep.doctor import diagnose

CHILD = textwrap.dedent(
    r'''
    import json, math, os, resource, signal, sys, time
    root, program_path, ledger_path = sys.argv[1:4]
    import numpy as np
    import trackstore

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even when started under `cmd &`
    SOFT, HARD = resource.getrlimit(resource.RLIMIT_FSIZE)
    program = json.load(open(program_path))
    ledger = {"metrics": [], "samples": 0, "spans": 0, "histograms": 0, "disk_ok_at_end": True}

    def value(v):
        kind, x = v
        return {"float": lambda: float(x), "int": lambda: int(x), "bigint": lambda: int(x), "bool": lambda: bool(x),
                "none": lambda: None, "str": lambda: str(x), "np32": lambda: np.float32(x), "npint": lambda: np.int64(x),
                "nested": lambda: {"inner": float(x)}, "list": lambda: [x]}[kind]()

    def as_float(v):
        return {k: (float(x) if not isinstance(x, dict) else None) for k, x in v.items()}

    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, prefix + k + "/"))
            elif v is not None:
                out[prefix + k] = float(v)
        return out

    def step_of(s):
        kind, x = s
        return {"none": None, "int": int(x) if kind == "int" else None, "big": int(x) if kind == "big" else None,
                "float": float(x) if kind == "float" else None, "bool": True, "str": "seven"}[kind]

    run = trackstore.init("prop", root=root, run_id="r1", flush_interval=float(program["flush_interval"]))
    for op in program["ops"]:
        name = op[0]
        try:
            if name == "log":
                data = {k: value(v) for k, v in op[1].items()}
                step = step_of(op[2])
                used = run.step if step is None else step
                run.log(data, step=step)
                ledger["metrics"] += [[int(used), k, v] for k, v in flat(data).items()]
            elif name == "samples":
                rows = [{"input": "q", "output": "a", "score": value(sc)} for sc in op[1]]
                step = step_of(op[2])
                ledger["samples"] += run.log_samples(rows, step=step)
            elif name == "trace":
                step = step_of(op[1])
                with run.trace(step=step, sample_index=op[2]) as tr:
                    with tr.span("tool", kind="tool", inputs={"x": 1}) as s:
                        s.set_outputs("ok")
                ledger["spans"] += 2
            elif name == "hist":
                run.log({"h": trackstore.Histogram([value(v) for v in op[1]])}, step=step_of(op[2]))
                ledger["histograms"] += 1
            elif name == "flush":
                run.flush()
            elif name == "disk_fails":
                resource.setrlimit(resource.RLIMIT_FSIZE, (0, HARD))
                ledger["disk_ok_at_end"] = False
            elif name == "disk_recovers":
                resource.setrlimit(resource.RLIMIT_FSIZE, (HARD, HARD))
                ledger["disk_ok_at_end"] = True
            elif name == "sleep":
                time.sleep(op[1])
        except (ValueError, TypeError, trackstore.UsageError) as exc:  # refused at the call: nothing kept
            pass
    with open(ledger_path, "w") as f:  # the ledger file may grow: the disk may be failing
        resource.setrlimit(resource.RLIMIT_FSIZE, (HARD, HARD))
        json.dump(ledger, f)
        f.flush()
        if not ledger["disk_ok_at_end"]:
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, HARD))
    ending = program["ending"]
    if ending == "finish":
        try:
            run.finish()
        except trackstore.WriteError as exc:
            print("REPORT", exc, flush=True)
    elif ending == "exception":
        raise RuntimeError("boom")
    elif ending == "sys_exit":
        sys.exit(2)
    elif ending in ("sigterm", "sigint"):
        print("READY", flush=True)
        time.sleep(60)
        sys.exit("the signal never came")
    '''
)

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)
VALID = st.one_of(st.tuples(st.just("float"), FLOATS), st.tuples(st.just("int"), st.integers(-(2 ** 53), 2 ** 53)),
                  st.tuples(st.just("bool"), st.booleans()), st.tuples(st.just("none"), st.none()),
                  st.tuples(st.just("np32"), st.floats(width=32, allow_nan=False)),
                  st.tuples(st.just("npint"), st.integers(-(2 ** 62), 2 ** 62)),
                  st.tuples(st.just("nested"), st.floats(allow_nan=False)))
INVALID = st.one_of(st.tuples(st.just("bigint"), st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 1024])),
                    st.tuples(st.just("str"), st.text(max_size=3)), st.tuples(st.just("list"), st.integers()))
VALUE = st.one_of(VALID, VALID, VALID, INVALID)
STEP = st.one_of(st.tuples(st.just("none"), st.none()), st.tuples(st.just("int"), st.integers(0, 10 ** 6)),
                 st.tuples(st.just("big"), st.sampled_from([2 ** 63, 2 ** 64, -(2 ** 63) - 1, 2 ** 63 - 1])),
                 st.tuples(st.just("float"), st.sampled_from([3.0, 2.5])), st.tuples(st.just("bool"), st.none()),
                 st.tuples(st.just("str"), st.none()))
KEYS = st.sampled_from(["a", "b", "actor/loss", "c"])
OPS = st.one_of(
    st.tuples(st.just("log"), st.dictionaries(KEYS, VALUE, min_size=1, max_size=4), STEP),
    st.tuples(st.just("log"), st.dictionaries(KEYS, VALUE, min_size=1, max_size=4), STEP),
    st.tuples(st.just("samples"), st.lists(VALUE, min_size=1, max_size=5), STEP),
    st.tuples(st.just("trace"), STEP, st.one_of(st.none(), st.integers(0, 5))),
    st.tuples(st.just("hist"), st.lists(VALUE, min_size=1, max_size=6), STEP),
    st.tuples(st.just("flush")),
    st.tuples(st.just("disk_fails")),
    st.tuples(st.just("disk_recovers")),
    st.tuples(st.just("sleep"), st.sampled_from([0.01, 0.15])),
)
PROGRAMS = st.fixed_dictionaries({
    "ops": st.lists(OPS, min_size=1, max_size=25),
    "ending": st.sampled_from(["finish", "exit", "exception", "sys_exit", "sigterm", "sigint"]),
    "flush_interval": st.sampled_from([0.05, 3600]),
})
LOST = re.compile(r"(\d+) (\w+) rows (?:not written|dropped|rejected)")


def run_program(tmp_path, program: dict) -> tuple[dict, str]:
    for p in tmp_path.iterdir():
        if p.is_dir():
            import shutil

            shutil.rmtree(p)
        else:
            p.unlink()
    root = tmp_path / "store"
    root.mkdir()
    (tmp_path / "program.json").write_text(json.dumps(program))
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(root), str(tmp_path / "program.json"),
                             str(tmp_path / "ledger.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if program["ending"] in ("sigterm", "sigint"):
        line = proc.stdout.readline()
        assert line.strip() == "READY", proc.communicate(timeout=60)
        proc.send_signal(signal.SIGTERM if program["ending"] == "sigterm" else signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    return ledger, out + err


def lost_in_report(text: str) -> dict[str, int]:
    lost: dict[str, int] = {}
    for line in text.splitlines():
        if "rows" in line and ("WriteError" in line or "REPORT" in line or "WARNING: run r1" in line):
            for n, kind in LOST.findall(line):
                lost[kind] = lost.get(kind, 0) + int(n)
            break
    return lost


# a bounded run keeps the suite's time; a deeper one: TRACKSTORE_WRITER_EXAMPLES=300 python -m pytest tests/test_writer_property.py
EXAMPLES = int(os.environ.get("TRACKSTORE_WRITER_EXAMPLES", "12"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=PROGRAMS)
def test_the_store_holds_exactly_what_was_accepted(tmp_path, program):
    ledger, output = run_program(tmp_path, program)
    assert "the signal never came" not in output
    root = tmp_path / "store"
    con = trackstore.connect(root, sync_state=False)  # every reader still reads the store
    try:
        metrics = con.execute("SELECT step, key, value FROM metrics").fetchall()
        counts = {kind: con.execute(f"SELECT count(*) FROM {kind}").fetchone()[0] for kind in ("samples", "histograms")}
        counts["spans"] = con.execute("SELECT count(DISTINCT span_id) FROM spans").fetchone()[0]
        con.execute("SELECT * FROM runs").fetchall()
    finally:
        con.close()
    list_runs(root)
    diagnose(root)

    def key(row):
        step, k, v = row
        return (int(step), k, "nan" if isinstance(v, float) and math.isnan(v) else v)

    expected = sorted(map(key, ledger["metrics"]))
    got = sorted(map(key, metrics))
    lost = lost_in_report(output) if not ledger["disk_ok_at_end"] else {}
    if ledger["disk_ok_at_end"]:
        assert got == expected, f"program: {program}\nchild output:\n{output[-2000:]}"
        assert counts == {"samples": ledger["samples"], "spans": ledger["spans"], "histograms": ledger["histograms"]}, \
            f"program: {program}\nchild output:\n{output[-2000:]}"
    else:  # what is missing is exactly what the final report said was lost
        assert not Counter(got) - Counter(expected), (program, output[-2000:])  # nothing that was not logged
        assert len(expected) - len(got) == lost.get("metrics", 0), (program, output[-2000:])
        for kind in ("samples", "histograms"):
            assert ledger[kind] - counts[kind] == lost.get(kind, 0), (kind, program, output[-2000:])
