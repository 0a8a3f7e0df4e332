"""Alerts on runs: NaN or infinite metric values counted once per part file by the catalog, and a
live run that stopped logging; shown by `trackstore runs` (column, `--alerts`, `--stall-after`,
`--format json`), and the live last step taken from the parts, not only run.json's heartbeat."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

import trackstore
from tests.helpers import cli_in_pty, kill9, python_child, run_cli, wait_for
from trackstore.read.alerts import NONFINITE, STALL_FLOOR_S, STALLED, alerts_of, long_duration, short_duration
from trackstore.read.listing import list_runs, listed_rows
from trackstore.store.catalog import CATALOG_VERSION, MetricFacts, catalog_path, open_catalog
from trackstore.store.layout import RunPaths

NAN, INF = float("nan"), float("inf")


def nan_run(root, values: list[float], *, key: str = "actor/pg_loss", flush_every: int = 0) -> str:
    """A finished run logging ``values`` of ``key`` at steps 0, 1, ... (and a finite ``ok`` key)."""
    with trackstore.init(project="p", name="nan", root=root, config={"seed": 0}) as run:
        for step, v in enumerate(values):
            run.log({key: v, "ok": 1.0}, step=step)
            if flush_every and step % flush_every == flush_every - 1:
                run.flush()
        return run.id


def facts(root, run_id: str, project: str = "p") -> MetricFacts | None:
    catalog = open_catalog(root)
    try:
        return catalog.metric_facts(project, run_id)
    finally:
        catalog.save()


def duckdb_counts(root, run_id: str) -> tuple[int, int]:
    """NaN and infinite values of the run as DuckDB counts them (a filter, never a projection)."""
    t = trackstore.query("SELECT count(*) FILTER (WHERE isnan(value)) AS nan, "
                         "count(*) FILTER (WHERE isinf(value)) AS inf FROM metrics WHERE run_id = $r",
                         {"r": run_id}, root=root)
    return t.column("nan")[0].as_py(), t.column("inf")[0].as_py()


# ------------------------------------------------------------------ non-finite values
def test_a_nan_in_the_middle_of_a_part_is_counted(root):
    """Parquet's min/max statistics of the part leave the NaN out (they say 0..299), which is why
    DuckDB folds ``isnan(value)`` in a projection to false over such a part: the catalog reads the
    values themselves."""
    values = [float(s) for s in range(300)]
    values[150] = NAN
    rid = nan_run(root, values)
    import pyarrow.parquet as pq

    (part,) = (RunPaths(root, "p", rid).dir / "metrics").glob("*.parquet")
    md = pq.read_metadata(part)
    col = md.schema.names.index("value")
    stats = md.row_group(0).column(col).statistics
    assert stats.has_min_max and not math.isnan(stats.min) and not math.isnan(stats.max)  # the NaN is invisible there
    from trackstore.store import metric_facts

    assert metric_facts.decode(md.metadata)[3] == {"actor/pg_loss": [1, 0, 150]}  # the writer counted it, in the footer
    got = facts(root, rid)
    assert got is not None and got.nonfinite == 1
    assert got.keys == {"actor/pg_loss": [1, 0, 150]}
    assert duckdb_counts(root, rid) == (1, 0)
    (info,) = list_runs(root)
    a = info.alerts()
    assert a.codes == [NONFINITE] and a.texts == ["NaN in actor/pg_loss since step 150"]
    assert a.short == "NaN"


def test_the_catalog_reads_facts_from_the_footer_and_values_only_without_them(root, monkeypatch):
    """A part the writer wrote carries its facts in its footer: the catalog reads no value of it. A
    part written without them (before they existed, or by another tool) is read value by value."""
    import pyarrow.parquet as pq

    from trackstore.store import metric_facts
    from trackstore.store.catalog import part_records

    with_facts = nan_run(root, [1.0, NAN, 3.0, INF])

    def no_value_reads(table):
        raise AssertionError("a part with facts in its footer was read value by value")

    with monkeypatch.context() as m:
        m.setattr(part_records, "metric_values", no_value_reads)
        got = facts(root, with_facts)
    assert got is not None and got.nonfinite == 2 and got.keys == {"actor/pg_loss": [1, 1, 1]}
    old = nan_run(root, [5.0, 6.0, NAN])
    (part,) = (RunPaths(root, "p", old).dir / "metrics").glob("*.parquet")
    table = pq.read_table(part)
    meta = {k: v for k, v in table.schema.metadata.items() if k != metric_facts.FACTS_KEY}
    pq.write_table(table.replace_schema_metadata(meta), part)  # as a part written before the facts existed
    assert metric_facts.decode(pq.read_metadata(part).metadata) is None
    got = facts(root, old)
    assert got is not None and got.nonfinite == 1 and got.keys == {"actor/pg_loss": [1, 0, 2]}


def test_a_first_listing_of_settled_runs_reads_footers_only(root, monkeypatch):
    """A store listed for the first time (copied in, or its _catalog deleted): a settled run's
    alerts come from its metrics parts' footers; no part's rows (not even its row ids) are read.
    A later command that needs the parts (status, sync) reads them then."""
    from trackstore.store import parts

    rid = nan_run(root, [1.0, NAN, 2.0], flush_every=1)
    time.sleep(3.2)  # older than the catalog's racy window: a settled folder

    def no_row_reads(*_a, **_k):
        raise AssertionError("a part's rows were read by a first listing")

    with monkeypatch.context() as m:
        m.setattr(parts, "read_columns", no_row_reads)
        (info,) = list_runs(root)
        assert info.alerts().texts == ["NaN in actor/pg_loss since step 1"]
        got = facts(root, rid)  # kept in the run's row
    assert got is not None and got.nonfinite == 1 and got.keys == {"actor/pg_loss": [1, 0, 1]}
    assert got.last_step == 2


def test_inf_and_minus_inf_are_counted_apart_from_nan(root):
    values = [1.0, INF, 2.0, -INF, NAN, 3.0]
    rid = nan_run(root, values, key="critic/vf_loss")
    got = facts(root, rid)
    assert got is not None and got.keys == {"critic/vf_loss": [1, 2, 1]} and got.nonfinite == 3
    assert duckdb_counts(root, rid) == (1, 2)
    (info,) = list_runs(root)
    assert info.alerts().texts == ["NaN/inf in critic/vf_loss since step 1"]
    assert info.alerts().short == "NaN+inf"


def test_only_inf_says_inf_and_several_keys_are_named_by_the_first(root):
    with trackstore.init(project="p", name="inf", root=root) as run:
        for step in range(20):
            run.log({"a": INF if step >= 12 else 0.0, "b": INF if step == 7 else 1.0}, step=step)
        rid = run.id
    (info,) = list_runs(root)
    a = info.alerts()
    assert a.nonfinite_keys == {"a": {"nan": 0, "inf": 8, "first_step": 12}, "b": {"nan": 0, "inf": 1, "first_step": 7}}
    assert a.texts == ["inf in b since step 7 (and 1 more key)"] and a.short == "inf"
    assert facts(root, rid).nonfinite == 9


def test_a_clean_run_has_no_alert(root):
    nan_run(root, [float(s) for s in range(50)])
    (info,) = list_runs(root)
    a = info.alerts()
    assert a.codes == [] and a.texts == [] and a.short == "" and a.nonfinite == 0


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from([0.5, -2.0, NAN, INF, -INF]), min_size=1, max_size=30), min_size=1, max_size=4))
def test_counts_over_parts_flushed_apart_equal_duckdbs(tmp_path_factory, flushes):
    """Values logged in several flushes (one part each, merged at finish): the catalog's counts
    per key and first steps equal a scan of the stored rows."""
    root = tmp_path_factory.mktemp("flushes")
    with trackstore.init(project="p", name="h", root=root) as run:
        step = 0
        for chunk in flushes:
            for v in chunk:
                run.log({"k": v}, step=step)
                step += 1
            run.flush()
        rid = run.id
    values = [v for chunk in flushes for v in chunk]
    nan = sum(math.isnan(v) for v in values)
    inf = sum(math.isinf(v) for v in values)
    got = facts(root, rid)
    assert got is not None and got.nonfinite == nan + inf == sum(duckdb_counts(root, rid))
    if nan + inf:
        first = next(i for i, v in enumerate(values) if not math.isfinite(v))
        assert got.keys == {"k": [nan, inf, first]}
    else:
        assert got.keys == {}


def test_counts_of_a_live_run_grow_part_by_part(root):
    run = trackstore.init(project="p", name="live", root=root)
    try:
        run.log({"x": 1.0}, step=0)
        run.flush()
        assert facts(root, run.id).nonfinite == 0
        run.log({"x": NAN}, step=1)
        run.flush()
        assert facts(root, run.id).keys == {"x": [1, 0, 1]}
        run.log({"x": NAN, "y": INF}, step=2)
        run.flush()
        got = facts(root, run.id)
        assert got.keys == {"x": [2, 0, 1], "y": [0, 1, 2]} and got.last_step == 2
    finally:
        run.finish()
    assert facts(root, run.id).keys == {"x": [2, 0, 1], "y": [0, 1, 2]}  # merged at finish: the same counts


# ------------------------------------------------------------------ stalled
def test_stall_rule_running_only_and_floor():
    f = MetricFacts(0, {}, 1_000.0, 20.0, 5)
    assert alerts_of(f, "running", now=1_000.0 + 199).codes == []  # under 10 x 20 s
    late = alerts_of(f, "running", now=1_000.0 + 14 * 60)
    assert late.codes == [STALLED] and late.texts == ["no metric for 14 min, usually every 20 s"]
    assert late.short == "stalled 14m" and late.silent_s == 14 * 60 and late.interval_s == 20.0
    assert alerts_of(f, "running", now=1_000.0 + 14 * 60, stall_after=50).codes == []  # --stall-after 50
    for ended in ("finished", "failed", "crashed"):
        assert alerts_of(f, ended, now=1_000.0 + 86400).codes == [], ended
    quick = MetricFacts(0, {}, 1_000.0, 0.5, 5)  # a fast logger: the floor, not 5 s
    assert alerts_of(quick, "running", now=1_000.0 + STALL_FLOOR_S - 1).codes == []
    assert alerts_of(quick, "running", now=1_000.0 + STALL_FLOOR_S + 1).codes == [STALLED]
    once = MetricFacts(0, {}, 1_000.0, None, 0)  # logged once: no usual interval, never stalled
    assert alerts_of(once, "running", now=1_000.0 + 86400).codes == []
    both = alerts_of(MetricFacts(1, {"k": [1, 0, 3]}, 1_000.0, 20.0, 5), "running", now=1_000.0 + 3600)
    assert both.codes == [NONFINITE, STALLED] and both.short == "NaN, stalled 60m"


def test_durations_read_well():
    assert [long_duration(s) for s in (2.5, 20, 119, 14 * 60, 3 * 3600, 3 * 86400)] == \
        ["2.5 s", "20 s", "119 s", "14 min", "3.0 h", "3.0 d"]
    assert [short_duration(s) for s in (45, 14 * 60, 3 * 3600, 3 * 86400)] == ["45s", "14m", "3h", "3d"]


def test_a_running_run_stalls_and_a_finished_one_never_does(root):
    run = trackstore.init(project="p", name="live", root=root)
    try:
        for step in range(6):
            run.log({"x": float(step)}, step=step)
            time.sleep(0.05)
            run.flush()
        (info,) = list_runs(root)
        assert info.status == "running"
        f = info.metric_facts()
        assert f is not None and f.interval is not None and 0.03 < f.interval < 1.0
        assert info.alerts().codes == []
        later = time.time() + 3600
        stalled = info.alerts(now=later)
        assert stalled.codes == [STALLED] and stalled.texts[0].startswith("no metric for 60 min, usually every ")
        assert info.alerts(now=later, stall_after=1e6).codes == []
    finally:
        run.finish()
    (info,) = list_runs(root)
    assert info.status == "finished" and info.alerts(now=time.time() + 3600).codes == []


def test_a_crashed_run_is_not_stalled(root):
    child = python_child(f"""
