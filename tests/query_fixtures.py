"""Builders for query tests: real runs through trackstore.init, and raw part files in the layout."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import trackstore
from trackstore.store import schema
from trackstore.store.layout import RunPaths, part_file_name
from trackstore.store.parts import write_part


def make_run(root: Path, project: str = "p", name: str = "exp", *, steps: int = 10, config=None, tags=None,
             metrics=None):
    """A finished run with ``loss`` = 1/(step+1) and ``reward`` = step/10 at steps 0..steps-1."""
    run = trackstore.init(project, name=name, config=config or {}, tags=tags or [], root=root)
    for s in range(steps):
        run.log(metrics(s) if metrics else {"loss": 1.0 / (s + 1), "reward": s / 10}, step=s)
    run.finish()
    return run


def part(root: Path, project: str, run_id: str, kind: str, rows: list[dict], *, writer: str = "w1",
         first_seq: int = 0, schema_: pa.Schema | None = None) -> Path:
    """Write ``rows`` as one part file of ``kind`` (filling writer/seq/ts), like the writer does."""
    sch = schema_ or schema.SCHEMAS[kind]
    full = []
    for i, r in enumerate(rows):
        r = dict(r)
        r.setdefault("writer", writer)
        r.setdefault("seq", first_seq + i)
        r.setdefault("ts", 1_764_000_000_000_000 + i)
        full.append(r)
    table = pa.Table.from_pylist(full, schema=schema.with_metadata(sch, kind))
    paths = RunPaths(Path(root), project, run_id)
    path = paths.kind_dir(kind) / part_file_name(writer, first_seq)
    write_part(path, table, kind)
    return path


def metric_rows(n: int, key: str = "loss", start: int = 0) -> list[dict]:
    return [{"step": start + i, "key": key, "value": float(start + i)} for i in range(n)]
