"""Readers show what is on disk: a damaged run.json, or a stale one after a crash, breaks nothing.

* One run.json with values no reader can use (an out-of-range step, wrong types, missing
  fields, not an object, not JSON, not UTF-8) never breaks a command for the whole store: the
  bad values read as missing, a warning names the file, and `doctor` reports it.
* A run killed with SIGKILL shows the last step and end time its data proves, not "-" and a
  stale heartbeat.
* A crash is a normal state: `doctor` reports it as info and exits 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import textwrap
import time
import warnings
from datetime import datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackstore
from tests.fixtures.stores import make_run
from tests.helpers import kill9, python_child, run_cli, wait_for
from trackstore.cli.main import main as cli_main
from trackstore.read.listing import list_runs
from trackstore.read.reader import read_kind
from trackstore.store.clock import iso, parse_iso
from trackstore.store.layout import RunPaths
from trackstore.upkeep import doctor as D

GOOD_RUNS = 3
STEPS = 20  # make_run's default: 4 chunks of 5 steps, two metric keys


def good_store(root: Path) -> list[RunPaths]:
    return [make_run(root, "p", name=f"good{i}") for i in range(GOOD_RUNS)]


def cli(*args: str, root: Path) -> tuple[int, str, str]:
    """The real CLI in this process (fast enough to run per Hypothesis example)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([*args, "--root", str(root)])
    return code, out.getvalue(), err.getvalue()


def findings_for(root: Path, paths: RunPaths) -> list[D.Finding]:
    return [f for f in D.diagnose(root).findings if f.path == paths.run_file]


# ---------------------------------------------------------------------------- step 2**63
def test_out_of_range_last_step_breaks_nothing_and_doctor_rewrites_it(root):
    runs = good_store(root)
    bad = runs[1]
    meta = json.loads(bad.run_file.read_text())
    meta["last_step"] = 2**63  # what run.log(..., step=2**63) wrote before steps were bounded
    bad.run_file.write_text(json.dumps(meta))

    listed = run_cli("runs", "--format", "json", root=root)
    assert listed.returncode == 0, listed.stderr
    rows = {r["run_id"]: r for r in json.loads(listed.stdout)}
    assert len(rows) == GOOD_RUNS and rows[bad.run_id]["last_step"] is None
    assert rows[runs[0].run_id]["last_step"] == STEPS - 1
    assert str(bad.run_file) in listed.stderr and "last_step" in listed.stderr
    one = run_cli("sql", "select 1 as x", "--format", "json", root=root)
    assert one.returncode == 0 and json.loads(one.stdout) == [{"x": 1}], one.stderr
    for cmd in (("status",), ("show", runs[0].run_id), ("show", bad.run_id)):
        code, _out, err = cli(*cmd, root=root)
        assert code == 0, (cmd, err)

    code, out, _err = cli("doctor", "--format", "json", root=root)
    assert code == 4
    (finding,) = json.loads(out)
    assert finding["check"] == "bad_run_json" and finding["severity"] == "error"
    assert "last_step" in finding["problem"] and "9223372036854775808" in finding["problem"]
    code, out, err = cli("doctor", "--fix", root=root)
    assert code == 0, out + err
    repaired = json.loads(bad.run_file.read_text())
    assert repaired["last_step"] == STEPS - 1 and repaired["status"] == "finished"
    assert {k: v for k, v in repaired.items() if k not in ("last_step", "recovered_by", "recovered_at")} == \
        {k: v for k, v in meta.items() if k != "last_step"}
    quarantined = list((root / "_quarantine").rglob("run.json"))
    assert [json.loads(p.read_text())["last_step"] for p in quarantined] == [2**63]  # nothing deleted
    assert D.diagnose(root).findings == []


# ---------------------------------------------------------------------------- fuzzing run.json
STRINGS = ("project", "run_id", "name", "host", "user", "cwd", "notes", "group", "job_type", "error")
TIMES = ("created_at", "ended_at", "updated_at", "heartbeat_at")
INTS = ("last_step", "exit_code", "format_version", "pid")
OBJECTS = ("config", "summary", "summary_auto", "summary_user", "git")
LISTS = ("tags", "command", "attempts")
REQUIRED = ("format_version", "project", "run_id", "status", "created_at")

scalars = st.one_of(st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
                    st.sampled_from([2**63, -(2**63) - 1, 10**30]))
json_values = st.recursive(st.none() | scalars, lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=8)
not_iso = st.text(max_size=30).filter(lambda s: not _is_iso(s))


def _is_iso(s: str) -> bool:
    try:
        datetime.fromisoformat(s)
        return True
    except ValueError:
        return False


def _parses(raw: bytes) -> bool:
    try:
        json.loads(raw)
        return True
    except (ValueError, RecursionError):
        return False


