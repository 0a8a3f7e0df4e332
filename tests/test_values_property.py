"""Property: a call either raises InvalidValueError and records nothing, or records exactly its
valid points; after ``finish()`` the store holds exactly what the accepted calls recorded.

Hypothesis draws sequences of calls whose values, steps and indexes are tagged valid or invalid
as they are drawn (huge ints, out-of-range steps and indexes, NaN, inf, None, strings, lists,
nested dicts, numpy scalars, bools, histograms of extreme values), runs them against a real run
(explicit flushes between some calls make several flush windows), predicts from the tags alone
whether each call raises and what it stores, and checks run.json (no write errors). The store
is then read back once with DuckDB (``trackstore.connect``) for every run the examples wrote:
exactly the predicted rows, in log order, nothing dropped, nothing extra.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trackstore
from trackstore.records.histogram import Histogram

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
FLOAT64_INT_LIMIT = 2 ** 1024 - 2 ** 970  # the smallest int whose float() overflows
SETTINGS = settings(max_examples=50, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])
pytestmark = pytest.mark.filterwarnings("ignore")  # None values warn once per key; numpy overflow to inf

# ---------------------------------------------------------------------- tagged values
ok = lambda s: s.map(lambda v: ("ok", v))  # noqa: E731
bad = lambda s: s.map(lambda v: ("bad", v))  # noqa: E731

any_float = st.floats(allow_nan=True, allow_infinity=True)
extreme_float = st.sampled_from([1.7976931348623157e308, -1.7976931348623157e308, 1e308, -1e308, 5e-324, 2.0 ** 60])
huge_int = st.one_of(st.integers(min_value=FLOAT64_INT_LIMIT), st.integers(max_value=-FLOAT64_INT_LIMIT),
                     st.sampled_from([10 ** 400, -(10 ** 400), FLOAT64_INT_LIMIT]))

METRIC_VALUE = st.one_of(
    ok(any_float), ok(extreme_float), ok(st.booleans()), ok(st.none()),
    ok(st.integers(-(FLOAT64_INT_LIMIT - 1), FLOAT64_INT_LIMIT - 1)),
    ok(st.sampled_from([FLOAT64_INT_LIMIT - 1, -(FLOAT64_INT_LIMIT - 1), 2 ** 63, 2 ** 70])),
    ok(any_float.map(np.float64)), ok(st.floats(width=32).map(np.float32)),
    ok(st.integers(INT64_MIN, INT64_MAX).map(np.int64)), ok(any_float.map(np.array)),
    st.lists(any_float | extreme_float, max_size=12).map(lambda v: ("hist", Histogram(v, bins=4))),
    bad(huge_int), bad(huge_int.map(lambda v: np.array(v, dtype=object))),
    bad(st.text(max_size=4)), bad(st.lists(st.floats(), min_size=1, max_size=3)),
)
STEP = st.one_of(
    st.just(("none", None)),
    ok(st.integers(INT64_MIN, INT64_MAX)), ok(st.sampled_from([INT64_MIN, INT64_MAX, INT64_MAX - 1, -1, 0])),
    ok(st.integers(INT64_MIN, INT64_MAX).map(np.int64)), ok(st.integers(-1000, 1000).map(float)),
    bad(st.integers(min_value=2 ** 63)), bad(st.integers(max_value=INT64_MIN - 1)),
    bad(st.sampled_from([np.uint64(2 ** 64 - 1), 1e19, -1e19, True, False, 1.5, math.nan, math.inf, "3"])),
)
INDEX = st.one_of(
    st.just(("none", None)),
    ok(st.sampled_from([0, 1, 2, -1, INT64_MIN, INT64_MAX, INT64_MAX - 1])), ok(st.integers(INT64_MIN, INT64_MAX)),
    ok(st.integers(0, 5).map(np.int64)),
    bad(st.integers(min_value=2 ** 63)), bad(st.integers(max_value=INT64_MIN - 1)),
    bad(st.sampled_from([True, 1.0, "1", np.uint64(2 ** 64 - 1)])),
)
SCORE = st.one_of(st.just(("none", None)), ok(any_float), ok(st.integers(-(2 ** 80), 2 ** 80)), ok(st.booleans()),
                  ok(any_float.map(np.float64)), bad(huge_int), bad(st.text(max_size=3)))


def is_bad(*tagged) -> bool:
    return any(tag == "bad" for tag, _v in tagged)


def as_int(v) -> int:
    return int(v.item() if hasattr(v, "item") else v)


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def same_rows(got: list[tuple], want: list[tuple]) -> bool:
    return len(got) == len(want) and all(len(g) == len(w) and all(map(same, g, w)) for g, w in zip(got, want))


class Store:
    """The examples' runs in one store root, and what each run must hold when read back."""

    def __init__(self, root):
        self.root = root
        self.expected: dict[str, dict[str, list[tuple]]] = {}
        self.calls: dict[str, list] = {}
        self._n = itertools.count()

    def new_run(self):
        return trackstore.init("prop", root=self.root, run_id=f"r{next(self._n)}", flush_interval=3600,
                               compact=False)  # merging part files at finish is not what is tested

    def finish(self, run, expected: dict[str, list[tuple]], calls: list) -> None:
        run.finish()
        meta = json.loads(run.paths.run_file.read_text())
        assert meta["status"] == "finished" and "write_errors" not in meta, meta.get("write_errors")
        self.expected[run.id] = expected
        self.calls[run.id] = calls

    def read_back(self, queries: dict[str, str]) -> None:
        con = trackstore.connect(self.root)
        try:
            for run_id, expected in self.expected.items():
                for kind, sql in queries.items():
                    got = con.execute(sql, [run_id]).fetchall()
                    assert same_rows(got, expected[kind]), (run_id, kind, got, expected[kind], self.calls[run_id])
        finally:
            con.close()


