"""The ``latest`` view reads only the rows marked last of their key in each part
(trackstore.store.last_rows); these tests prove it still answers exactly what a full scan answers:
keys logged at different rates, a clock that steps back, several writers, parts from before
the mark existed, and compaction."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.parquet as pq

import trackstore
from trackstore.store import schema
from trackstore.store.last_rows import COLUMN, mark_last_rows
from trackstore.store.layout import RunPaths, part_file_name
from trackstore.store.parts import write_part
from trackstore.upkeep.compact import compact

FULL_SCAN = ("SELECT project, run_id, key, arg_max(step, {o}) AS step, arg_max(value, {o}) AS value, max(ts) AS ts "
             "FROM metrics GROUP BY ALL ORDER BY ALL").format(o="((epoch_us(ts)::HUGEINT << 64) + seq)")
LATEST = "SELECT project, run_id, key, step, value, ts FROM latest ORDER BY ALL"


def answers(root):
    con = trackstore.connect(root)
    try:
        return con.execute(LATEST).fetchall(), con.execute(FULL_SCAN).fetchall()
    finally:
        con.close()


def test_writer_parts_keep_each_keys_last_row_in_a_row_group_of_its_own(root):
    run = trackstore.init("p", root=root, run_id="r")
    for step in range(300):
        metrics = {"loss": 1.0 / (step + 1), "reward": step * 0.5}
        if step % 40 == 0:
            metrics["val/score"] = step / 10  # a rarer key: its last row is far from the end
        if step == 3:
            metrics["once"] = 7.0
        run.log(metrics, step=step)
    run.finish()
    [part] = RunPaths(root, "p", "r").parts("metrics")
    meta = pq.ParquetFile(part).metadata
    assert meta.num_row_groups == 2
    tail = pq.ParquetFile(part).read_row_group(1).to_pydict()
    assert sorted(tail["key"]) == ["loss", "once", "reward", "val/score"] and all(tail[COLUMN])
    assert dict(zip(tail["key"], tail["step"])) == {"loss": 299, "reward": 299, "val/score": 280, "once": 3}
    col = meta.schema.to_arrow_schema().get_field_index(COLUMN)
    stats = [meta.row_group(i).column(col).statistics for i in range(2)]
    assert (stats[0].min, stats[0].max) == (False, False) and (stats[1].min, stats[1].max) == (True, True)
    assert pq.read_table(part).num_rows == 300 * 2 + 8 + 1  # every point once: marking moved rows, added none
    latest, full = answers(root)
    assert latest == full and len(latest) == 4


def _points(writer, n, keys, seed, clock_steps_back=False):
    rng = random.Random(seed)
    rows = {"step": [], "key": [], "value": [], "ts": [], "writer": [], "seq": []}
    t = 1_700_000_000_000_000
    for seq in range(n):
        t += rng.choice([0, 1, 5, 1000])  # equal timestamps happen: seq breaks the tie
        if clock_steps_back and seq == n // 2:
            t -= 10_000_000  # NTP stepped the clock back 10 s
        for name, value in (("step", seq // 3), ("key", rng.choice(keys)), ("value", rng.random()), ("ts", t),
                            ("writer", writer), ("seq", seq)):
            rows[name].append(value)
    rows["ts"] = pa.array(rows["ts"], pa.int64()).cast(schema.TS_TYPE)
    return pa.table(rows, schema=schema.METRIC_POINTS)


def test_mark_matches_a_sort_whatever_the_order(root):
    keys = [f"k{i}" for i in range(12)]
    for seed, steps_back in [(1, False), (2, True), (3, False)]:
        table = _points("w", 5000, keys, seed, steps_back)
        if seed == 3:  # rows of two writers interleaved, not in (ts, seq) order
            table = pa.concat_tables([table, _points("v", 3000, keys, 9)]).take(
                pa.array(random.Random(4).sample(range(8000), 8000)))
        marked, count = mark_last_rows(table)
        assert count == len(keys)
        rows = table.to_pylist()
        expected = {}
        for r in rows:
            best = expected.get(r["key"])
            if best is None or (r["ts"], r["seq"]) > (best["ts"], best["seq"]):
                expected[r["key"]] = r
        tail = marked.slice(marked.num_rows - count).to_pylist()
        assert {r["key"]: (r["writer"], r["seq"]) for r in tail} == {
            k: (r["writer"], r["seq"]) for k, r in expected.items()}
        assert all(r[COLUMN] for r in tail) and not any(marked.column(COLUMN).to_pylist()[:-count])
        assert sorted(map(str, marked.drop_columns([COLUMN]).to_pylist())) == sorted(map(str, rows))


def test_latest_is_exact_with_old_parts_several_writers_and_after_compaction(root):
    paths = RunPaths(root, "p", "r")
    run = trackstore.init("p", root=root, run_id="r")
    run.log({"a": 1.0, "b": 2.0}, step=0)
    run.finish()
    keys = ["a", "b", "c"]
    # a part from before the mark existed: plain rows, no last_of_key column, the newest "c"
    old = _points("old-writer", 400, keys, 5)
    old = old.set_column(3, "ts", pa.array([4_000_000_000_000_000 + i for i in range(400)], pa.int64())
                         .cast(schema.TS_TYPE))
    old = old.replace_schema_metadata(schema.with_metadata(schema.METRIC_POINTS, "metrics").metadata)
    for lo in (0, 200):  # two of them, so compaction merges (and marks) them
        pq.write_table(old.slice(lo, 200), paths.kind_dir("metrics") / part_file_name("old-writer", lo))
    for i, seed in enumerate((6, 7)):  # two more writers, in several parts each
        t = _points(f"w{i}", 900, keys, seed, clock_steps_back=bool(i))
        for lo in range(0, 900, 300):
            write_part(paths.kind_dir("metrics") / part_file_name(f"w{i}", lo), t.slice(lo, 300), "metrics")
    latest, full = answers(root)
    assert latest == full
    assert {k: v for _p, _r, k, _s, v, _t in latest}["c"] == old.column("value").to_pylist()[
        max(i for i, k in enumerate(old.column("key").to_pylist()) if k == "c")]
    [result] = compact(root, [paths])
    assert result.changed
    after = answers(root)
    assert after[0] == after[1] == full
    assert len(paths.parts("metrics")) == 4  # one per writer
    for part in paths.parts("metrics"):  # compaction wrote the mark, into the old writer's rows too
        assert pq.ParquetFile(part).schema_arrow.get_field_index(COLUMN) >= 0
