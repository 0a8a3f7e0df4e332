"""Histograms: binning (numpy and pure Python agree), storage round-trip, and torch's watch()."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.histogram import Histogram


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
        "from trackstore.histogram import Histogram\n"
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


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed in this environment (trackstore never depends on it); "
                    "install the CPU build to run the watch() test")
    import torch

    return torch


def test_watch_logs_gradients_and_parameters(root):
    torch = _torch()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = trackstore.init("p", root=root)
    handle = trackstore.watch(model, log="all", every=2)
    for step in range(4):
        loss = model(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        run.log({"loss": loss.item()}, step=step)
    handle.remove()
    loss = model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()  # no hooks any more: nothing logged
    run.log({"loss": loss.item()}, step=4)
    run.finish()
    rows = read_hists(run)
    keys = {(r["step"], r["key"]) for r in rows}
    names = [n for n, _ in model.named_parameters()]
    for step in (0, 2):
        for n in names:
            assert (step, f"gradients/{n}") in keys and (step, f"parameters/{n}") in keys
    assert not any(s in (1, 3, 4) for s, _ in keys)
    w = next(r for r in rows if r["key"] == "parameters/0.weight" and r["step"] == 0)
    assert w["count"] == 32


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
    # `from trackstore.watch import ...` first binds the submodule as trackstore.watch
    code = ("import trackstore\nfrom trackstore.watch import unwatch\n"
            "try:\n    trackstore.watch(object())\nexcept ValueError as e:\n    print('ValueError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ValueError watch expects a torch.nn.Module")
