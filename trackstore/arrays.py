"""Arrow arrays built straight from buffers.

``pa.array`` over numpy data imports pandas when pandas happens to be installed (50 MB and a
third of a second in a training process that only logs scalars); these helpers never do.
"""

from __future__ import annotations


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
