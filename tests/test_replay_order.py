"""The rows a sync reads come in replay order, ``(step, writer, seq)``, however the run's parts
lie: one writer's flushes (already in order, returned as they are), several writers, steps that
go back (a resumed run), rows excluded because a target has them."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.query_fixtures import part
from trackstore.read.reader import read_kind, read_kind_parts
from trackstore.store.layout import RunPaths
from trackstore.store.ranges import RangeSet

# a part: its writer and the steps of its rows, one row each (seqs follow on per writer). The
# writers' file names sort the other way round from the writers themselves ("part-w-0-..." before
# "part-w-..."), and one's seqs start above the other's: parts read in name order can look sorted
# by step and seq and still not be in replay order
WRITERS = ("w", "w-0")
FIRST_SEQ = {"w": 50, "w-0": 0}
PARTS = st.lists(st.tuples(st.sampled_from(WRITERS), st.lists(st.integers(0, 6), min_size=1, max_size=5)),
                 min_size=1, max_size=5)


def write(root: Path, parts: list[tuple[str, list[int]]]) -> list[tuple[int, str, int]]:
    """The parts as a writer's flushes of the run p/r; every row's ``(step, writer, seq)``."""
    next_seq: dict[str, int] = {}
    rows = []
    for writer, steps in parts:
        first = next_seq.get(writer, FIRST_SEQ.get(writer, 0))
        part(root, "p", "r", "metrics", [{"step": s, "key": "loss", "value": float(s)} for s in steps],
             writer=writer, first_seq=first)
        rows += [(s, writer, first + i) for i, s in enumerate(steps)]
        next_seq[writer] = first + len(steps)
    return rows


def order(table) -> list[tuple[int, str, int]]:
    return list(zip(table.column("step").to_pylist(), table.column("writer").to_pylist(),
                    table.column("seq").to_pylist()))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(parts=PARTS, drop=st.sets(st.integers(0, 25), max_size=6))
@example(parts=[("w-0", [0, 1]), ("w", [1, 2])], drop=set())  # looks sorted by step and seq; is not
def test_rows_come_in_replay_order_whatever_the_parts(parts, drop):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = write(root, parts)
        exclude = RangeSet.from_json({"w-0": [[seq, seq] for seq in sorted(drop)]} if drop else {})  # held already
        want = sorted(r for r in rows if not (r[1] == "w-0" and r[2] in drop))
        paths = RunPaths(root, "p", "r")
        assert order(read_kind(paths, "metrics", exclude=exclude or None)) == want
        whole, table = read_kind_parts(paths, "metrics", exclude=exclude or None, damaged={})
        # the parts a target takes whole are their writer's only part; the rest comes merged, in order
        held = {(w, s) for p in whole for w, spans in p.ids.to_json().items() for a, b in spans
                for s in range(a, b + 1)}
        assert order(table) == [r for r in want if (r[1], r[2]) not in held]


def test_one_writers_flushes_in_order_come_back_as_read(tmp_path):
    """The common case (a live run's flushes, steps rising) needs no sort: the same rows, in the
    same order, as the parts hold them."""
    write(tmp_path, [("wa", [0, 1, 1, 2]), ("wa", [2, 3]), ("wa", [4])])
    table = read_kind(RunPaths(tmp_path, "p", "r"), "metrics")
    assert order(table) == [(0, "wa", 0), (1, "wa", 1), (1, "wa", 2), (2, "wa", 3), (2, "wa", 4), (3, "wa", 5),
                            (4, "wa", 6)]


def test_a_resumed_run_whose_steps_go_back_is_sorted(tmp_path):
    """A writer that logged step 5 then step 3 (a run resumed from an earlier checkpoint) is
    not in order as read: its rows are sorted by step."""
    write(tmp_path, [("wa", [4, 5]), ("wa", [3, 4])])
    table = read_kind(RunPaths(tmp_path, "p", "r"), "metrics")
    assert order(table) == [(3, "wa", 2), (4, "wa", 0), (4, "wa", 3), (5, "wa", 1)]


def test_two_writers_whose_parts_look_sorted_are_sorted(tmp_path):
    """Writer ``w-0``'s part is read before ``w``'s (its file name sorts first), its seqs are
    below ``w``'s and its steps too: read in name order the rows rise in step and seq, yet
    replay order puts ``w`` first at a step both logged."""
    write(tmp_path, [("w-0", [0, 1]), ("w", [1, 2])])
    table = read_kind(RunPaths(tmp_path, "p", "r"), "metrics")
    assert order(table) == [(0, "w-0", 0), (1, "w", 50), (1, "w-0", 1), (2, "w", 51)]