import time, trackstore
run = trackstore.init(project="p", name="dies", root={str(root)!r}, flush_interval=0.1)
for s in range(5):
    run.log({{"x": float("nan") if s == 3 else 1.0}}, step=s)
    time.sleep(0.05)
run.flush()
print(run.id, flush=True)
time.sleep(60)
""")
    rid = child.stdout.readline().strip()
    kill9(child)
    (info,) = list_runs(root)
    assert info.run_id == rid and info.status == "crashed"
    a = info.alerts(now=time.time() + 86400)
    assert a.codes == [NONFINITE] and a.texts == ["NaN in x since step 3"]


# ------------------------------------------------------------------ the live last step
def test_a_live_runs_last_step_comes_from_its_parts(root):
    """A writer process flushing every 0.2 s: the listing's last step is at least the largest
    step its parts held a moment before, while run.json (rewritten at a heartbeat, every 10 s)
    has not caught up."""
    child = python_child(f"""
import time, trackstore
run = trackstore.init(project="p", name="live", root={str(root)!r}, flush_interval=0.2)
print(run.id, flush=True)
step = 0
while step < 100000:
    run.log({{"x": float(step)}}, step=step)
    step += 1
    time.sleep(0.01)
""")
    try:
        rid = child.stdout.readline().strip()
        paths = RunPaths(root, "p", rid)

        def parts_step() -> int:
            t = trackstore.query("SELECT max(step) AS s FROM metrics WHERE run_id = $r", {"r": rid}, root=root)
            return t.column("s")[0].as_py() or 0

        wait_for(lambda: parts_step() >= 30, "the writer's first parts")
        before = parts_step()
        (row,) = listed_rows(root)
        recorded = json.loads(paths.run_file.read_text()).get("last_step")
        assert row["status"] == "running" and row["last_step"] >= before >= 30
        assert recorded is None or recorded < row["last_step"]  # what the table showed before
        (info,) = list_runs(root)
        assert info.last_step >= before and info.row()["last_step"] == info.last_step
    finally:
        kill9(child)


# ------------------------------------------------------------------ the catalog
def test_catalog_of_the_previous_version_is_rebuilt_with_the_facts(root):
    values = [0.0, NAN, 2.0]
    rid = nan_run(root, values)
    assert run_cli("runs", root=root).returncode == 0
    path = catalog_path(root)
    assert CATALOG_VERSION == 5
    # make the file what version 4 wrote: no metrics facts, seven fields per part record
    db = sqlite3.connect(path)
    for col in ("metrics_fp", "nonfinite", "nonfinite_keys", "metric_last_ts", "metric_interval", "metric_step"):
        db.execute(f"ALTER TABLE runs DROP COLUMN {col}")
    for project, run_id, parts in db.execute("SELECT project, run_id, parts FROM run_details").fetchall():
        if parts:
            old = {k: [fp, [p[:7] for p in recs]] for k, (fp, recs) in json.loads(parts).items()}
            db.execute("UPDATE run_details SET parts = ? WHERE project = ? AND run_id = ?", (json.dumps(old), project, run_id))
    db.execute("UPDATE catalog_info SET value = '4' WHERE key = 'version'")
    db.commit()
    db.close()
    out = run_cli("runs", "--alerts", "-f", "json", root=root)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["run_id"] == rid and row["alerts"] == ["nonfinite"] and row["nonfinite"] == 1
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT value FROM catalog_info WHERE key = 'version'").fetchone() == ("5",)
        assert db.execute("SELECT nonfinite, nonfinite_keys FROM runs").fetchone() == (1, '{"actor/pg_loss": [1, 0, 1]}')
    finally:
        db.close()


def test_an_unchanged_ended_run_answers_from_its_row(root, monkeypatch):
    nan_run(root, [NAN, 1.0])
    assert listed_rows(root, alerts=10)[0]["alerts"] == ["nonfinite"]
    from trackstore.store.catalog import part_records

    def no_reads(*a, **k):
        raise AssertionError("a part was read again")

    monkeypatch.setattr(part_records, "read_part_record", no_reads)
    time.sleep(3.1)  # past the racy window: the metrics folder's fingerprint is kept
    listed_rows(root, alerts=10)
    (row,) = listed_rows(root, alerts=10)
    assert row["alerts"] == ["nonfinite"] and row["nonfinite_keys"] == {"actor/pg_loss": {"nan": 1, "inf": 0, "first_step": 0}}


# ------------------------------------------------------------------ the command line
def _two_runs(root) -> tuple[str, str]:
    bad = nan_run(root, [1.0, 2.0, NAN, 4.0])
    with trackstore.init(project="p", name="fine", root=root, config={"seed": 1}) as run:
        run.log({"ok": 1.0}, step=0)
        good = run.id
    return bad, good


def test_runs_shows_and_filters_alerts(root):
    bad, good = _two_runs(root)
    out = run_cli("runs", root=root)
    assert out.returncode == 0, out.stderr
    assert "alerts" in out.stdout and "NaN" in out.stdout
    rows = json.loads(run_cli("runs", "-f", "json", root=root).stdout)
    by_id = {r["run_id"]: r for r in rows}
    assert by_id[bad]["alerts"] == ["nonfinite"] and by_id[bad]["alert_text"] == ["NaN in actor/pg_loss since step 2"]
    assert by_id[bad]["nonfinite_keys"] == {"actor/pg_loss": {"nan": 1, "inf": 0, "first_step": 2}}
    assert by_id[good]["alerts"] == [] and by_id[good]["nonfinite"] == 0 and by_id[good]["nonfinite_keys"] is None
    out = run_cli("runs", "-f", "parquet", "-o", str(root.parent / "runs.parquet"), root=root)
    assert out.returncode == 0, out.stderr
    import pyarrow.parquet as pq

    t = pq.read_table(root.parent / "runs.parquet")
    assert dict(zip(t.column("run_id").to_pylist(), t.column("alerts").to_pylist())) == {bad: ["nonfinite"], good: []}
    only = json.loads(run_cli("runs", "--alerts", "-f", "json", root=root).stdout)
    assert [r["run_id"] for r in only] == [bad]
    table = run_cli("runs", "--alerts", root=root).stdout
    assert "1 run" in table and "nan" in table and "fine" not in table
    where = json.loads(run_cli("runs", "--alerts", "--where", "true", "-f", "json", root=root).stdout)
    assert where == only  # the runs view's rows get the same alert fields


def test_runs_without_alerts_has_no_alerts_column(root):
    with trackstore.init(project="p", name="fine", root=root) as run:
        run.log({"ok": 1.0}, step=0)
    out = run_cli("runs", root=root)
    assert out.returncode == 0 and "fine" in out.stdout and "alerts" not in out.stdout
    assert "0 runs" in run_cli("runs", "--alerts", root=root).stdout


def test_stall_after_is_checked(root):
    out = run_cli("runs", "--stall-after", "0", root=root)
    assert out.returncode != 0 and "--stall-after" in out.stderr


def test_stall_after_decides_in_the_listing(root):
    run = trackstore.init(project="p", name="slow", root=root)
    try:
        for step in range(4):
            run.log({"x": 1.0}, step=step)
            run.flush()
            time.sleep(0.3)
        rows = listed_rows(root, alerts=10)
        assert rows[0]["alerts"] == [] and rows[0]["silent_s"] is not None and rows[0]["metric_interval_s"] > 0
        time.sleep(0.1)
        # an interval of about 0.3 s and a minute's floor: no run stalls within this test, by any N
        assert listed_rows(root, alerts=1)[0]["alerts"] == []
    finally:
        run.finish()
    assert listed_rows(root, alerts=1)[0]["silent_s"] is None  # ended: its silence is not measured


@pytest.mark.parametrize("columns", [80])
def test_the_alerts_column_fits_80_columns(root, columns):
    bad, _good = _two_runs(root)
    with trackstore.init(project="a-rather-long-project-name", name="a-rather-long-run-name-for-the-table", root=root) as run:
        run.log({"x": INF}, step=3)
    code, out = cli_in_pty("runs", "--root", root, columns=columns)
    out = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert all(len(line) <= columns for line in lines), out
    assert "alerts" in out and "NaN" in out and "inf" in out


def test_a_first_listing_reads_new_parts_without_pandas_or_duckdb(root):
    """Reading a new part's values takes pyarrow (a listing of a catalogued store does not), never
    pandas (0.2-0.3 s) nor DuckDB."""
    import subprocess
    import sys

    nan_run(root, [1.0, NAN, INF])
    code = ("import sys, io, contextlib\nfrom trackstore.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()) as f: main(['runs', '--root', {str(root)!r}])\n"
            "print(sorted(m for m in ('pyarrow', 'duckdb', 'pandas') if m in sys.modules), 'NaN+inf' in f.getvalue())")
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["['pyarrow']", "True"]
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert again.stdout.split() == ["[]", "True"]


def test_system_metrics_do_not_keep_a_stalled_run_alive(root):
    """The sampler thread logs ``system/`` keys every interval whatever training does: a run whose
    own metrics stopped 14 minutes ago is stalled though its system metrics are fresh."""
    from trackstore.store import metric_facts
    from trackstore.write import system

    assert metric_facts.SYSTEM_PREFIX == system.PREFIX
    child = python_child(f"""
