"""One bad value never costs its neighbours: values, steps and indexes are checked at the call.

Every value that the writer thread could not convert (an int beyond float64, a step or index
beyond int64) is refused by the call itself with an ``InvalidValueError`` naming the key or
field, before anything of that call is buffered. The valid points logged in the same flush
window (the runs here flush only at ``finish``) are all stored, and the store stays readable.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import trackstore
from tests.helpers import run_cli
from tests.helpers import stored_rows as stored
from trackstore.records.histogram import Histogram

BIG = 10 ** 400
INT64_MAX = 2 ** 63 - 1
INT64_MIN = -(2 ** 63)
WINDOW = 3600  # flush only at finish: every row of a test shares one flush window




def finish_cleanly(run) -> None:
    """finish() raises WriteError when rows could not be written; run.json must say nothing was lost."""
    run.finish()
    meta = json.loads(run.paths.run_file.read_text())
    assert "write_errors" not in meta and meta["status"] == "finished"


def log_window(run, n: int = 199) -> None:
    """The valid neighbours: ``n`` points at steps 0..n-1, keys seen before (the fast path)."""
    for i in range(n):
        run.log({"a": float(i)}, step=i)


# ---------------------------------------------------------------------- metric values
class ObjectScalar:
    """A 0-d array-like holding a Python int, as numpy's object arrays do."""

    def __init__(self, v):
        self.v = v
        self.size = 1

    def item(self):
        return self.v


HUGE_CALLS = {
    "int-only dict": {"a": 1, "b": BIG},
    "float then huge": {"a": 1.0, "b": BIG},
    "huge then float": {"b": BIG, "a": 1.0},
    "negative huge": {"a": 1.0, "b": -BIG},
    "cancelling huge ints": {"b": BIG, "c": -BIG, "a": 1.0},
    "numpy float64 and huge": {"a": np.float64(1.0), "b": BIG},
    "float64 limit + 1 ulp of int": {"a": 1.0, "b": 2 ** 1024 - 2 ** 970},
    "numpy object scalar": {"a": 1.0, "b": np.array(BIG, dtype=object)},
    "duck-typed scalar": {"a": 1.0, "b": ObjectScalar(BIG)},
    "nested": {"a": 1.0, "n": {"b": BIG}},
}


@pytest.mark.parametrize("known", [True, False], ids=["keys-known", "keys-new"])
@pytest.mark.parametrize("bad", list(HUGE_CALLS.values()), ids=list(HUGE_CALLS))
def test_int_beyond_float64_is_refused_at_the_call_and_costs_no_neighbour(root, bad, known):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    log_window(run)
    if known:  # every key seen before: the call takes Run.log's fast path
        run.log({k: 0.5 for k in ("b", "c", "n/b")}, step=199)
    with pytest.raises(trackstore.InvalidValueError, match=r"'(n/)?b'.*too large for a float64") as exc:
        run.log(bad, step=500)
    assert isinstance(exc.value, ValueError)
    run.log({"a": 1e300}, step=501)
    finish_cleanly(run)
    n = 200 + (3 if known else 0)
    assert stored(root, "SELECT count(*), count(*) FILTER (WHERE step = 500) FROM metrics") == [(n, 0)]


class AddsToFloat:
    """Not a number, but ``0.0 + it`` is a float (its ``__radd__`` says so)."""

    def __radd__(self, other):
        return float(other)

    __add__ = __radd__


class FloatDuck(AddsToFloat):
    """Adds to a float and converts with ``float()``, yet is no number type the store knows."""

    def __float__(self):
        return 2.0


NOT_METRICS = {
    "Fraction": Fraction(1, 3),
    "exact Fraction": Fraction(1, 2),
    "Decimal": Decimal("0.5"),
    "adds to a float": AddsToFloat(),
    "adds to a float, has __float__": FloatDuck(),
}


@pytest.mark.parametrize("known", [True, False], ids=["keys-known", "keys-new"])
@pytest.mark.parametrize("bad", list(NOT_METRICS.values()), ids=list(NOT_METRICS))
def test_value_of_an_unknown_type_is_refused_the_same_on_both_paths(root, bad, known):
    """One decision for new and known keys: other number types and objects whose addition gives a
    float are refused at the call, and the run's flush never meets them (it ends ``finished``)."""
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    log_window(run)
    if known:  # every key seen before: the call takes Run.log's fast path
        run.log({"b": 0.5}, step=199)
    with pytest.raises(trackstore.InvalidValueError, match=rf"'b' has type {type(bad).__name__}.*float\(value\)"):
        run.log({"a": 1.0, "b": bad}, step=500)
    run.log({"a": 2.0, "b": float(bad) if hasattr(bad, "__float__") else 3.0}, step=501)
    finish_cleanly(run)
    n = 199 + (1 if known else 0) + 2
    assert stored(root, "SELECT count(*), count(*) FILTER (WHERE step = 500) FROM metrics") == [(n, 0)]


