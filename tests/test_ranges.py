"""RangeSet: the exact (writer, seq) sets sync cursors are made of."""

import pyarrow as pa

from trackstore.store.ranges import RangeSet


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


def test_add_table_matches_add_seqs_in_any_order_with_duplicates():
    import random

    rng = random.Random(7)
    rows = [(rng.choice("abc"), rng.randrange(0, 500)) for _ in range(3000)]
    expected = RangeSet()
    for w in "abc":
        expected.add_seqs(w, [s for x, s in rows if x == w])
    for writer_type in (pa.string(), pa.dictionary(pa.int32(), pa.string())):
        got = RangeSet()
        half = len(rows) // 2  # two chunks, like a concatenation of part files
        table = pa.concat_tables([
            pa.table({"writer": pa.array([w for w, _ in rows[i:j]]).cast(writer_type),
                      "seq": pa.array([s for _, s in rows[i:j]], pa.int64())})
            for i, j in ((0, half), (half, len(rows)))])
        got.add_table(table)
        assert got == expected
    sorted_run = RangeSet()
    sorted_run.add_table(pa.table({"writer": ["w"] * 6, "seq": [0, 1, 2, 4, 5, 9]}))
    assert sorted_run.to_json() == {"w": [[0, 2], [4, 5], [9, 9]]}


def test_difference_matches_set_difference():
    """RangeSet.difference (SwanLab's recovery withdraws a dead session's rows with it): exact
    set difference, checked against Python sets on seeded random ranges."""
    import random

    from trackstore.store.ranges import RangeSet

    rng = random.Random(5)
    for _ in range(200):
        a, b, sa, sb = RangeSet(), RangeSet(), set(), set()
        for rs, ss in ((a, sa), (b, sb)):
            for _ in range(rng.randint(0, 5)):
                w = rng.choice("wx")
                lo = rng.randint(0, 60)
                hi = lo + rng.randint(0, 15)
                rs.add_range(w, lo, hi)
                ss.update((w, i) for i in range(lo, hi + 1))
        got = a - b
        assert set(got.pairs()) == sa - sb
        assert len(got) == len(sa - sb)


# ---------------------------------------------------------------------------- numbers read from files
import pytest  # noqa: E402

from trackstore.store.ranges import INT64_MAX, RangeValueError, check_count  # noqa: E402


@pytest.mark.parametrize("stored, problem", [
    ({"w": [[0, 2**70]]}, "is not a row sequence number"),
    ({"w": [[-1, 3]]}, "is not a row sequence number"),
    ({"w": [[0, 2**63]]}, "is not a row sequence number"),
    ({"w": [[0, 1.5]]}, "is not a row sequence number"),
    ({"w": [[False, True]]}, "is not a row sequence number"),
    ({"w": [["0", "3"]]}, "is not a row sequence number"),
    ({"w": [[5, 2]]}, "ends before it starts"),
    ({"w": [[0, 1, 2]]}, "is not a [lo, hi] range"),
    ({"w": [0, 1]}, "is not a [lo, hi] range"),
    ({"w": {"0": 1}}, "must map to a list"),
    ([[0, 1]], "must be an object"),
    ({"a": [[0, INT64_MAX]], "b": [[0, 0]]}, "(its number of rows)"),  # 2**63 rows: no len() can say it
])
def test_a_set_read_from_a_file_must_hold_int64_seqs_in_order(stored, problem):
    with pytest.raises(RangeValueError) as err:
        RangeSet.from_json(stored, "acked.metrics")
    assert problem in str(err.value) and str(err.value).startswith("acked.metrics")
    assert isinstance(err.value, ValueError)


def test_the_largest_sets_the_format_allows_are_read_and_counted():
    widest = RangeSet.from_json({"w": [[0, INT64_MAX - 1]]})
    assert len(widest) == INT64_MAX and ("w", INT64_MAX - 1) in widest
    assert RangeSet.from_json({"w": [[INT64_MAX, INT64_MAX]]}).to_json() == {"w": [[INT64_MAX, INT64_MAX]]}
    assert RangeSet.from_json({"w": [[5, 9], [0, 3], [2, 6]]}).to_json() == {"w": [[0, 9]]}  # any ranges: their union
    assert RangeSet.from_json(None) == RangeSet()


@pytest.mark.parametrize("value", [-1, 2**63, 1.0, True, "3", None])
def test_counts_are_int64_from_zero(value):
    with pytest.raises(RangeValueError, match=r"skipped\.metrics: .* is not a count"):
        check_count(value, "skipped.metrics")
    assert check_count(INT64_MAX, "x") == INT64_MAX and check_count(0, "x") == 0
