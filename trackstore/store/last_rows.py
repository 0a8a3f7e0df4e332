"""The last row of each key in a metrics part, marked so ``latest`` reads a few rows, not all.

"Latest value of every key" is the most common question asked of a store, and without help it
is a full scan: every point's key, value and time decoded to keep one row per key. Each metrics
part therefore marks, in its boolean ``last_of_key`` column, the row that is the most recently
logged of its key *in that file* (largest ``(ts, seq)``, the order the ``latest`` view uses),
and stores those rows in a row group of their own at the end of the file. The global latest
row of a key is necessarily the latest one within its own file, so the view may look only at
marked rows; the row group's statistics (``last_of_key`` min = max = true, and max = false in
every other row group) let DuckDB skip everything else without decoding it.

The mark lives in the part itself, so it is written atomically with the data it describes:
no side file can go missing or go stale, live runs stay exact, and compaction recomputes it.
Parts written before the column existed read it as NULL, which the view treats as "may be
last" (it scans those files fully), so old stores stay correct.
"""

from __future__ import annotations

COLUMN = "last_of_key"
_FIRST_CHUNK = 4096  # rows looked at from the end before widening: one or two training steps


def mark_last_rows(table):
    """``table`` (metrics rows) with ``last_of_key`` set, reordered so the marked rows come last.

    Returns ``(table, marked)``: ``marked`` is how many rows at the end are marked. Rows keep
    their relative order within the unmarked and the marked groups, and ``key`` comes back
    dictionary-encoded (``KEY_TYPE``), as the file stores it. A writer's batch (one writer,
    rows in ``seq`` order, clock not stepping back) needs only a look at its last rows;
    anything else (a compacted or hand-made table) falls back to a sort.
    """
    import numpy as np
    import pyarrow as pa

    from .arrays import constant_bools, from_numpy, to_numpy
    from .schema import KEY_TYPE

    if COLUMN in table.column_names:
        table = table.drop_columns([COLUMN])
    n = table.num_rows
    key = table.column("key")
    if key.type == KEY_TYPE and key.num_chunks == 1:
        key = key.chunk(0)  # the writer's batches arrive encoded
    else:  # compaction, hand-made tables: encode here
        import pyarrow.compute as pc

        plain = key.cast(pa.string()) if pa.types.is_dictionary(key.type) else key
        key = pc.dictionary_encode(plain.combine_chunks()).cast(KEY_TYPE)
    table = table.set_column(table.column_names.index("key"), pa.field("key", KEY_TYPE, nullable=False), key)
    if n == 0:
        return table.append_column(pa.field(COLUMN, pa.bool_()), pa.chunked_array([], pa.bool_())), 0
    codes = to_numpy(key.indices, np.int32 if key.indices.type == pa.int32() else np.int64)
    ts = to_numpy(table.column("ts").combine_chunks(), np.int64)
    seq = to_numpy(table.column("seq").combine_chunks(), np.int64)
    if _in_log_order(ts, seq):
        positions = _last_occurrences(codes, len(key.dictionary))
    else:
        order = np.lexsort((seq, ts, codes))  # by key, then (ts, seq): each key's group ends with its last
        ends = np.flatnonzero(np.diff(codes[order], append=np.int64(-1)))
        positions = np.sort(order[ends])
    marked = len(positions)
    if positions[0] != n - marked:  # the marked rows are not already the file's tail: move them there
        mask = np.zeros(n, dtype=bool)
        mask[positions] = True
        order = np.concatenate([np.flatnonzero(~mask), positions]).astype(np.int64)
        table = table.take(from_numpy(order, pa.int64()))
    flags = pa.chunked_array([constant_bools(False, n - marked), constant_bools(True, marked)], pa.bool_())
    return table.append_column(pa.field(COLUMN, pa.bool_()), flags), marked


def _in_log_order(ts, seq) -> bool:
    """True when rows are sorted by ``(ts, seq)``: then the last occurrence of a key is its latest."""
    import numpy as np

    if len(ts) < 2:
        return True
    # sufficient (stricter than needed, which only costs the sort): time never goes back, seq always up
    return bool(np.all(ts[1:] >= ts[:-1]) and np.all(seq[1:] > seq[:-1]))


def _last_occurrences(codes, size: int):
    """Sorted positions of the last occurrence of every code present, looking back from the end.

    Training loops log every key at (almost) every step, so the first few thousand rows from
    the end usually hold every key; the window widens (x4) only for keys logged rarely.
    """
    import numpy as np

    n = len(codes)
    wanted = int(np.count_nonzero(np.bincount(codes, minlength=size)))
    last = np.full(size, -1, dtype=np.int64)
    hi, width = n, _FIRST_CHUNK
    while True:
        lo = max(0, hi - width)
        window = codes[lo:hi]
        fresh = last[window] < 0  # keys not found in a later window
        np.maximum.at(last, window[fresh], np.arange(lo, hi, dtype=np.int64)[fresh])
        if lo == 0 or int(np.count_nonzero(last >= 0)) == wanted:
            break
        hi, width = lo, width * 4
    return np.sort(last[last >= 0])
