"""How the engine cuts pending rows into batches, and the names it gives them.

A batch is a Table of one record kind, or a :class:`~.adapter.StepBatch` (whole steps of the
kinds a target takes merged by step). :func:`batch_id_of` is deterministic: the same rows
always get the same id, so a target that stores it can tell after a cut whether a batch
arrived (``docs/format.md``). Pure functions of their arguments: nothing here reads the store,
writes a cursor or talks to a target.
"""

from __future__ import annotations

import hashlib
from typing import Iterator

from trackstore.store.ranges import RangeSet

from .adapter import STEPS, StepBatch, WholePart


def row_ranges(table) -> RangeSet:
    """The row ids (``writer``, ``seq``) of ``table``."""
    r = RangeSet()
    r.add_table(table)
    return r


def not_acked(acked: RangeSet | None, table):
    """A boolean mask over ``table``: the rows not in ``acked``."""
    import pyarrow.compute as pc

    if not acked:
        import pyarrow as pa

        return pa.array([True] * table.num_rows, pa.bool_())
    return pc.invert(acked.mask(table))


def batch_ids(kind: str, batch) -> dict[str, RangeSet]:
    """The row ids of a batch, per kind."""
    if isinstance(batch, WholePart):
        return {kind: batch.ids}
    if kind == STEPS:
        return {k: row_ranges(t) for k, t in batch.tables.items()}
    return {kind: row_ranges(batch)}


def batch_id_of(kind: str, batch) -> str:
    """The id of a batch of rows of ``kind``: the same rows always get the same id (adapters
    store it at the target to tell, after a cut, whether the batch arrived)."""
    h = hashlib.sha256(kind.encode())
    for k, ids in batch_ids(kind, batch).items():
        h.update(repr((k, ids.to_json()) if kind == STEPS else ids.to_json()).encode())
    return h.hexdigest()[:16]


def concat_rows(a, b):
    """Two tables of one kind's rows as one, in replay order ``(step, writer, seq)``."""
    import pyarrow as pa

    table = pa.concat_tables([a, b.select(a.column_names).cast(a.schema)])
    keys = [("step", "ascending")] if "step" in table.column_names else []
    return table.sort_by(keys + [("writer", "ascending"), ("seq", "ascending")])


def row_batches(table, size: int, group: str | None = None) -> Iterator:
    """Slices of ``table`` of at most ``size`` rows in replay order; with ``group`` (a column,
    e.g. one trace's spans), rows sharing its value stay in one batch, in first-seen order. A
    row whose value is empty belongs to no group and keeps its place (an artifact alias move,
    which must stay in log order among the versions around it)."""
    n = table.num_rows
    if not group:
        for start in range(0, n, size):
            yield table.slice(start, size)
        return
    import pyarrow as pa

    values = table.column(group).to_pylist()
    order: dict = {}
    for i, v in enumerate(values):
        order.setdefault(v if v != "" else ("", i), []).append(i)
    chunk: list[int] = []
    for idx in order.values():
        if chunk and len(chunk) + len(idx) > size:
            yield table.take(pa.array(chunk))
            chunk = []
        chunk.extend(idx)
    if chunk:
        yield table.take(pa.array(chunk))


def step_batches(tables: dict, size: int) -> Iterator[StepBatch]:
    """:class:`StepBatch` es of about ``size`` rows over ``tables`` (kind -> rows with a ``step``):
    whole steps, in step order."""
    import numpy as np
    import pyarrow.compute as pc

    ordered, steps = {}, []
    for k, t in tables.items():
        if t.num_rows:
            t = t.take(pc.sort_indices(t, sort_keys=[("step", "ascending")]))  # stable: replay order kept
        ordered[k] = t
        steps.append(t.column("step").to_numpy())
    every = np.concatenate(steps) if steps else np.array([], dtype="int64")
    if not len(every):
        return
    values, counts = np.unique(every, return_counts=True)
    starts = {k: ordered[k].column("step").to_numpy() for k in ordered}
    i = 0
    while i < len(values):
        j, n = i, 0
        while j < len(values) and (j == i or n + counts[j] <= size):
            n += counts[j]
            j += 1
        lo, hi = values[i], values[j - 1]
        batch = {}
        for k, t in ordered.items():
            a = int(np.searchsorted(starts[k], lo, "left"))
            b = int(np.searchsorted(starts[k], hi, "right"))
            batch[k] = t.slice(a, b - a)
        yield StepBatch(batch)
        i = j
