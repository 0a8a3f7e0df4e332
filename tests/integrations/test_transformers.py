"""The real Transformers ``Trainer`` (and TRL's ``GRPOTrainer``) with :class:`TrackstoreCallback`:
a tiny randomly initialised model built from a config (no downloads) trains for a few steps."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="torch is not installed (run `make test-frameworks`)")
pytest.importorskip("transformers", reason="transformers is not installed (run `make test-frameworks`)")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments  # noqa: E402

from trackstore.integrations.transformers import TrackstoreCallback  # noqa: E402

from .store_read import checkpoints, only_run, rows  # noqa: E402

VOCAB = 32


def tiny_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(cfg)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, VOCAB, (n, 8), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


def test_trainer_logs_metrics_config_eval_and_finishes(root, tmp_path):
    model = tiny_model()
    args = TrainingArguments(output_dir=str(tmp_path / "out"), run_name="tiny-llama", max_steps=4, logging_steps=1,
                             eval_strategy="steps", eval_steps=2, per_device_train_batch_size=4,
                             per_device_eval_batch_size=4, learning_rate=1e-3, report_to="none", use_cpu=True,
                             save_strategy="no", disable_tqdm=True)
    cb = TrackstoreCallback(project="hf-test", root=root)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(16), eval_dataset=Tokens(8), callbacks=[cb])
    trainer.train()

    info = only_run(root, "hf-test")
    assert info.name == "tiny-llama" and info.status == "finished"
    cfg = info.meta["config"]
    assert cfg["learning_rate"] == 1e-3 and cfg["max_steps"] == 4  # training arguments
    assert cfg["hidden_size"] == 16 and cfg["model_type"] == "llama"  # model config
    got = rows(info, "metrics")
    by_key: dict[str, list[int]] = {}
    for r in got:
        by_key.setdefault(r["key"], []).append(r["step"])
    assert sorted(by_key["train/loss"]) == [1, 2, 3, 4]
    assert sorted(by_key["eval/loss"]) == [2, 4]
    assert "train/learning_rate" in by_key and "train/grad_norm" in by_key
    history = {log["step"]: log for log in trainer.state.log_history if "loss" in log}
    for r in got:
        if r["key"] == "train/loss":
            assert r["value"] == pytest.approx(history[r["step"]]["loss"])
    assert "train/train_runtime" not in by_key and "train_runtime" in info.meta["summary"]
    assert info.meta["summary"]["train_loss"] == pytest.approx(trainer.state.log_history[-1]["train_loss"])

    # evaluate() after training continues the same run instead of losing the metrics
    trainer.evaluate()
    info = only_run(root, "hf-test")
    assert info.status == "finished"
    assert sorted(r["step"] for r in rows(info, "metrics") if r["key"] == "eval/loss") == [2, 4, 4]


def test_checkpoints_by_reference_with_best_moving(root, tmp_path):
    out = tmp_path / "out"
    args = TrainingArguments(output_dir=str(out), run_name="ckpt", max_steps=6, logging_steps=1,
                             eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
                             load_best_model_at_end=True, metric_for_best_model="eval_loss",
                             per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=1e-3,
                             report_to="none", use_cpu=True, disable_tqdm=True)
    cb = TrackstoreCallback(project="hf-ckpt", root=root, log_checkpoints=True)
    trainer = Trainer(model=tiny_model(), args=args, train_dataset=Tokens(16), eval_dataset=Tokens(8), callbacks=[cb])
    trainer.train()

    info = only_run(root, "hf-ckpt")
    versions, holders = checkpoints(info)
    assert [(v.version, v.step, v.storage, v.source) for v in versions] == [
        (i, s, "reference", str(out / f"checkpoint-{s}")) for i, s in enumerate((2, 4, 6))]
    best_step = int(trainer.state.best_model_checkpoint.rsplit("-", 1)[1])
    assert holders == {"latest": 2, "step-2": 0, "step-4": 1, "step-6": 2, "best": (2, 4, 6).index(best_step)}
    evals = {log["step"]: log["eval_loss"] for log in trainer.state.log_history if "eval_loss" in log}
    assert versions[1].metadata["metrics"]["eval/loss"] == pytest.approx(evals[4])
    assert {f.logical_path for f in versions[0].files} >= {"model.safetensors", "trainer_state.json"}


def test_only_the_main_process_logs(root, tmp_path):
    from transformers import TrainerControl, TrainerState

    cb = TrackstoreCallback(project="hf-test", root=root)
    state = TrainerState(is_world_process_zero=False, global_step=1)
    args = TrainingArguments(output_dir=str(tmp_path / "o"), report_to="none", use_cpu=True)
    cb.on_train_begin(args, state, TrainerControl(), model=tiny_model())
    cb.on_log(args, state, TrainerControl(), logs={"loss": 1.0})
    cb.on_train_end(args, state, TrainerControl())
    assert not any(root.iterdir())


def test_trl_grpo_completions_become_samples(root, tmp_path):
    pytest.importorskip("trl", reason="trl is not installed")
    datasets = pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    words = ["<pad>", "<eos>", "<unk>"] + [f"w{i}" for i in range(VOCAB - 3)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    model = tiny_model()
    model.config.pad_token_id, model.config.eos_token_id = 0, 1
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 1

    def length_reward(completions, **kwargs):
        return [float(len(c.split())) for c in completions]

    prompts = datasets.Dataset.from_dict({"prompt": ["w1 w2", "w3 w4", "w5 w6", "w7 w8"]})
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), run_name="grpo-tiny", max_steps=2, logging_steps=1,
                      per_device_train_batch_size=2, num_generations=2, max_completion_length=4,
                      log_completions=True, report_to="none", use_cpu=True, save_strategy="no",
                      disable_tqdm=True, learning_rate=1e-3)
    cb = TrackstoreCallback(project="trl-test", root=root)
    trainer = GRPOTrainer(model=model, reward_funcs=length_reward, args=args, train_dataset=prompts,
                          processing_class=tokenizer, callbacks=[cb])
    trainer.train()

    info = only_run(root, "trl-test")
    keys = {r["key"] for r in rows(info, "metrics")}
    assert {"train/reward", "train/loss"} <= keys
    samples = rows(info, "samples")
    import pyarrow.parquet as pq

    written = []
    for path in sorted((tmp_path / "grpo" / "completions").glob("*.parquet")):
        written += pq.read_table(path).to_pylist()
    assert written and len(samples) == len(written)
    got = sorted((s["step"], s["input"], s["output"], s["score"]) for s in samples)
    want = sorted((w["step"], w["prompt"], w["completion"], w["length_reward"]) for w in written)
    assert got == want


def test_report_to_trackstore_after_register(root, tmp_path, monkeypatch):
    from trackstore.integrations.transformers import register_report_to

    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    monkeypatch.setenv("TRACKSTORE_PROJECT", "hf-report-to")
    register_report_to()
    args = TrainingArguments(output_dir=str(tmp_path / "run-a"), max_steps=2, logging_steps=1,
                             per_device_train_batch_size=4, report_to=["trackstore"], use_cpu=True,
                             save_strategy="no", disable_tqdm=True)
    Trainer(model=tiny_model(), args=args, train_dataset=Tokens(8)).train()
    info = only_run(root, "hf-report-to")
    assert info.name == "run-a" and info.status == "finished"
    assert sorted(r["step"] for r in rows(info, "metrics") if r["key"] == "train/loss") == [1, 2]
