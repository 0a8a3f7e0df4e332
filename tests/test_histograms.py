"""Histograms: binning (numpy and pure Python agree), storage round-trip, and watch()'s argument checks.

watch() on a real torch module is tested in tests/integrations/test_watch.py (make test-frameworks)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.records.histogram import Histogram


def read_hists(run) -> list[dict]:
    return sorted(pq.read_table(run.dir / "histograms").to_pylist(), key=lambda r: r["seq"])


def test_values_binned_like_numpy():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    values = rng.normal(size=10_000)
    h = Histogram(values, bins=32)
    counts, edges = np.histogram(values, bins=32)
    assert h.counts == counts.astype(float).tolist()
    assert h.edges == pytest.approx(edges.tolist())
    assert h.count == 10_000 and h.min == values.min() and h.max == values.max()
    assert h.mean == pytest.approx(values.mean()) and h.std == pytest.approx(values.std())


def test_pure_python_path_matches_numpy_path():
    # Run the same histogram in a child where numpy cannot be imported, and compare.
    values = [((i * 37) % 101) / 7.0 - 3 for i in range(1000)] + [float("nan"), float("inf"), -float("inf")]
    code = (
        "import sys, json; sys.modules['numpy'] = None\n"
        "from trackstore.records.histogram import Histogram\n"
        "h = Histogram(json.loads(sys.argv[1]), bins=16)\n"
        "print(json.dumps([h.counts, h.edges, h.count, h.nan_count, h.inf_count, h.mean, h.std]))"
    )
    out = subprocess.run([sys.executable, "-c", code, json.dumps(values)], capture_output=True, text=True,
                         check=True).stdout
    py = json.loads(out)
    h = Histogram(values, bins=16)
    assert py[0] == h.counts and py[1] == pytest.approx(h.edges)
    assert py[2:5] == [h.count, h.nan_count, h.inf_count] == [1000, 1, 2]
    assert py[5] == pytest.approx(h.mean) and py[6] == pytest.approx(h.std)


def test_nan_inf_constant_and_empty():
    h = Histogram([1.0, float("nan"), float("inf"), 1.0])
    assert (h.count, h.nan_count, h.inf_count) == (2, 1, 1)
    assert sum(h.counts) == 2 and h.min == h.max == 1.0 and h.edges[0] == 0.5 and h.edges[-1] == 1.5
    e = Histogram([float("nan")])
    assert e.count == 0 and e.nan_count == 1 and e.min is None and e.counts == [0.0]
    nested = Histogram([[1, 2], [3, 4, 5]], bins=4)  # ragged lists flatten
    assert nested.count == 5


def test_counts_and_edges_and_errors():
    h = Histogram(counts=[1, 3, 0], edges=[0, 1, 2, 3])
    assert h.count == 4 and h.min == 0 and h.max == 3 and h.mean == pytest.approx(1.25)
    with pytest.raises(ValueError, match="len\\(counts\\)\\+1"):
        Histogram(counts=[1, 2], edges=[0, 1])
    with pytest.raises(ValueError, match="non-decreasing"):
        Histogram(counts=[1, 2], edges=[0, 2, 1])
    with pytest.raises(ValueError, match=">= 0"):
        Histogram(counts=[-1], edges=[0, 1])
    with pytest.raises(ValueError, match="bins"):
        Histogram([1, 2], bins=0)
    with pytest.raises(ValueError, match="either values"):
        Histogram()
    with pytest.raises(ValueError, match="numbers"):
        Histogram(["a", "b"])


def test_duck_typed_tensor():
    np = pytest.importorskip("numpy")

    class FakeTensor:  # the attribute surface of a CUDA torch tensor, without torch
        def __init__(self, a):
            self.a = a

        def detach(self):
            return self

        def cpu(self):
            return self

        def numpy(self):
            return self.a

    h = Histogram(FakeTensor(np.arange(10, dtype=np.float32).reshape(2, 5)), bins=5)
    assert h.counts == [2.0] * 5 and h.count == 10


def test_log_roundtrip(root):
    run = trackstore.init("p", root=root)
    run.log({"grad/w": Histogram([0.0, 1.0, 2.0, float("nan")], bins=2), "loss": 1.0}, step=3)
    run.log({"grad": {"b": Histogram(counts=[5], edges=[-1, 1])}}, step=4)
    run.finish()
    rows = read_hists(run)
    assert [(r["step"], r["key"]) for r in rows] == [(3, "grad/w"), (4, "grad/b")]
    assert rows[0]["counts"] == [1.0, 2.0] and rows[0]["edges"] == [0.0, 1.0, 2.0]
    assert rows[0]["nan_count"] == 1 and rows[0]["count"] == 3 and rows[0]["mean"] == 1.0
    assert rows[1]["nan_count"] is None and rows[1]["count"] == 5
    back = Histogram.from_row(rows[0])
    assert back.counts == [1.0, 2.0] and back.nan_count == 1 and math.isclose(back.std, rows[0]["std"])
    metrics = pq.read_table(run.dir / "metrics").to_pylist()
    assert [(m["step"], m["key"]) for m in metrics] == [(3, "loss")]


def test_hard_values_roundtrip_through_sql(root):
    logged = {"梯度/层": Histogram([0.5, 1.5, 1.5, float("inf")], bins=2), "empty": Histogram([]),
              "only_nan": Histogram([float("nan")] * 3), "precomputed/零": Histogram(counts=[0, 0], edges=[-1, 0, 1])}
    run = trackstore.init("p", root=root)
    run.log(logged, step=2)
    run.finish()
    con = trackstore.connect(root)
    got = {r[0]: r[1:] for r in con.execute(
        "SELECT key, step, edges, counts, count, min, max, mean, std, nan_count, inf_count FROM histograms").fetchall()}
    assert got == {
        "梯度/层": (2, [0.5, 1.0, 1.5], [1.0, 2.0], 3, 0.5, 1.5, pytest.approx(7 / 6),
                  pytest.approx(math.sqrt(2) / 3), 0, 1),
        "empty": (2, [0.0, 1.0], [0.0], 0, None, None, None, None, 0, 0),
        "only_nan": (2, [0.0, 1.0], [0.0], 0, None, None, None, None, 3, 0),
        "precomputed/零": (2, [-1.0, 0.0, 1.0], [0.0, 0.0], 0, -1.0, 1.0, None, None, None, None),
    }
    assert con.execute("SELECT count(*) FROM histograms WHERE key LIKE '梯度/%'").fetchone() == (1,)
    # ...and Histogram.from_row gives back what was logged, empty ones included
    for row in read_hists(run):
        back, orig = Histogram.from_row(row), logged[row["key"]]
        assert [getattr(back, f) for f in Histogram.__slots__] == [getattr(orig, f) for f in Histogram.__slots__]
    empty = next(Histogram.from_row(r) for r in read_hists(run) if r["key"] == "empty")
    assert empty.count == 0 and empty.min is None and empty.max is None
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (0,)  # histograms are not metrics


def test_watch_bad_arguments(root):
    run = trackstore.init("p", root=root)

    class NotAModule:
        pass

    with pytest.raises(ValueError, match="torch.nn.Module"):
        trackstore.watch(NotAModule(), run=run)
    with pytest.raises(ValueError, match="log="):
        trackstore.watch(NotAModule(), log="weights", run=run)
    run.finish()


def test_watch_callable_after_submodule_import():
    # importing the watch submodule first must not shadow the function trackstore.watch
    code = ("import trackstore\nfrom trackstore.integrations.watch import unwatch\n"
            "try:\n    trackstore.watch(object())\nexcept ValueError as e:\n    print('ValueError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ValueError watch expects a torch.nn.Module")
