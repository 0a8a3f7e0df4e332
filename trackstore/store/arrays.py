"""Arrow arrays built straight from buffers.

``pa.array`` over numpy data imports pandas when pandas happens to be installed (50 MB and a
third of a second in a training process that only logs scalars); these helpers never do.
"""

from __future__ import annotations

from typing import Any


def from_numpy(arr, type_):
    """A pyarrow array over a contiguous numpy array, zero-copy. Unlike ``pa.array``, this does
    not import pandas (50 MB and a third of a second) when pandas happens to be installed."""
    import pyarrow as pa

    return pa.Array.from_buffers(type_, len(arr), [None, pa.py_buffer(arr)])


def string_array(strings: list[str]):
    """A pyarrow string array built from its buffers (no pandas import, see :func:`from_numpy`)."""
    import pyarrow as pa

    data = [s.encode("utf-8") for s in strings]  # keys are checked to be valid UTF-8 at log time
    offsets = [0]
    for b in data:
        offsets.append(offsets[-1] + len(b))
    if offsets[-1] >= 1 << 31:  # beyond int32 offsets: let pyarrow pick large_string and cast
        return pa.array(strings, pa.large_string()).cast(pa.string())
    from array import array

    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(array("i", offsets)),
                                                          pa.py_buffer(b"".join(data))])


def to_numpy(arr, dtype):
    """A read-only numpy view of a primitive Arrow array without nulls (int, float, timestamp).

    ``Array.to_numpy`` can import pandas (see above); this reads the value buffer directly.
    """
    import numpy as np

    if arr.null_count:
        raise ValueError("to_numpy needs an array without nulls")
    width = np.dtype(dtype).itemsize
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * width)


def constant_bools(value: bool, n: int):
    """A boolean array of ``n`` times ``value`` (``pa.repeat`` may import pandas)."""
    import pyarrow as pa

    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer((b"\xff" if value else b"\x00") * ((n + 7) // 8))])


def constant_strings(value: str, n: int):
    """A string array of ``n`` times ``value``, built at once (a writer id on every row of a part)."""
    import numpy as np
    import pyarrow as pa

    word = value.encode("utf-8")
    offsets = np.arange(0, (n + 1) * len(word), len(word), dtype=np.int64)
    big = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(word * n)])
    return big.cast(pa.string())


_EPOCH = None


def column(values: list, type_):
    """A pyarrow array of ``type_`` from Python values (``None`` is null), never importing pandas.

    ``pa.array`` asks pyarrow's pandas shim whether its argument is array-like, and the shim
    imports pandas when it is installed, whether the argument is a list or a numpy array. At
    interpreter shutdown that import fails (pandas starts a thread pool, which Python refuses
    then), and the rows being converted were lost. This builds the array from its buffers for
    the types the row kinds use (strings, int64, float64, bool, timestamps, lists of those); any
    other type, or a machine without numpy (where pyarrow never looks for pandas), goes through
    ``pa.array``. Raises ``TypeError``/``ValueError``/``OverflowError`` for a value that does not
    fit the type, as ``pa.array`` does.
    """
    import pyarrow as pa

    try:
        import numpy as np
    except ImportError:
        return pa.array(values, type_)
    n = len(values)
    valid = [v is not None for v in values]
    nulls = n - sum(valid)
    bitmap = None if not nulls else pa.py_buffer(np.packbits(np.fromiter(valid, np.bool_, n), bitorder="little"))
    if pa.types.is_string(type_):
        bad = next((v for v in values if v is not None and not isinstance(v, str)), None)
        if bad is not None:
            raise TypeError(f"expected a string, got {type(bad).__name__}")
        data = [v.encode("utf-8") if v is not None else b"" for v in values]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, data), np.int64, n), out=offsets[1:])
        if offsets[-1] >= 1 << 31:
            raise ValueError("more than 2 GiB of text in one column")
        return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets.astype(np.int32)),
                                                pa.py_buffer(b"".join(data))], null_count=nulls)
    if pa.types.is_list(type_):
        items = [v for v in values if v is not None]
        if any(isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)) for v in items):
            raise TypeError(f"expected lists for a {type_} column")
        lengths = np.fromiter((len(v) if v is not None else 0 for v in values), np.int64, n)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        child = column([x for v in items for x in v], type_.value_type)
        return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(offsets.astype(np.int32))],
                                     null_count=nulls, children=[child])
    if pa.types.is_timestamp(type_) and type_.unit == "us":
        global _EPOCH
        from datetime import datetime, timedelta, timezone

        if _EPOCH is None:
            _EPOCH = (datetime(1970, 1, 1, tzinfo=timezone.utc), timedelta(microseconds=1))
        epoch, us = _EPOCH
        raw = np.fromiter(((v - epoch) // us if v is not None else 0 for v in values), np.int64, n)
        return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(raw)], null_count=nulls)
    if pa.types.is_boolean(type_):
        if any(type(v) is not bool for v in values if v is not None):
            raise TypeError("expected True or False")
        bits = np.packbits(np.fromiter((bool(v) for v in values), np.bool_, n), bitorder="little")
        return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(bits)], null_count=nulls)
    dtype = {pa.int64(): np.int64, pa.float64(): np.float64}.get(type_)
    if dtype is None:
        return pa.array(values, type_)
    if dtype is np.int64 and any(isinstance(v, (bool, float)) or not isinstance(v, int) for v in values if v is not None):
        raise TypeError(f"expected integers for an {type_} column")
    raw = np.fromiter((v if v is not None else 0 for v in values), dtype, n)
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(raw)], null_count=nulls)


def to_pylist(table) -> list[dict]:
    """``table.to_pylist()`` without importing pandas: pyarrow converts a time-zone-aware
    timestamp column through pandas (a third of a second for every ``trackstore runs``); this
    converts those columns itself (as aware datetimes in the column's zone) and the rest as
    pyarrow does."""
    import pyarrow as pa

    names = table.column_names
    columns = []
    for col in table.columns:
        if pa.types.is_timestamp(col.type) and col.type.tz:
            columns.append(_aware_datetimes(col))
        else:
            columns.append(col.to_pylist())
    return [dict(zip(names, values)) for values in zip(*columns)] if columns else [{} for _ in range(table.num_rows)]


def _aware_datetimes(col) -> list:
    from datetime import datetime, timedelta, timezone

    import pyarrow as pa

    tz_name = col.type.tz
    if tz_name in ("UTC", "Etc/UTC", "+00:00", "Z"):
        tz: Any = timezone.utc
    else:
        try:
            from zoneinfo import ZoneInfo

            tz = ZoneInfo(tz_name)
        except Exception:  # an offset such as +02:00, or a zone this machine does not know
            return col.to_pylist()
    per_us = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 0.001}[col.type.unit]
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    out = []
    for v in col.cast(pa.int64()).to_pylist():
        out.append(None if v is None else (epoch + timedelta(microseconds=int(v * per_us))).astimezone(tz))
    return out
