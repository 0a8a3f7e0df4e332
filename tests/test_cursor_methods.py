"""The sync cursor's methods (``trackstore.store.cursor.Cursor``) as a state machine.

Random sequences of the protocol's changes (a session begins, a batch is marked in doubt and
acknowledged, a run's pass is marked in doubt at once and acknowledged batch by batch, a session is confirmed or rolled back, rows are marked for a recheck, the remote
run is forgotten) are played on a cursor and on a plain model of what it must hold. After every
step the cursor survives its own JSON (what is stored is what is read back, through the one
check every reader uses), and it agrees with the model: acknowledged rows, the batch in doubt,
rechecks. ``merge`` (a receipt's cursor) is the union of acknowledged rows, never loses a row
either side acknowledged outside an open session, and merging a cursor with itself changes no
row.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trackstore.store.cursor import RUN, STEPS, Cursor, check_cursor
from trackstore.store.ranges import RangeSet

KINDS = ("metrics", "samples")
WRITERS = ("w0", "w1")


def _ids(rows: set[tuple[str, int]]) -> RangeSet:
    rs = RangeSet()
    for w, s in rows:
        rs.add_range(w, s, s)
    return rs


def _rows(rs: RangeSet | None) -> set[tuple[str, int]]:
    if not rs:
        return set()
    return {(w, s) for w, ranges in rs.to_json().items() for lo, hi in ranges for s in range(lo, hi + 1)}


batches = st.dictionaries(st.sampled_from(KINDS),
                          st.sets(st.tuples(st.sampled_from(WRITERS), st.integers(0, 30)), min_size=1, max_size=6),
                          min_size=1, max_size=2)


class CursorMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.cursor = Cursor("memory", "memory:x", "p", "r")
        self.acked: dict[str, set] = {k: set() for k in KINDS}
        self.session: dict[str, set] | None = None
        self.recheck: dict[str, set] = {k: set() for k in KINDS}
        self.doubt: dict[str, set] | None = None
        self.run_doubt = False  # the doubt is a run's pass (kind RUN): batches leave it one by one

    @rule()
    @precondition(lambda self: self.session is None and self.doubt is None)
    def begin_session(self):
        self.cursor.begin_session()
        self.session = {k: set(v) for k, v in self.acked.items()}

    @rule(batch=batches)
    @precondition(lambda self: self.doubt is None)
    def send(self, batch):
        kind = STEPS if len(batch) > 1 else next(iter(batch))
        self.cursor.mark_in_doubt(kind, {k: _ids(v) for k, v in batch.items()}, "b", "2026-12-05T00:00:00Z")
        self.doubt = {k: set(v) for k, v in batch.items()}
        self.run_doubt = False
        assert {k: _rows(v) for k, v in self.cursor.in_doubt_rows().items()} == self.doubt

    @rule(batch=batches)
    @precondition(lambda self: self.doubt is None)
    def send_a_run(self, batch):
        self.cursor.mark_run_in_doubt({k: _ids(v) for k, v in batch.items()}, "run-b", "2026-12-05T00:00:00Z")
        self.doubt = {k: set(v) for k, v in batch.items()}
        self.run_doubt = True
        assert self.cursor.in_doubt["kind"] == RUN
        assert {k: _rows(v) for k, v in self.cursor.in_doubt_rows().items()} == self.doubt

    @rule(data=st.data())
    @precondition(lambda self: self.doubt is not None)
    def acknowledge(self, data):
        # a batch: the whole doubt, or (a run's pass) some of its rows, of one kind or several
        handed = {k: data.draw(st.sets(st.sampled_from(sorted(v)), min_size=1)) if self.run_doubt else set(v)
                  for k, v in self.doubt.items()}
        acked = {k: data.draw(st.sets(st.sampled_from(sorted(v)))) if v else set() for k, v in handed.items()}
        self.cursor.acknowledge({k: _ids(v) for k, v in handed.items()}, {k: _ids(v) for k, v in acked.items()},
                                {k: 0 for k in acked})
        for k, v in acked.items():
            self.acked[k] |= v
        for k, v in handed.items():
            self.recheck[k] -= v
        left = {k: rest for k, v in self.doubt.items() if (rest := v - handed.get(k, set()))}
        self.doubt = left if self.run_doubt and left else None

    @rule()
    @precondition(lambda self: self.session is not None and self.doubt is None)
    def confirm_session(self):
        self.cursor.confirm_session()
        self.session = None
        for k in KINDS:
            self.recheck[k] -= self.acked[k]

    @rule()
    @precondition(lambda self: self.session is not None)
    def roll_back_session(self):
        assert self.cursor.roll_back_session()
        for k in KINDS:
            self.recheck[k] |= (self.acked[k] - self.session[k]) | (self.doubt or {}).get(k, set())
        self.acked, self.session, self.doubt = self.session, None, None

    @rule(kind=st.sampled_from(KINDS), rows=st.sets(st.tuples(st.sampled_from(WRITERS), st.integers(0, 30)), min_size=1))
    def mark_recheck(self, kind, rows):
        self.cursor.mark_recheck(kind, _ids(rows))
        self.recheck[kind] |= rows

    @rule()
    @precondition(lambda self: self.session is None)
    def forget(self):
        self.cursor.forget()
        self.acked = {k: set() for k in KINDS}
        self.recheck = {k: set() for k in KINDS}
        self.doubt = None

    @rule()
    @precondition(lambda self: self.session is None)
    def merge_with_itself(self):
        merged = self.cursor.merge(self.cursor, other_is_newer=True)
        for k in KINDS:
            assert _rows(merged.acked.get(k)) == self.acked[k]

    @invariant()
    def agrees_with_the_model(self):
        for k in KINDS:
            assert _rows(self.cursor.acked.get(k)) == self.acked[k], k
            assert _rows(self.cursor.recheck.get(k)) == self.recheck[k], k
        assert (self.cursor.in_doubt is None) == (self.doubt is None)
        assert {k: _rows(v) for k, v in self.cursor.in_doubt_rows().items()} == (self.doubt or {})
        assert (self.cursor.session is None) == (self.session is None)

    @invariant()
    def survives_its_own_json(self):
        data = self.cursor.to_json()
        assert check_cursor(data) is data
        again = Cursor.from_json(data)
        assert again.to_json() == data


CursorMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=25, deadline=None)
test_cursor_methods_keep_the_protocol_state = CursorMachine.TestCase


rowsets = st.dictionaries(st.sampled_from(KINDS), st.sets(st.tuples(st.sampled_from(WRITERS), st.integers(0, 30))),
                          max_size=2)


@settings(max_examples=150, deadline=None)
@given(a=rowsets, b=rowsets, a_recheck=rowsets, b_recheck=rowsets, newer=st.booleans())
def test_merging_two_cursors_keeps_every_acknowledged_row(a, b, a_recheck, b_recheck, newer):
    def cursor(acked, recheck, status):
        c = Cursor("memory", "memory:x", "p", "r", synced_status=status)
        for k, v in acked.items():
            c.acked_set(k).update(_ids(v))
        for k, v in recheck.items():
            if v:
                c.mark_recheck(k, _ids(v))
        return c

    local, incoming = cursor(a, a_recheck, "running"), cursor(b, b_recheck, "finished")
    merged = local.merge(incoming, other_is_newer=newer)
    for k in KINDS:
        acked = a.get(k, set()) | b.get(k, set())
        assert _rows(merged.acked.get(k)) == acked
        # a row either side acknowledged needs no recheck; the rest of both sides' rechecks stay
        assert _rows(merged.recheck.get(k)) == (a_recheck.get(k, set()) | b_recheck.get(k, set())) - acked
    assert merged.synced_status == ("finished" if newer else "running")
    assert _rows(local.acked.get("metrics")) == a.get("metrics", set())  # the inputs do not change