import time, trackstore
real = time.time
run = trackstore.init(project="p", name="stuck", root={str(root)!r}, system_metrics=True,
                      system_metrics_interval=0.1, flush_interval=0.2)
fake = [real() - 840 - 59 * 20]
time.time = lambda: fake[0]
for step in range(60):
    run.log({{"actor/pg_loss": 1.0}}, step=step)
    fake[0] += 20
time.time = real
run.flush()
print(run.id, flush=True)
time.sleep(60)
""", env={"TRACKSTORE_SYSTEM_METRICS": "1"})
    try:
        rid = child.stdout.readline().strip()

        def fresh_system_rows() -> bool:
            t = trackstore.query("SELECT count(*) AS n FROM metrics WHERE run_id = $r AND key LIKE 'system/%' "
                                 "AND ts > now() - INTERVAL 30 SECOND", {"r": rid}, root=root)
            return t.column("n")[0].as_py() > 0

        wait_for(fresh_system_rows, "the sampler's rows")
        (info,) = list_runs(root)
        a = info.alerts()
        assert info.status == "running" and a.codes == [STALLED], a
        assert a.texts == ["no metric for 14 min, usually every 20 s"] and a.short == "stalled 14m"
    finally:
        kill9(child)


class LiveRunMachine(RuleBasedStateMachine):
    """A live run logs finite and non-finite values, flushes, and is listed between any two
    steps: the listing's counts equal a scan of the stored rows, its last step is at least the
    largest stored step, and the run stalls only while it runs."""

    def __init__(self):
        super().__init__()
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        self.run = trackstore.init(project="p", name="m", root=self.root, flush_interval=3600.0)
        self.step = 0

    @rule(values=st.lists(st.sampled_from([1.0, NAN, INF, -INF]), min_size=1, max_size=5))
    def log(self, values):
        for v in values:
            self.run.log({"k": v}, step=self.step)
            self.step += 1

    @rule()
    def flush(self):
        self.run.flush()

    @rule()
    def listed_like_a_scan(self):
        (row,) = listed_rows(self.root, alerts=10)
        t = trackstore.query("SELECT max(step) AS s, count(*) FILTER (WHERE isnan(value)) AS nan, "
                             "count(*) FILTER (WHERE isinf(value)) AS inf FROM metrics", root=self.root)
        stored, nan, inf = (t.column(c)[0].as_py() for c in ("s", "nan", "inf"))
        assert row["status"] == "running"
        assert row["nonfinite"] == nan + inf
        assert row["alerts"] == (["nonfinite"] if nan + inf else [])
        if stored is not None:
            assert row["last_step"] is not None and row["last_step"] >= stored
        # a day later without a new metric: stalled once it has a usual interval (two log times)
        later = list_runs(self.root)[0].alerts(now=time.time() + 86400)
        assert (STALLED in later.codes) == (later.interval_s is not None)

    def teardown(self):
        self.run.finish()
        (info,) = list_runs(self.root)
        assert info.status == "finished" and STALLED not in info.alerts(now=time.time() + 86400).codes
        self.tmp.cleanup()


TestLiveRunMachine = LiveRunMachine.TestCase
TestLiveRunMachine.settings = settings(max_examples=6, stateful_step_count=8, deadline=None)


@pytest.mark.parametrize("facts", [MetricFacts(0, {}, None, None, None),
                                   MetricFacts(3, {"loss": [2, 1, 7], "kl": [0, 0, 0]}, 1_700_000_000.25, 2.5, 10)])
def test_metric_facts_read_back_from_a_replicas_run_json_are_the_same(facts):
    assert MetricFacts.from_json(json.loads(json.dumps(facts.to_json()))) == facts


@pytest.mark.parametrize("found", [None, [], "x", {}, {"nonfinite": "1", "keys": {}},
                                   {"nonfinite": True, "keys": {}},
                                   {"nonfinite": 1, "keys": {"loss": [1, 0]}},
                                   {"nonfinite": 1, "keys": {"loss": [1, 0, None]}},
                                   {"nonfinite": 0, "keys": {}, "last_ts": "yesterday"},
                                   {"nonfinite": 0, "keys": {}, "last_step": 1.5}])
def test_metric_facts_edited_into_something_else_are_not_taken(found):
    """A replica run.json whose facts are not what sync writes is read as carrying none: the
    listing then reads the run's parts."""
    assert MetricFacts.from_json(found) is None