def test_plain_numbers_looks_at_ints_a_numpy_sum_absorbed():
    """Run.log's fast path asks this when a call's sum is not a plain float (numpy values among
    them): with numpy 1.x, a float64 sum may absorb a huge int without raising."""
    from trackstore.store.values import plain_numbers

    assert plain_numbers([1.0, 2, True, -(2 ** 1000)])
    assert not plain_numbers([1.0, BIG]) and not plain_numbers([-BIG]) and not plain_numbers([2 ** 1024])
    assert not plain_numbers(["1"]) and not plain_numbers([np.int64(1)]) and not plain_numbers([None])


def test_largest_float64_ints_are_accepted(root):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    edge = 2 ** 1024 - 2 ** 970 - 1  # rounds down to the largest float64
    run.log({"a": 1.0, "b": 2.0})
    run.log({"a": edge, "b": -edge})
    finish_cleanly(run)
    assert stored(root, "SELECT key, value FROM metrics WHERE step = 1 ORDER BY key") == [
        ("a", 1.7976931348623157e308), ("b", -1.7976931348623157e308)]


# ---------------------------------------------------------------------- steps
OUT_OF_RANGE_STEPS = {
    "2**63": 2 ** 63,
    "-2**63-1": INT64_MIN - 1,
    "10**30": 10 ** 30,
    "numpy uint64 max": np.uint64(2 ** 64 - 1),
    "float 1e19": 1e19,
}


@pytest.mark.parametrize("step", list(OUT_OF_RANGE_STEPS.values()), ids=list(OUT_OF_RANGE_STEPS))
def test_log_step_beyond_int64_is_refused(root, step):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    log_window(run)
    with pytest.raises(trackstore.InvalidValueError, match=r"step .*64-bit"):
        run.log({"a": 1.0}, step=step)
    assert run.step == 199
    finish_cleanly(run)
    assert stored(root, "SELECT count(*), max(step) FROM metrics") == [(199, 198)]
    assert json.loads(run.paths.run_file.read_text())["last_step"] == 198


def test_int64_bounds_are_steps_and_the_counter_stops_at_the_top(root):
    """Negative steps are allowed (down to -2**63); the counter never passes 2**63-1."""
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log({"a": 1.0}, step=INT64_MIN)
    run.log({"a": 2.0}, step=-1)
    run.log({"a": 3.0}, step=INT64_MAX)  # commit: the counter would become 2**63
    assert run.step == INT64_MAX
    run.log({"a": 4.0})
    run.log_samples([{"input": "q", "output": "a"}])
    with run.trace() as tr:
        with tr.span("s"):
            pass
    finish_cleanly(run)
    assert stored(root, "SELECT step, value FROM metrics ORDER BY seq") == [
        (INT64_MIN, 1.0), (-1, 2.0), (INT64_MAX, 3.0), (INT64_MAX, 4.0)]
    assert stored(root, "SELECT step FROM samples UNION ALL SELECT DISTINCT step FROM spans") == [
        (INT64_MAX,), (INT64_MAX,)]
    assert json.loads(run.paths.run_file.read_text())["last_step"] == INT64_MAX
    for args in (("runs",), ("sql", "SELECT 1")):
        res = run_cli(*args, root=root)
        assert res.returncode == 0, res.stderr


def test_a_run_resumed_at_the_int64_maximum_keeps_logging(root):
    run = trackstore.init("p", root=root, run_id="top", flush_interval=WINDOW)
    run.log({"a": 1.0}, step=INT64_MAX)
    finish_cleanly(run)
    run = trackstore.init("p", root=root, run_id="top", resume=True, flush_interval=WINDOW)
    assert run.step == INT64_MAX
    run.log({"a": 2.0})
    run.log_samples([("q", "a")])
    finish_cleanly(run)
    assert stored(root, "SELECT step, value FROM metrics ORDER BY value") == [(INT64_MAX, 1.0), (INT64_MAX, 2.0)]
    assert stored(root, "SELECT step FROM samples") == [(INT64_MAX,)]