# ---------------------------------------------------------------------- metrics and histograms
LOG_CALL = st.tuples(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), METRIC_VALUE, max_size=3),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["x", "y"]), METRIC_VALUE, max_size=2)),
    STEP, st.booleans(),
)
FLUSH = st.just("flush")  # an explicit flush: a new flush window (one in four actions)
ACTIONS = st.lists(st.one_of(LOG_CALL, LOG_CALL, LOG_CALL, FLUSH), min_size=1, max_size=12)


def log_call(run, call, counter: int, points: list, hists: list) -> int:
    """Make one ``run.log`` call; check it raised iff a tag said bad; return the model's counter."""
    flat, nested, (step_tag, step), commit = call
    tagged = list(flat.items())
    raw = {k: v for k, (_t, v) in flat.items()}
    if nested is not None:  # {"n": {"x": ...}} flattens to "n/x"
        tagged += [(f"n/{k}", tv) for k, tv in nested.items()]
        raw["n"] = {k: v for k, (_t, v) in nested.items()}
    if is_bad((step_tag, step), *(tv for _k, tv in tagged)):
        with pytest.raises(trackstore.InvalidValueError):
            run.log(raw, step=step, commit=commit)
        assert run.step == counter
        return counter
    run.log(raw, step=step, commit=commit)
    at = counter if step_tag == "none" else as_int(step)
    for key, (tag, v) in tagged:
        if tag == "hist":
            hists.append((at, key, v.count))
        elif v is not None:
            points.append((at, key, float(v)))
    counter = (at + 1 if at < INT64_MAX else at) if commit else max(counter, at)
    assert run.step == counter
    return counter


@SETTINGS
@given(st.data())
def _metrics_property(store: Store, data) -> None:
    run = store.new_run()
    actions = data.draw(ACTIONS)
    counter, points, hists = 0, [], []
    for action in actions:
        if action == "flush":
            assert run.flush()
        else:
            counter = log_call(run, action, counter, points, hists)
    store.finish(run, {"metrics": points, "histograms": hists}, actions)
    last_step = json.loads(run.paths.run_file.read_text()).get("last_step")
    assert last_step == (max(s for s, _k, _v in points) if points else None)


def test_log_records_exactly_the_valid_points(root):
    store = Store(root)
    _metrics_property(store)
    store.read_back({
        "metrics": "SELECT step, key, value FROM metrics WHERE run_id = ? ORDER BY seq",
        "histograms": "SELECT step, key, count FROM histograms WHERE run_id = ? ORDER BY seq",
    })


# ---------------------------------------------------------------------- samples
ROW = st.tuples(st.text(max_size=8), st.text(max_size=8), SCORE, INDEX, st.booleans())
SAMPLES_CALL = st.tuples(st.lists(ROW, min_size=1, max_size=4), STEP, st.sampled_from(["val", "train"]))


