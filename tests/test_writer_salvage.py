"""The writer's last line of defence: Arrow arrays built without pandas, and a value that still
fails to convert in the writer thread costs only itself, never the rows logged beside it.

(Values are checked when they are logged, so these go around ``Run.log`` to the writer itself:
what they prove is that if a bad value ever reaches the writer, its neighbours are stored.)
"""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trackstore
from trackstore.store.arrays import column
from trackstore.store.layout import run_paths
from trackstore.write.writer import Writer

TS = pa.timestamp("us", tz="UTC")
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
VALUES = {
    pa.string(): st.text(),
    pa.int64(): st.integers(-(1 << 63), (1 << 63) - 1),
    pa.float64(): st.floats(allow_nan=True, allow_infinity=True),
    pa.bool_(): st.booleans(),
    TS: st.integers(-(10 ** 15), 10 ** 16).map(lambda us: EPOCH + timedelta(microseconds=us)),
    pa.list_(pa.string()): st.lists(st.text(max_size=5), max_size=4),
    pa.list_(pa.float64()): st.lists(st.floats(allow_nan=False), max_size=4),
}


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(list(VALUES)).flatmap(
    lambda t: st.tuples(st.just(t), st.lists(st.one_of(st.none(), VALUES[t]), max_size=30))))
def test_column_equals_pa_array(case):
    type_, values = case
    built = column(values, type_)
    built.validate(full=True)
    assert built.type == type_
    expected = pa.array(values, type_).to_pylist()
    got = built.to_pylist()
    assert len(got) == len(expected)
    assert all(same(g, e) for g, e in zip(got, expected)), (got, expected)


@pytest.mark.parametrize("bad, type_", [([1 << 63], pa.int64()), ([10 ** 400], pa.float64()), ([3], pa.string()),
                                        (["x"], pa.list_(pa.string())), (["\udc80"], pa.string()),
                                        ([1.5], pa.int64()), (["yes"], pa.bool_())])
def test_column_refuses_what_does_not_fit(bad, type_):
    with pytest.raises((TypeError, ValueError, OverflowError)):
        column(bad, type_)


def test_column_never_imports_pandas():
    code = ("import sys, pyarrow as pa\nfrom datetime import datetime, timezone\nfrom trackstore.store.arrays import column\n"
            "column(['a', None], pa.string()); column([1, None], pa.int64()); column([1.0], pa.float64())\n"
            "column([True], pa.bool_()); column([datetime.now(timezone.utc)], pa.timestamp('us', tz='UTC'))\n"
            "column([['a'], None], pa.list_(pa.string()))\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_bad_metric_value_costs_only_itself(root):
    paths = run_paths(root, "p", "r1")
    w = Writer(paths, "w1", flush_interval=3600)
    for step in range(100):
        w.log_metrics(step, 1.0, {"a": float(step), "b": step})
    w.log_metrics(100, 1.0, {"a": 1.0, "b": 10 ** 400})  # b cannot be a float64
    w.log_metrics(1 << 63, 1.0, {"a": 2.0})  # a step beyond int64
    report = w.close()
    assert report.rejected_rows == {"metrics": 2} and not report.ok
    assert "rejected" in report.describe() and "memory bound" not in report.describe()
    con = trackstore.connect(root, sync_state=False)
    assert con.execute("SELECT count(*) FROM metrics").fetchone()[0] == 201
    assert con.execute("SELECT count(*) FROM metrics WHERE step = 100").fetchone()[0] == 1
    # seq stays dense: sync's cursors count on it
    assert con.execute("SELECT min(seq), max(seq), count(DISTINCT seq) FROM metrics").fetchone() == (0, 200, 201)


def test_a_bad_row_costs_only_itself(root):
    paths = run_paths(root, "p", "r1")
    w = Writer(paths, "w1", flush_interval=3600)
    now = datetime.now(timezone.utc)

    def sample(i, score):
        return {"step": 1, "split": "val", "sample_index": i, "input": "q", "output": "a", "score": score,
                "extra": None, "json_fields": None, "ts": now}

    for i in range(199):
        w.append("samples", sample(i, 0.5))
    w.append("samples", sample(199, "not a number"))
    w.append("samples", sample(200, 1.0))  # logged after the bad one, in the same flush window
    report = w.close()
    assert report.rejected_rows == {"samples": 1}
    con = trackstore.connect(root, sync_state=False)
    assert con.execute("SELECT count(*), max(sample_index) FROM samples").fetchone() == (200, 200)


def test_a_run_that_lost_rows_ends_failed(root):
    run = trackstore.init("p", root=root, run_id="r1")
    run.log({"a": 1.0}, step=0)
    run._writer.log_metrics(1, 1.0, {"a": 10 ** 400})  # as if a value slipped past the checks
    with pytest.raises(trackstore.WriteError, match="1 metrics rows rejected"):
        run.finish()
    con = trackstore.connect(root, sync_state=False)
    status, error, lost = con.execute("SELECT status, error, write_errors FROM runs").fetchone()
    assert status == "failed" and "could not be stored" in error and "1 metrics rows rejected" in lost