# ---------------------------------------------------------------------- samples
@pytest.mark.parametrize("kw,row,why", [
    ({"step": 2 ** 63}, {}, r"step .*64-bit"),
    ({"step": np.uint64(2 ** 64 - 1)}, {}, r"step .*64-bit"),
    ({}, {"sample_index": 2 ** 63}, r"sample row 1: sample_index .*64-bit"),
    ({}, {"sample_index": INT64_MIN - 1}, r"sample row 1: sample_index .*64-bit"),
    ({}, {"score": BIG}, r"sample row 1: score .*too large for a float64"),
    ({}, {"score": np.array(-BIG, dtype=object)}, r"sample row 1: score .*too large for a float64"),
], ids=["step", "numpy-step", "index", "negative-index", "score", "object-score"])
def test_bad_sample_fields_are_refused_at_the_call(root, kw, row, why):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log_samples([{"input": "q", "output": str(i)} for i in range(199)], step=0)
    with pytest.raises(trackstore.InvalidValueError, match=why):
        run.log_samples([{"input": "q", "output": "ok"}, {"input": "q", "output": "bad", **row}], **{"step": 0, **kw})
    run.log_samples([{"input": "q", "output": "later"}], step=0)
    finish_cleanly(run)
    assert stored(root, "SELECT count(*), max(sample_index) FROM samples") == [(200, 199)]


def test_sample_index_at_int64_max_leaves_no_automatic_index(root):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log_samples([{"input": "q", "output": "top", "sample_index": INT64_MAX}], step=3)
    with pytest.raises(trackstore.InvalidValueError, match="sample_index"):
        run.log_samples([{"input": "q", "output": "next"}], step=3)
    run.log_samples([{"input": "q", "output": "own", "sample_index": 5}], step=3)
    run.log_samples([{"input": "q", "output": "other step"}], step=4)
    finish_cleanly(run)
    assert stored(root, "SELECT step, sample_index, output FROM samples ORDER BY seq") == [
        (3, INT64_MAX, "top"), (3, 5, "own"), (4, 0, "other step")]


def test_a_row_index_below_the_counter_does_not_move_it_back(root):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log_samples([("q", "a"), ("q", "b"), ("q", "c")], step=1)
    run.log_samples([{"input": "q", "output": "again", "sample_index": 0}, ("q", "next")], step=1)
    finish_cleanly(run)
    assert stored(root, "SELECT sample_index, output FROM samples ORDER BY seq") == [
        (0, "a"), (1, "b"), (2, "c"), (0, "again"), (3, "next")]


# ---------------------------------------------------------------------- traces
@pytest.mark.parametrize("kw,why", [
    ({"step": 2 ** 63}, r"step .*64-bit"),
    ({"step": INT64_MIN - 1}, r"step .*64-bit"),
    ({"sample_index": 2 ** 63}, r"sample_index .*64-bit"),
    ({"rollout_n": np.uint64(2 ** 64 - 1)}, r"rollout_n .*64-bit"),
    ({"reward": BIG}, r"trace reward.*too large for a float64"),
], ids=["step", "negative-step", "sample_index", "rollout_n", "reward"])
def test_bad_trace_fields_are_refused_at_the_call(root, kw, why):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    for i in range(100):
        with run.trace(step=0, sample_index=i) as tr:
            with tr.span("turn", kind="llm"):
                pass
    with pytest.raises(trackstore.InvalidValueError, match=why):
        run.trace(**kw)
    with run.trace(step=INT64_MAX, sample_index=INT64_MIN, rollout_n=INT64_MAX) as tr:
        with pytest.raises(trackstore.InvalidValueError, match="trace reward"):
            tr.set_reward(-BIG)
    finish_cleanly(run)
    assert stored(root, "SELECT count(*) FROM spans") == [(201,)]
    assert stored(root, "SELECT step, sample_index, rollout_n FROM spans WHERE step <> 0") == [
        (INT64_MAX, INT64_MIN, INT64_MAX)]


def test_span_takes_inputs_outputs_and_attributes_on_traces_and_spans(root):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    with run.trace(step=1) as tr:
        with tr.span("assistant", kind="llm", inputs="q", outputs="a", attributes={"t": 1}) as s:
            with s.span("tool", kind="tool", inputs={"x": 1}, outputs=[2], attributes={"u": 2}):
                pass
    finish_cleanly(run)
    assert stored(root, "SELECT name, inputs, outputs, attributes FROM spans WHERE name <> 'episode' "
                        "ORDER BY name") == [("assistant", '"q"', '"a"', '{"t":1}'),
                                             ("tool", '{"x":1}', "[2]", '{"u":2}')]


# ---------------------------------------------------------------------- artifacts
def test_artifact_step_beyond_int64_is_refused(root, tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"weights")
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log_artifact(f, name="a", step=1)
    with pytest.raises(trackstore.InvalidValueError, match=r"step .*64-bit"):
        run.log_artifact(f, name="b", step=2 ** 63)
    run.log_artifact(f, name="c", step=INT64_MIN)
    finish_cleanly(run)
    assert stored(root, "SELECT name, step FROM artifacts ORDER BY name") == [("a", 1), ("c", INT64_MIN)]