def samples_call(run, call, counters: dict, rows_out: list) -> None:
    rows, (step_tag, step), split = call
    raw = []
    for inp, out, (_score_tag, score), (index_tag, index), as_tuple in rows:
        if as_tuple and index_tag == "none":
            raw.append((inp, out, score))
        else:
            row = {"input": inp, "output": out, "score": score}
            if index_tag != "none":
                row["sample_index"] = index
            raw.append(row)
    at = 0 if step_tag == "none" else (as_int(step) if step_tag == "ok" else None)
    nxt = counters.get((at, split), 0)
    planned, overflow = [], False
    for _i, _o, _s, (index_tag, index), _t in rows:
        if index_tag == "none":
            overflow = overflow or nxt > INT64_MAX
            index_value = nxt
        else:
            index_value = as_int(index) if index_tag == "ok" else 0
        nxt = max(nxt, index_value + 1)
        planned.append(index_value)
    if overflow or is_bad((step_tag, step), *(r[2] for r in rows), *(r[3] for r in rows)):
        with pytest.raises(trackstore.InvalidValueError):
            run.log_samples(raw, step=step, split=split)
        return
    assert run.log_samples(raw, step=step, split=split) == len(rows)
    counters[(at, split)] = nxt
    for (inp, out, (_t, score), _x, _u), index in zip(rows, planned):
        rows_out.append((at, split, index, inp, out, None if score is None else float(score)))


@SETTINGS
@given(st.data())
def _samples_property(store: Store, data) -> None:
    run = store.new_run()
    calls = data.draw(st.lists(st.one_of(SAMPLES_CALL, SAMPLES_CALL, SAMPLES_CALL, FLUSH), min_size=1, max_size=8))
    counters, rows = {}, []
    for call in calls:
        if call == "flush":
            assert run.flush()
        else:
            samples_call(run, call, counters, rows)
    store.finish(run, {"samples": rows}, calls)


def test_log_samples_records_exactly_the_valid_rows(root):
    store = Store(root)
    _samples_property(store)
    store.read_back({"samples": "SELECT step, split, sample_index, input, output, score FROM samples "
                                "WHERE run_id = ? ORDER BY seq"})


# ---------------------------------------------------------------------- traces
TRACE_CALL = st.tuples(STEP, INDEX, INDEX, SCORE, SCORE, st.one_of(st.none(), st.text(max_size=6)))


def trace_call(run, call, spans: list) -> None:
    (step_tag, step), (si_tag, si), (rn_tag, rn), reward, later_reward, output = call
    kw = {"step": step, "sample_index": si, "rollout_n": rn, "reward": reward[1]}
    if is_bad((step_tag, step), (si_tag, si), (rn_tag, rn), reward):
        with pytest.raises(trackstore.InvalidValueError):
            run.trace(**kw)
        return
    final_reward = reward[1]
    with run.trace(**kw) as tr:
        with tr.span("turn", kind="llm", inputs="q", outputs=output):
            pass
        if is_bad(later_reward):
            with pytest.raises(trackstore.InvalidValueError):
                tr.set_reward(later_reward[1])
        else:
            tr.set_reward(later_reward[1])
            final_reward = later_reward[1]
    fields = (0 if step_tag == "none" else as_int(step), None if si_tag == "none" else as_int(si),
              None if rn_tag == "none" else as_int(rn))
    spans.append((*fields, "turn", None, json.dumps(output, ensure_ascii=False)))  # outputs=None is JSON null
    spans.append((*fields, "episode", None if final_reward is None else float(final_reward), None))


@SETTINGS
@given(st.data())
def _traces_property(store: Store, data) -> None:
    run = store.new_run()
    calls = data.draw(st.lists(st.one_of(TRACE_CALL, TRACE_CALL, TRACE_CALL, FLUSH), min_size=1, max_size=8))
    spans: list = []
    for call in calls:
        if call == "flush":
            assert run.flush()
        else:
            trace_call(run, call, spans)
    store.finish(run, {"spans": spans}, calls)


def test_traces_record_exactly_the_valid_trajectories(root):
    store = Store(root)
    _traces_property(store)
    store.read_back({"spans": "SELECT step, sample_index, rollout_n, name, reward, outputs FROM spans "
                              "WHERE run_id = ? ORDER BY seq"})
