"""Whole curves merged from per-part bucket summaries (trackstore.read.pyramid) equal the M4 of
all the points in aligned buckets, whichever way the points are split into parts; the cache is
read back from disk after a restart and a new part is the only thing a poll computes."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trackstore.read.pyramid import Pyramids, level_for


def write_part(path, steps, values, key="k"):
    n = len(steps)
    pq.write_table(pa.table({"key": [key] * n, "step": pa.array(steps, pa.int64()),
                             "value": pa.array(values, pa.float64()),
                             "ts": pa.array([1_700_000_000_000_000 + s for s in steps], pa.timestamp("us", tz="UTC"))}),
                   path)


def reference(steps, values, width):
    """M4 of every finite point in aligned buckets of the curve's level, as the module defines it
    (of equal values, the minimum is the first point holding it and the maximum the last)."""
    pts = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
    if not pts:
        return None
    k = level_for(float(max(s for s, _ in pts) - min(s for s, _ in pts)), width, "step")
    buckets: dict[int, list] = {}
    for s, v in pts:
        buckets.setdefault(s >> k, []).append((float(s), v))
    xs, ys = [], []
    for i in sorted(buckets):
        b = buckets[i]
        chosen = {min(b), max(b), min(b, key=lambda p: p[1]), max(b, key=lambda p: (p[1], p[0]))}
        for x, y in sorted(chosen):
            xs.append(x)
            ys.append(y)
    vals = [v for _, v in pts]
    return {"x": xs, "y": ys, "n": len(pts), "min": min(vals), "max": max(vals)}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), n=st.integers(1, 400), parts=st.integers(1, 4), width=st.sampled_from([2, 7, 50, 1000]))
def test_a_curve_from_part_summaries_is_the_curve_of_all_points(tmp_path_factory, data, n, parts, width):
    steps = sorted(data.draw(st.sets(st.integers(0, 10**6), min_size=n, max_size=n)))
    values = data.draw(st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(float("nan")), st.just(float("inf"))),
                                min_size=n, max_size=n, unique=True))  # distinct: no ties to break
    owner = data.draw(st.lists(st.integers(0, parts - 1), min_size=n, max_size=n))
    root = tmp_path_factory.mktemp("store")
    files = []
    for p in range(parts):
        mine = [i for i in range(n) if owner[i] == p]
        if mine:
            files.append(str(root / f"part-{p}.parquet"))
            write_part(files[-1], [steps[i] for i in mine], [values[i] for i in mine])
    got = Pyramids(root).curve(duckdb.connect(), files, "k", "step", width)
    assert got == reference(steps, values, width)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), n=st.integers(1, 600), width=st.sampled_from([1, 3, 20, 64, 700]))
def test_equal_values_pick_the_same_points_at_every_level(tmp_path_factory, data, n, width):
    # few distinct values, so buckets hold ties; an overlay's few buckets come from the coarse
    # summary, a single chart's from the finest: both agree with the reference
    steps = sorted(data.draw(st.sets(st.integers(0, 10**5), min_size=n, max_size=n)))
    values = data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=n, max_size=n))
    root = tmp_path_factory.mktemp("store")
    part = str(root / "part.parquet")
    write_part(part, steps, values)
    cache = Pyramids(root)
    assert cache.curve(duckdb.connect(), [part], "k", "step", width) == reference(steps, values, width)
    assert Pyramids(root).curve(duckdb.connect(), [part], "k", "step", width) == reference(steps, values, width)  # from disk
    for other in (1, 700):  # an overlay's coarse summary and a chart's finest one, in either order
        assert cache.curve(duckdb.connect(), [part], "k", "step", other) == reference(steps, values, other)


def test_summaries_persist_and_a_poll_computes_only_new_parts(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    con = duckdb.connect()
    rng = np.random.default_rng(3)
    first = str(root / "a.parquet")
    write_part(first, list(range(0, 50_000)), rng.normal(size=50_000).tolist())
    cache = Pyramids(root)
    whole = cache.curve(con, [first], "k", "step", 500)
    assert cache.computed == 1 and whole["n"] == 50_000
    restarted = Pyramids(root)  # a new server: read back from _catalog/curves/, not recomputed
    assert restarted.curve(con, [first], "k", "step", 500) == whole and restarted.computed == 0
    second = str(root / "b.parquet")  # a live run flushed one more part
    write_part(second, list(range(50_000, 50_100)), [100.0] * 100)
    grown = restarted.curve(con, [first, second], "k", "step", 500)
    assert restarted.computed == 1 and grown["n"] == 50_100 and grown["max"] == 100.0
    folder = root / "_catalog" / "curves"
    folder.rename(root / "kept")  # a cache that cannot be written (a file in the folder's place)
    folder.write_text("not a folder")
    assert Pyramids(root).curve(con, [first, second], "k", "step", 500) == grown
    folder.unlink()
    (root / "kept").rename(folder)
    for f in (root / "_catalog" / "curves").glob("*.m4"):  # damaged files cost a recomputation only
        f.write_bytes(b"garbage")
    fresh = Pyramids(root)
    assert fresh.curve(con, [first, second], "k", "step", 500) == grown and fresh.computed == 2