# ---------------------------------------------------------------------- histograms
@pytest.mark.parametrize("values", [
    [1e308, -1e308],
    [-1.7976931348623157e308, 1.7976931348623157e308, 0.0],
    [1.7e308] * 5,
    [1e308, 1.7e308, 1.5e308],
    [-1e308, 1e-320, 5e-324],
    [1e16, 1e16],
    [2.0 ** 60] * 3,
], ids=["symmetric", "float-max", "constant-huge", "all-huge", "huge-and-subnormal", "constant-1e16", "constant-2**60"])
def test_histogram_of_extreme_values_is_finite_and_binned(values):
    finite = [v for v in values if math.isfinite(v)]
    for h in (Histogram(values, bins=8), Histogram(np.asarray(values), bins=8)):
        assert all(math.isfinite(x) for x in [*h.edges, h.mean, h.std, h.min, h.max])
        assert sum(h.counts) == len(finite) == h.count and (h.nan_count, h.inf_count) == (0, 0)
        assert h.edges[0] <= min(finite) and h.edges[-1] >= max(finite)
        assert all(a <= b for a, b in zip(h.edges, h.edges[1:]))
        assert (h.min, h.max) == (min(finite), max(finite))
        assert h.mean == pytest.approx(math.fsum(v / len(finite) for v in finite), rel=1e-12)


def test_histogram_extreme_values_without_numpy_match_the_numpy_path():
    cases = [[1e308, -1e308], [1.7e308] * 3, [1e16, 1e16], [-1e308, 1e-320, 5e-324, 3e307], [1.0, math.nan, 2.0]]
    code = (
        "import sys, json; sys.modules['numpy'] = None\n"
        "from trackstore.records.histogram import Histogram\n"
        "out = []\n"
        "for v in json.loads(sys.argv[1]):\n"
        "    h = Histogram(v, bins=8)\n"
        "    out.append([h.counts, h.edges, h.count, h.mean, h.std])\n"
        "print(json.dumps(out))"
    )
    res = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True, check=True)
    for values, (counts, edges, count, mean, std) in zip(cases, json.loads(res.stdout)):
        h = Histogram(np.asarray(values), bins=8)
        assert counts == h.counts and count == h.count
        assert edges == pytest.approx(h.edges, rel=1e-12)
        assert mean == pytest.approx(h.mean, rel=1e-12) and std == pytest.approx(h.std, rel=1e-12)
        assert all(math.isfinite(x) for x in [*edges, mean, std])


def test_histogram_extreme_values_match_a_scaled_numpy_histogram():
    values = np.array([1e308, -1e308, 5e307, 0.0, -3e307, 1.7e308])
    h = Histogram(values, bins=4)
    counts, edges = np.histogram(values / 4, bins=4)
    assert h.counts == counts.astype(float).tolist() and h.edges == (edges * 4).tolist()
    assert h.std == pytest.approx(math.ldexp(float(np.std(np.ldexp(values, -1024))), 1024))


def test_histogram_nan_and_inf_are_counted_not_binned(root):
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log({"h": Histogram([1.0, math.nan, math.inf, -math.inf, 2.0, 1e308, -1e308])}, step=1)
    run.log({"h": Histogram([math.nan, math.inf])}, step=2)
    finish_cleanly(run)
    assert stored(root, "SELECT step, count, nan_count, inf_count, isfinite(min) FROM histograms ORDER BY step") == [
        (1, 4, 1, 2, True), (2, 0, 1, 1, None)]


@pytest.mark.parametrize("make,why", [
    (lambda: Histogram([1.0, BIG]), "too large for a float64"),
    (lambda: Histogram(np.array([1, BIG], dtype=object)), "too large for a float64"),
    (lambda: Histogram(counts=[1e19], edges=[0.0, 1.0]), "64-bit"),
    (lambda: Histogram(counts=[1e308, 1e308], edges=[0.0, 1.0, 2.0]), "64-bit"),
], ids=["huge-int", "object-array", "count-beyond-int64", "count-sum-overflows"])
def test_histogram_values_the_store_cannot_hold_are_refused(make, why):
    with pytest.raises(trackstore.InvalidValueError, match=why):
        make()


def test_histogram_from_extreme_edges_has_finite_statistics(root):
    h = Histogram(counts=[1, 1], edges=[-1.7e308, 0.0, 1.7e308])
    assert h.mean == 0.0 and h.std == pytest.approx(0.85e308)
    g = Histogram(counts=[2, 1], edges=[1e308, 1.5e308, 1.7e308])
    assert math.isfinite(g.mean) and math.isfinite(g.std) and 1e308 < g.mean < 1.7e308
    run = trackstore.init("p", root=root, flush_interval=WINDOW)
    run.log({"h": h, "g": g}, step=0)
    finish_cleanly(run)
    assert stored(root, "SELECT count(*) FROM histograms") == [(2,)]
