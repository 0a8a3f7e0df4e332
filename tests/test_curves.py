"""Curves (what `trackstore plot` draws) read straight from part files, checked against SQL.

The oracle is the same downsampling written as one SQL query over the views: every bucket of
every curve must agree, on runs as flushed (many parts, log order) and as compacted at finish
(one key-clustered part), for step and time axes, smoothing, globs, NaN and several runs.
"""

from __future__ import annotations

import math
import os
import re
import warnings

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.errors import CorruptFileError, UsageError
from trackstore.read.listing import resolve_run
from trackstore.read.overview import curves, matching_keys
from trackstore.read.points import _row_groups_for, read_points, run_keys
from trackstore.read.views import SkippedFileWarning, connect, run_sql


def reference(root, runs, keys, *, points, smooth=None, x="step"):
    """The curves as SQL over the views computes them (bucketing by equal-width x)."""
    params = {"points": points}
    runs_sql = " OR ".join(f"(project = $p{i} AND run_id = $r{i})" for i in range(len(runs)))
    for i, r in enumerate(runs):
        params[f"p{i}"], params[f"r{i}"] = r.project, r.run_id
    keys_sql = " OR ".join(f"key GLOB $k{i}" for i in range(len(keys)))
    params.update({f"k{i}": k for i, k in enumerate(keys)})
    xexpr = ("step::DOUBLE" if x == "step" else  # seconds since the first finite point, exactly
             "(epoch_us(ts) - min(epoch_us(ts)) OVER (PARTITION BY project, run_id, key)) / 1e6")
    value = "value"
    if smooth and smooth > 1:
        value = (f"avg(value) OVER (PARTITION BY project, run_id, key ORDER BY step, ts, seq "
                 f"ROWS BETWEEN {smooth - 1} PRECEDING AND CURRENT ROW)")
    sql = f"""
        WITH pts AS (SELECT project, run_id, key, {xexpr} AS x, {value} AS value FROM metrics
                     WHERE ({runs_sql}) AND ({keys_sql}) AND isfinite(value)),
        rng AS (SELECT project, run_id, key, min(x) AS x0, max(x) AS x1, count(*) AS n FROM pts GROUP BY ALL),
        b AS (SELECT p.project, p.run_id, p.key, p.x, p.value,
                     CASE WHEN r.n <= $points OR r.x1 = r.x0 THEN p.x
                          ELSE least(floor((p.x - r.x0) * $points / (r.x1 - r.x0)), $points - 1) END AS bucket
              FROM pts p JOIN rng r USING (project, run_id, key))
        SELECT project, run_id, key, avg(x) AS x, avg(value) AS value, min(value) AS min, max(value) AS max,
               count(*) AS n FROM b GROUP BY project, run_id, key, bucket ORDER BY project, run_id, key, x"""
    con = connect(root)
    try:
        return run_sql(con, sql, params).to_pylist()
    finally:
        con.close()


