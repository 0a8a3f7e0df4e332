"""What a metrics part's values say, computed once from its rows: the facts alerts need.

:func:`metric_values` gives, over a metrics table's rows, the oldest and newest row time and the
number of distinct row times of the training's own keys (outside :data:`SYSTEM_PREFIX`: the
system metrics sampler logs whatever the training does), and per key (any key) its NaN and
infinite values and the first step one was seen at. :func:`trackstore.store.parts.part_encoder`
writes them into every metrics part's key-value metadata (:data:`FACTS_KEY`), where they cost
the writer a pass over values it holds in memory; the catalog reads them from the footer and
computes them from the values only for a part written without them (before 6 December 2026, or
by another tool). Every value is looked at (numpy over the column buffers, no pandas): Parquet's
min/max statistics leave NaN out, so they cannot tell whether a part holds one.
"""

from __future__ import annotations

import json

FACTS_KEY = b"trackstore.metric_facts"
# the keys the system metrics sampler logs (trackstore.write.system.PREFIX): a run whose training
# stopped logging still gets them, so they do not count as its log calls
SYSTEM_PREFIX = "system/"

Facts = tuple  # (oldest, newest, distinct log times, {key: [nan, inf, first step]})


def encode(facts: Facts) -> bytes:
    first, last, times, keys = facts
    return json.dumps({"first_ts": first, "last_ts": last, "log_times": times, "nonfinite": keys},
                      separators=(",", ":")).encode()


def decode(metadata: dict | None) -> Facts | None:
    """The facts a part's footer metadata holds, or None (a part written without them, or damaged)."""
    raw = (metadata or {}).get(FACTS_KEY)
    if raw is None:
        return None
    try:
        d = json.loads(raw)
        return d["first_ts"], d["last_ts"], int(d["log_times"]), dict(d["nonfinite"])
    except (ValueError, KeyError, TypeError):
        return None


def metric_values(table) -> tuple[float | None, float | None, int, dict]:
    """``(oldest, newest, distinct log times, {key: [nan, inf, first step]})`` of a metrics part's
    rows (``step``, ``key``, ``value``, ``ts``): the times over the keys outside
    :data:`SYSTEM_PREFIX`, the non-finite values over every key.

    Every value is looked at (numpy over the column buffers, no pandas): Parquet's min/max
    statistics leave NaN out, so they cannot tell whether a part holds one."""
    import numpy as np

    if table.num_rows == 0:
        return None, None, 0, {}
    table = table.combine_chunks()
    per_s = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}.get(getattr(table.column("ts").type, "unit", "us"), 1e6)
    ts = _plain(table.column("ts").chunk(0), np.int64)
    names = table.column("key").chunk(0)
    if hasattr(names, "dictionary"):  # how part files store keys: codes into a few names
        lookup = names.dictionary.to_pylist()
        codes = _plain(names.indices, np.int32)
        system = [i for i, k in enumerate(lookup) if k.startswith(SYSTEM_PREFIX)]
        training = ~np.isin(codes, system) if system else np.ones(len(ts), bool)
    else:  # plain strings (a part written by another tool): one code per row
        lookup = names.to_pylist()
        codes = np.arange(len(lookup))
        training = np.fromiter((not k.startswith(SYSTEM_PREFIX) for k in lookup), bool, len(lookup))
    logged = ts[training]
    first = float(logged.min()) / per_s if len(logged) else None
    last = float(logged.max()) / per_s if len(logged) else None
    values = table.column("value").chunk(0)
    v = _plain(values, np.float64)
    bad = ~np.isfinite(v)
    if values.null_count:  # a null (a value logged as None) is not a NaN
        valid = np.unpackbits(np.frombuffer(values.buffers()[0], np.uint8), bitorder="little")
        bad &= valid[values.offset:values.offset + len(values)].astype(bool)
    keys: dict[str, list] = {}
    if bad.any():
        at = np.flatnonzero(bad)
        steps = _plain(table.column("step").chunk(0), np.int64)[at].tolist()
        labels = [lookup[c] for c in codes[at].tolist()]
        for label, step, is_nan in zip(labels, steps, np.isnan(v[at]).tolist()):
            entry = keys.setdefault(label, [0, 0, step])
            entry[0 if is_nan else 1] += 1
            entry[2] = min(entry[2], step)
    if len(logged) < 2:
        times = len(logged)
    elif np.all(logged[1:] >= logged[:-1]):  # a writer's rows are in log order: no sort needed
        times = 1 + int(np.count_nonzero(logged[1:] != logged[:-1]))
    else:  # sorted, then counted the same way (not np.unique: it imports numpy.ma, which a flush at exit must not)
        s = np.sort(logged)
        times = 1 + int(np.count_nonzero(s[1:] != s[:-1]))
    return first, last, int(times), keys


def _plain(arr, dtype):
    """The values of a primitive Arrow array as numpy (nulls hold whatever the buffer holds)."""
    import numpy as np

    width = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * width)
