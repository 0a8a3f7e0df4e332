"""The real Lightning ``Trainer`` fits a tiny module with :class:`TrackstoreLogger` beside Lightning's
own ``CSVLogger``; the store holds exactly what the CSV logger was given."""

from __future__ import annotations

import csv

import pytest

pytest.importorskip("torch", reason="torch is not installed (run `make test-frameworks`)")
L = pytest.importorskip("lightning.pytorch", reason="lightning is not installed (run `make test-frameworks`)")

import torch  # noqa: E402
from lightning.pytorch.loggers import CSVLogger  # noqa: E402

from trackstore.integrations.lightning import TrackstoreLogger  # noqa: E402

from .store_read import checkpoints, only_run, rows  # noqa: E402


class Tiny(L.LightningModule):
    def __init__(self, lr: float = 0.05, hidden: int = 4, fail_at: int | None = None):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(2, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, i):
        if self.hparams.fail_at is not None and self.global_step == self.hparams.fail_at:
            raise RuntimeError("diverged")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 2, generator=g)
    y = x.sum(dim=1, keepdim=True)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)


def trainer(tmp_path, loggers, **kw):
    return L.Trainer(max_epochs=2, logger=loggers, accelerator="cpu", devices=1, log_every_n_steps=1,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=str(tmp_path), **kw)


def test_fit_logs_what_lightning_logged(root, tmp_path):
    ts = TrackstoreLogger(project="pl-test", name="tiny", root=root)
    csv_logger = CSVLogger(str(tmp_path / "csv"), name="tiny")
    trainer(tmp_path, [ts, csv_logger]).fit(Tiny(), loader(), loader())

    info = only_run(root, "pl-test")
    assert info.status == "finished" and info.name == "tiny" and ts.version == info.run_id
    assert info.meta["config"] == {"lr": 0.05, "hidden": 4, "fail_at": None}
    with open(csv_logger.log_dir + "/metrics.csv") as f:
        want = sorted((int(r["step"]), k, float(v)) for r in csv.DictReader(f) for k, v in r.items()
                      if k != "step" and v != "")
    got = sorted((r["step"], r["key"], r["value"]) for r in rows(info, "metrics"))
    assert [(s, k) for s, k, _ in got] == [(s, k) for s, k, _ in want]
    assert [v for *_, v in got] == pytest.approx([v for *_, v in want], rel=1e-6)
    assert {k for _, k, _ in got} >= {"train/loss", "val/loss", "epoch"}
    assert not (root / "tiny").exists()  # checkpoints and logs of other loggers stay out of the store


def test_checkpoints_by_reference_with_best_moving(root, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    ts = TrackstoreLogger(project="pl-ckpt", root=root, log_checkpoints=True)
    saver = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), monitor="val/loss", save_top_k=-1,
                            filename="e{epoch}-s{step}", auto_insert_metric_name=False)
    t = L.Trainer(max_epochs=3, logger=ts, accelerator="cpu", devices=1, log_every_n_steps=1, callbacks=[saver],
                  enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    t.fit(Tiny(), loader(), loader())

    info = only_run(root, "pl-ckpt")
    versions, holders = checkpoints(info)
    files = sorted(str(p) for p in (tmp_path / "ckpt").glob("*.ckpt"))
    assert sorted(v.source for v in versions) == files and len(files) == 3
    assert all(v.storage == "reference" and v.type == "model" for v in versions)
    by_source = {v.source: v for v in versions}
    assert holders["best"] == by_source[saver.best_model_path].version
    assert holders["latest"] == max(v.version for v in versions)
    for path, score in saver.best_k_models.items():  # the monitored value of each, as metadata
        assert by_source[path].metadata["metrics"]["val/loss"] == pytest.approx(float(score))
    assert sorted(v.step for v in versions) == [4, 8, 12]  # 4 batches an epoch


def test_failed_fit_marks_the_run_failed(root, tmp_path):
    ts = TrackstoreLogger(project="pl-test", root=root)
    with pytest.raises(RuntimeError, match="diverged"):
        trainer(tmp_path, ts).fit(Tiny(fail_at=2), loader())
    info = only_run(root, "pl-test")
    assert info.status == "failed"
    assert sorted({r["step"] for r in rows(info, "metrics")}) == [0, 1]


def test_save_is_called_after_every_log_and_costs_no_write(root, tmp_path, monkeypatch):
    ts = TrackstoreLogger(project="pl-test", root=root)
    calls = []
    original_flush = type(ts.experiment).flush
    monkeypatch.setattr(type(ts.experiment), "flush", lambda self: calls.append(1) or original_flush(self))
    saves = []
    our_save = ts.save
    monkeypatch.setattr(ts, "save", lambda: saves.append(1) or our_save())
    trainer(tmp_path, ts).fit(Tiny(), loader())
    assert len(saves) >= 8 and calls == []  # Lightning saved after each log; nothing flushed synchronously


def test_other_ranks_write_nothing(root, monkeypatch):
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 1)  # what Lightning sets in a rank-1 process
    ts = TrackstoreLogger(project="pl-test", root=root)
    ts.log_hyperparams({"lr": 0.1})
    ts.log_metrics({"loss": 1.0}, step=0)
    ts.save()
    ts.finalize("success")
    assert not any(root.iterdir())
