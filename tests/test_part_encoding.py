"""How parts are encoded (docs/format.md, "Encoding"): a small part (a writer's flush) is snappy
but for its free text, which is zstd; a big part (a compaction's) is zstd throughout; every part
has statistics of ``writer``, from which a reader learns whose rows it holds without decoding
them. Readers of every codec mix (pyarrow, DuckDB, trackstore's own) get the same rows back."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.read.reader import whole_part_ids
from trackstore.store import schema
from trackstore.store.layout import RunPaths
from trackstore.store.parts import SMALL_PART_ROWS, codecs, part_bytes, read_rows
from trackstore.store.vocab import Kind
from trackstore.upkeep.compact import compact


def codec_of(pf: pq.ParquetFile) -> dict[str, set[str]]:
    """Each column's compression over every row group of a part."""
    md = pf.metadata
    out: dict[str, set[str]] = {}
    for g in range(md.num_row_groups):
        for i in range(md.num_columns):
            out.setdefault(md.schema.column(i).path.split(".")[0], set()).add(md.row_group(g).column(i).compression)
    return out


def parts_of(root, kind):
    return sorted(root.glob(f"project=p/run=r/{kind}/*.parquet"))


def test_a_writers_flush_is_snappy_but_for_its_text_and_names_its_writer(root):
    run = trackstore.init("p", root=root, run_id="r")
    for step in range(50):
        run.log({"loss": 1.0 / (step + 1), "reward": step * 0.5}, step=step)
    run.log({"grad": trackstore.Histogram([i / 7 for i in range(100)])}, step=49)  # list columns
    run.log_samples([{"input": [{"role": "user", "content": "What is 6 x 7? " * 20}],  # JSON: json_fields
                      "output": "It is 42. " * 40, "score": 1.0, "judge": "ok"}], step=49)
    run.finish()
    for kind in (Kind.METRICS, Kind.SAMPLES, Kind.HISTOGRAMS):
        parts = parts_of(root, kind)
        assert parts, kind
        for path in parts:
            pf = pq.ParquetFile(path)
            assert pf.metadata.num_rows < SMALL_PART_ROWS
            text = set(schema.TEXT_COLUMNS.get(kind, ()))
            found = codec_of(pf)
            assert set(found) == set(schema.SCHEMAS[kind].names), kind
            for column, codecs_seen in found.items():  # every leaf, nested ones too: none uncompressed
                assert codecs_seen == ({"ZSTD"} if column in text else {"SNAPPY"}), (kind, column, codecs_seen)
            # the footer says whose rows these are: the ids need no column decoded
            assert whole_part_ids(pf).writers() == [run.writer_id]


def test_a_compacted_part_is_zstd_throughout_and_every_reader_agrees(root):
    run = trackstore.init("p", root=root, run_id="r", flush_interval=0.05)
    steps = SMALL_PART_ROWS // 2 + 100  # two keys a step: the compacted part is a big one
    for step in range(steps):
        run.log({"loss": 1.0 / (step + 1), "reward": (step % 97) * 0.5}, step=step)
    run.finish()
    before = pa.concat_tables([read_rows(p, Kind.METRICS) for p in parts_of(root, Kind.METRICS)])
    compact(root, [RunPaths(root, "p", "r")])
    (merged,) = parts_of(root, Kind.METRICS)
    pf = pq.ParquetFile(merged)
    assert pf.metadata.num_rows == before.num_rows >= SMALL_PART_ROWS
    assert set().union(*codec_of(pf).values()) == {"ZSTD"}
    assert whole_part_ids(pf).writers() == [run.writer_id]
    after = read_rows(merged, Kind.METRICS)
    order = [("step", "ascending"), ("key", "ascending")]
    cols = ["step", "key", "value", "writer", "seq"]
    assert after.select(cols).sort_by(order).equals(before.select(cols).sort_by(order))
    n, total = duckdb.connect().execute(f"SELECT count(*), sum(value) FROM read_parquet('{merged}')").fetchone()
    assert n == before.num_rows and total == pytest.approx(sum(v for v in before.column("value").to_pylist()))


@pytest.mark.parametrize("kind", list(schema.SCHEMAS))
def test_every_leaf_column_of_a_small_part_is_given_its_codec(kind):
    """Free text zstd, every other column snappy, nested ones by their leaf paths (a column the
    Parquet writer is not told of would be left uncompressed); a big part zstd throughout."""
    file_schema = schema.SCHEMAS[kind]
    chosen = codecs(kind, file_schema, 10)
    text = set(schema.TEXT_COLUMNS.get(kind, ()))
    empty = pa.Table.from_batches([], schema=file_schema)
    sink = pa.BufferOutputStream()
    pq.write_table(empty, sink)
    md = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    assert set(chosen) == {md.schema.column(i).path for i in range(md.num_columns)}
    assert {p for p, c in chosen.items() if c == "zstd"} == text
    assert codecs(kind, file_schema, SMALL_PART_ROWS) == "zstd"
    for name in text:  # every declared text column is a string column of its kind
        assert file_schema.field(name).type == pa.string(), (kind, name)


def test_a_small_replica_part_reads_back_the_same_in_duckdb_and_pyarrow(tmp_path):
    rows = 300
    table = pa.table({
        "step": pa.array(range(rows), pa.int64()), "key": pa.array(["loss", "reward", "kl"] * 100),
        "value": pa.array([i / 7 for i in range(rows)]), "ts": pa.array([1_700_000_000_000_000 + i for i in range(rows)],
                                                                       schema.TS_TYPE),
        "writer": pa.array(["w-1"] * rows), "seq": pa.array(range(rows), pa.int64())})
    path = tmp_path / "part.parquet"
    path.write_bytes(part_bytes(table, Kind.METRICS))
    got = read_rows(path, Kind.METRICS)
    assert got.num_rows == rows and got.column("value").to_pylist() == table.column("value").to_pylist()
    found = duckdb.connect().execute(f"SELECT count(*), count(DISTINCT seq), max(step) FROM read_parquet('{path}')")
    assert found.fetchone() == (rows, rows, rows - 1)