def same(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert (ra["project"], ra["run_id"], ra["key"], ra["n"]) == (rb["project"], rb["run_id"], rb["key"], rb["n"])
        for c in ("x", "value", "min", "max"):
            assert math.isclose(ra[c], rb[c], rel_tol=1e-9, abs_tol=1e-9), (c, ra, rb)


def training_run(root, name, *, steps=600, flush_every=100, compact=True, nan_at=(), project="p"):
    run = trackstore.init(project, name=name, root=root, flush_interval=3600)
    for s in range(steps):
        loss = float("nan") if s in nan_at else 1.0 / (s + 1) + (s % 7) * 0.01
        run.log({"loss": loss, "actor/kl": s * 0.001, "actor/lr": 1e-6, "reward": math.sin(s / 30)}, step=s)
        if s % 50 == 49:
            run.log({"val/score": s / steps}, step=s)  # a key logged rarely
        if s % flush_every == flush_every - 1:
            run.flush()
    run.finish(compact=compact)
    return resolve_run(run.id, root)


@pytest.mark.parametrize("compacted", [False, True], ids=["as-flushed", "compacted"])
@pytest.mark.parametrize("x", ["step", "time"])
@pytest.mark.parametrize("smooth", [None, 5])
def test_curves_match_the_sql_definition(root, compacted, x, smooth):
    a = training_run(root, "a", compact=compacted, nan_at={10, 11, 400})
    b = training_run(root, "b", steps=250, compact=compacted)
    assert len(a.paths.parts("metrics")) == (1 if compacted else 6)
    for keys, points in ((["loss"], 100), (["actor/*", "val/score"], 1000), (["reward", "nope"], 7)):
        got = curves([a, b], keys, points=points, smooth=smooth, x=x).to_pylist()
        same(got, reference(root, [a, b], keys, points=points, smooth=smooth, x=x))
        assert got  # every case draws something


def test_curve_drops_non_finite_points_and_counts_buckets(root):
    run = training_run(root, "nan", steps=300, nan_at=set(range(0, 300, 3)))
    rows = curves([run], ["loss"], points=1000).to_pylist()
    assert len(rows) == 200 and all(math.isfinite(r["value"]) for r in rows)
    assert sum(r["n"] for r in curves([run], ["loss"], points=10).to_pylist()) == 200


def test_compacted_part_is_read_by_the_row_groups_of_the_key(root):
    run = trackstore.init("p", root=root, flush_interval=3600)
    keys = [f"m/{i:03d}" for i in range(200)]
    for s in range(600):
        run.log({k: float(s) for k in keys}, step=s)
        if s % 100 == 99:
            run.flush()
    run.finish()  # compacts: one key-clustered part
    info = resolve_run(run.id, root)
    (part,) = info.paths.parts("metrics")
    pf = pq.ParquetFile(part)
    groups = _row_groups_for(pf, ["m/123"])
    assert 0 < len(groups) <= 3 < pf.metadata.num_row_groups
    got = read_points(info.paths, ["m/123", "absent"], ("step", "value"))
    assert list(got) == ["m/123"] and sorted(got["m/123"].column("step").to_pylist()) == list(range(600))
    assert run_keys(info.paths) == sorted(keys)
    assert matching_keys(["m/12?", "m/001"], run_keys(info.paths)) == ["m/001", *[f"m/12{i}" for i in range(10)]]


def test_curves_skip_a_damaged_part_with_a_warning_or_raise(root):
    run = training_run(root, "dmg", compact=False)
    victim = run.paths.parts("metrics")[2]
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = curves([run], ["loss"], points=1000).to_pylist()
    assert any(issubclass(w.category, SkippedFileWarning) and str(victim) in str(w.message) for w in caught)
    assert len(rows) == 500  # the other five parts
    with pytest.raises(CorruptFileError, match=str(victim)):
        curves([run], ["loss"], on_corrupt="error")


def test_curves_validate_their_arguments(root):
    run = training_run(root, "v", steps=10)
    with pytest.raises(UsageError):
        curves([run], [], points=10)
    with pytest.raises(UsageError):
        curves([run], ["loss"], points=1)
    with pytest.raises(UsageError):
        curves([run], ["loss"], x="wall")
    assert curves([run], ["nope"]).num_rows == 0


def test_curves_of_a_live_run_with_merged_and_flushed_parts(root):
    """While a run trains, its files are a mix: rolling merges (key-clustered) and recent flushes."""
    import time

    run = trackstore.init("p", name="live", root=root, flush_interval=3600)
    for s in range(700):
        run.log({"loss": 1.0 / (s + 1), "actor/kl": s * 0.001, "reward": math.sin(s / 30)}, step=s)
        if s % 20 == 19:
            run.flush()  # 35 flushes: two level-1 merges, three parts left as flushed
    deadline = time.monotonic() + 20
    while len(run.paths.parts("metrics")) > 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    names = [p.name for p in run.paths.parts("metrics")]
    merged = [n for n in names if re.search(r"-\d{12}-\d{12}\.parquet$", n)]
    assert len(names) == 5 and len(merged) == 2, names  # 2 merged files of 16 flushes, 3 as flushed
    info = resolve_run(run.id, root)
    for keys, points in ((["loss"], 100), (["actor/*", "reward"], 1000)):
        same(curves([info], keys, points=points).to_pylist(), reference(root, [info], keys, points=points))
    run.finish()