def wrong_value(field: str):
    """A JSON value that field ``field`` of run.json cannot hold (docs/format.md section 4)."""
    containers = st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=5), scalars, max_size=3)
    if field in STRINGS:
        return st.booleans() | st.integers() | st.floats(allow_nan=True) | containers
    if field in TIMES:
        return not_iso | st.integers() | containers
    if field in INTS:
        return st.sampled_from([2**63, -(2**63) - 1, 10**40, 1.5, "7", True, [], {}]) | st.floats(allow_nan=True)
    if field == "status":
        return (st.text(max_size=12) | scalars).filter(lambda v: v not in ("running", "finished", "failed", "crashed"))
    if field in OBJECTS:
        return st.lists(scalars, max_size=3) | scalars.filter(lambda v: not isinstance(v, dict))
    return scalars | st.lists(st.integers() | st.none() | st.booleans(), min_size=1, max_size=3)  # LISTS


def surrogate(field: str):
    """A string field holding a lone surrogate (valid JSON text, not valid Unicode)."""
    return st.sampled_from(["\\ud800", "x\\udfff", "\\udc80abc"]).map(lambda esc: (field, esc))


@st.composite
def bad_run_json(draw, good: dict) -> tuple[bytes, bool]:
    """Random damage to a good run.json: (the file's bytes, whether readers must warn about it)."""
    shape = draw(st.sampled_from(["fields", "missing", "not_object", "not_json", "not_utf8", "surrogate"]))
    if shape in ("fields", "missing"):
        doc = dict(good)
        for key, value in draw(st.dictionaries(st.text(max_size=6), json_values, max_size=3)).items():
            doc.setdefault(key, value)  # unknown fields: readers ignore them
        wrong = []
        if shape == "fields":
            wrong = draw(st.lists(st.sampled_from(STRINGS + TIMES + INTS + OBJECTS + LISTS + ("status",)),
                                  min_size=1, max_size=4, unique=True))
            for field in wrong:
                doc[field] = draw(wrong_value(field))
        absent = [f for f in REQUIRED if f not in wrong]
        for field in draw(st.lists(st.sampled_from(absent), min_size=shape == "missing", max_size=3, unique=True)):
            doc.pop(field, None) if draw(st.booleans()) else doc.update({field: None})
        return json.dumps(doc, allow_nan=True).encode(), bool(wrong)
    if shape == "not_object":
        value = draw(json_values.filter(lambda v: not isinstance(v, dict)))
        return json.dumps(value).encode(), True
    if shape == "not_json":
        text = json.dumps(good).encode()
        cut = draw(st.integers(0, len(text) - 1))
        junk = draw(st.sampled_from([b"", b"}", b"\x00", b"[[[[[[", b"NaNaN", b"{" * 100_000]))
        damaged = text[:cut] + junk
        return (damaged if not _parses(damaged) else damaged + b"!"), True
    if shape == "not_utf8":
        text = json.dumps(good, ensure_ascii=False).encode()
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"])) + text[at:], True
    field, esc = draw(st.sampled_from(STRINGS + ("config", "tags")).flatmap(surrogate))
    text = json.dumps({**good, field: "SURROGATE"})
    placeholder = '"SURROGATE"' if field not in ("config", "tags") else (
        '{"k": "SURROGATE"}' if field == "config" else '["SURROGATE"]')
    text = text.replace('"SURROGATE"', placeholder).replace("SURROGATE", esc)
    return text.encode(), True


def test_no_run_json_breaks_the_store(root):
    """Hypothesis writes damaged run.json contents into one run of a store of good runs: every
    reading command still works, and doctor reports that run."""
    runs = good_store(root)
    victim = make_run(root, "q", name="victim")
    good = json.loads(victim.run_file.read_text())
    total_metrics = (GOOD_RUNS + 1) * STEPS * 2
    other = runs[0].run_id

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(damage=bad_run_json(good))
    def check(damage):
        content, must_warn = damage
        victim.run_file.write_bytes(content)

        code, out, err = cli("runs", "--format", "json", root=root)
        assert code == 0, err
        listed = {r["run_id"] for r in json.loads(out)}
        assert {r.run_id for r in runs} <= listed and victim.run_id in listed
        if must_warn:
            assert str(victim.run_file) in err
        code, out, err = cli("sql", "select 1 as x", "--format", "json", root=root)
        assert (code, json.loads(out)) == (0, [{"x": 1}]), err
        code, out, err = cli("sql", "select count(*) as n from metrics", "--format", "json", root=root)
        assert (code, json.loads(out)) == (0, [{"n": total_metrics}]), err
        code, out, err = cli("status", "--format", "json", root=root)
        assert code == 0 and {r["run_id"] for r in json.loads(out)} >= {r.run_id for r in runs}, err
        code, out, err = cli("show", other, "--format", "json", root=root)
        assert code == 0 and json.loads(out)[0]["last_step"] == STEPS - 1, err
        code, out, err = cli("show", victim.run_id, "--format", "json", root=root)
        assert code == 0, err

        found = {f.check for f in findings_for(root, victim)}
        assert found & {"bad_run_json", "broken_run_json"}, found

    check()


