"""RangeSet: the exact (writer, seq) sets sync cursors are made of."""

import pyarrow as pa

from trackstore.ranges import RangeSet


def test_merge_and_membership():
    r = RangeSet()
    r.add_seqs("w", [5, 1, 2, 3, 9, 10, 3])
    assert r.to_json() == {"w": [[1, 3], [5, 5], [9, 10]]}
    r.add_range("w", 4, 8)
    assert r.to_json() == {"w": [[1, 10]]}
    assert ("w", 10) in r and ("w", 0) not in r and ("x", 1) not in r
    assert len(r) == 10


def test_mask_and_json_roundtrip():
    r = RangeSet({"a": [[0, 2]], "b": [[5, 6]]})
    t = pa.table({"writer": ["a", "a", "a", "a", "b", "b", "c"], "seq": [0, 2, 3, 9, 5, 7, 0]})
    assert r.mask(t).to_pylist() == [True, True, False, False, True, False, False]
    assert RangeSet.from_json(r.to_json()) == r
    other = RangeSet()
    other.add_table(t)
    assert len(other) == 7
