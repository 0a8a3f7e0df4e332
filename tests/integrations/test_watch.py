"""``trackstore.watch(model)`` on a real CPU torch module: gradient and parameter histograms land
at the step of the metrics that follow, every ``every``-th pass, and stop once the hooks are removed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="torch is not installed (run `make test-frameworks`)")

import torch  # noqa: E402

import trackstore  # noqa: E402

from .store_read import only_run, rows  # noqa: E402


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def train(run, model, steps: int, first: int = 0) -> dict:
    """SGD steps; returns, per step, the gradients and the parameters the forward pass saw."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: dict = {}
    for step in range(first, first + steps):
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        loss = model(torch.randn(16, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        run.log({"loss": loss.item()}, step=step)
        seen[step] = (params, grads)
    return seen


def hists(root) -> dict:
    return {(r["step"], r["key"]): r for r in rows(only_run(root), "histograms")}


def assert_matches(row: dict, tensor: torch.Tensor) -> None:
    t = tensor.double().flatten()
    assert row["count"] == t.numel() and sum(row["counts"]) == t.numel()
    assert row["min"] == pytest.approx(t.min().item()) and row["max"] == pytest.approx(t.max().item())
    assert row["mean"] == pytest.approx(t.mean().item())
    assert row["nan_count"] == 0 and row["inf_count"] == 0


def test_gradients_only(root):
    model = tiny_model()
    run = trackstore.init("p", root=root)
    handle = trackstore.watch(model, log="gradients", every=2, bins=16)
    seen = train(run, model, 4)
    run.finish()
    handle.remove()
    got = hists(root)
    names = [n for n, _ in model.named_parameters()]
    assert set(got) == {(s, f"gradients/{n}") for s in (0, 2) for n in names}  # no parameters/*
    for (step, key), row in got.items():
        assert len(row["counts"]) == 16
        assert_matches(row, seen[step][1][key.removeprefix("gradients/")])
    metrics = rows(only_run(root), "metrics")
    assert sorted(r["step"] for r in metrics) == [0, 1, 2, 3]  # commit=False: no extra steps


@pytest.mark.parametrize("log", ["parameters", "all"])
def test_parameters_and_all(root, log):
    model = tiny_model()
    model[2].bias.requires_grad_(False)  # frozen: its parameters are logged, it has no gradient
    run = trackstore.init("p", root=root)
    handle = trackstore.watch(model, log=log, every=2)
    seen = train(run, model, 4)
    handle.remove()
    loss = model(torch.randn(16, 4)).pow(2).mean()
    loss.backward()  # no hooks any more: nothing logged
    run.log({"loss": loss.item()}, step=4)
    run.finish()
    got = hists(root)
    names = [n for n, _ in model.named_parameters()]
    expected = {(s, f"parameters/{n}") for s in (0, 2) for n in names}
    if log == "all":
        expected |= {(s, f"gradients/{n}") for s in (0, 2) for n in names if n != "2.bias"}
    assert set(got) == expected
    for (step, key), row in got.items():
        kind, name = key.split("/", 1)
        params, grads = seen[step]
        assert_matches(row, params[name] if kind == "parameters" else grads[name])
    assert got[(0, "parameters/0.weight")]["count"] == 32


def test_unwatch_and_rewatch_replace_hooks(root):
    model = tiny_model()
    run = trackstore.init("p", root=root)
    trackstore.watch(model, log="all", every=1)
    trackstore.watch(model, log="gradients", every=1)  # replaces the first hooks: no parameters/*
    train(run, model, 1)
    from trackstore.integrations.watch import unwatch

    unwatch(model)
    train(run, model, 1, first=1)
    run.finish()
    keys = set(hists(root))
    assert keys == {(0, f"gradients/{n}") for n, _ in model.named_parameters()}