def test_doctor_fix_makes_any_damaged_run_json_readable_again(root):
    """The runs view reads any damaged run.json; after --fix it reads without a warning and
    doctor is satisfied."""
    victim = make_run(root, "q", name="victim")
    good = json.loads(victim.run_file.read_text())

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(damage=bad_run_json(good))
    def check(damage):
        victim.run_file.write_bytes(damage[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the damage it names is the point
            rows = trackstore.query("select run_id, last_step, config, summary from runs", root=root).to_pylist()
        assert [r["run_id"] for r in rows] == [victim.run_id]
        report = D.doctor(root, fix_problems=True)
        assert report.healthy, [f.row(root) for f in report.findings]
        assert D.diagnose(root).findings == []
        (info,) = list_runs(root)
        assert not info.problems and info.run_id == victim.run_id
        assert info.last_step == STEPS - 1  # rewritten from the data
        shutil.rmtree(root / "_quarantine")

    check()


# ---------------------------------------------------------------------------- kill -9
CHILD = textwrap.dedent("""
    import time, trackstore
    run = trackstore.init("k", root={root!r}, run_id="killed", flush_interval=0.1)
    time.sleep(1.0)  # the heartbeat (and run.json) were written at init; the data comes later
    for step in range(37):
        run.log({{"loss": 1.0 / (step + 1)}}, step=step)
    run.log_samples([{{"input": "q", "output": "a"}}], step=36)
    print("logged", flush=True)  # the writer thread flushes it; nothing rewrites run.json for 10 s
    time.sleep(3600)
""")


def kill_after_flush(root: Path) -> RunPaths:
    """A run killed with SIGKILL once its rows are on disk, before a heartbeat rewrote run.json."""
    paths = RunPaths(root, "k", "killed")
    child = python_child(CHILD.format(root=str(root)))
    try:
        assert child.stdout.readline().strip() == "logged", child.stderr.read()
        wait_for(lambda: read_kind(paths, "metrics").num_rows >= 37 and read_kind(paths, "samples").num_rows >= 1,
                 "the child never flushed")
    finally:
        kill9(child)
    return paths


def test_crashed_run_shows_last_step_and_end_from_its_data(root):
    paths = kill_after_flush(root)
    recorded = json.loads(paths.run_file.read_text())
    assert recorded.get("last_step") is None and recorded["ended_at"] is None  # what run.json knows
    (writer,) = [json.loads(p.read_text()) for p in paths.writers_dir.glob("*.json")]
    newest = max(read_kind(paths, "metrics").column("ts").to_pylist()).timestamp()
    assert newest > parse_iso(writer["heartbeat_at"])  # the heartbeat is stale

    (info,) = list_runs(root)
    assert info.status == "crashed" and info.last_step == 36
    assert parse_iso(info.ended_at) >= newest
    listed = run_cli("runs", "--format", "json", root=root)
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "crashed" and row["last_step"] == 36
    assert datetime.fromisoformat(row["ended_at"]).timestamp() >= newest
    code, out, _err = cli("runs", root=root)
    assert " 36 " in out, out
    code, out, _err = cli("show", "killed", "--format", "json", root=root)
    (row,) = json.loads(out)
    assert row["last_step"] == 36 and parse_iso(row["ended_at"]) >= newest

    # a crash is a state the store handles, not damage: info, exit 0
    code, out, err = cli("doctor", "--format", "json", root=root)
    assert code == 0, err
    (finding,) = json.loads(out)
    assert (finding["check"], finding["severity"]) == ("stuck_running", "info")
    report = run_cli("doctor", root=root)
    assert report.returncode == 0 and "healthy" in report.stdout, report.stdout + report.stderr
    code, _out, err = cli("doctor", "--fix", root=root)
    assert code == 0, err
    meta = json.loads(paths.run_file.read_text())
    assert meta["status"] == "crashed" and meta["last_step"] == 36 and parse_iso(meta["ended_at"]) >= newest
    assert D.diagnose(root).findings == []


def test_a_live_run_keeps_what_its_writer_records(root):
    """Deriving from data is for crashed runs only: a live run shows what its writer wrote."""
    run = trackstore.init("live", root=root, flush_interval=0.1)
    run.log({"x": 1.0}, step=5)
    run.flush()
    (info,) = list_runs(root)
    assert info.status == "running" and info.extent is None and info.ended_at is None
    run.finish()
    (info,) = list_runs(root)
    assert info.status == "finished" and info.last_step == 5 and info.extent is None
    assert parse_iso(info.ended_at) <= time.time()
    assert iso(parse_iso(info.ended_at)) == info.meta["ended_at"]


def test_resume_over_a_run_json_with_unusable_values(root):
    """A writer resuming a run merges only usable values: the step continues after the data."""
    paths = make_run(root, "p", name="old")
    meta = json.loads(paths.run_file.read_text())
    meta.update(last_step=2**63, summary_auto=[1, 2], tags="not-a-list")
    paths.run_file.write_text(json.dumps(meta))
    run = trackstore.init("p", run_id=paths.run_id, root=root, resume=True)
    run.log({"loss": 0.5})
    run.finish()
    (info,) = list_runs(root)
    assert info.status == "finished" and not info.problems and info.last_step == STEPS
    steps = read_kind(paths, "metrics").column("step").to_pylist()
    assert max(steps) == STEPS and len(steps) == 2 * STEPS + 1
