"""verl, for real: its plugin loading, its ``Tracking`` class, its validation-generations logger
and its rollout-trace functions write into a trackstore store, and the store holds exactly what
was logged. Runs in the framework environment (``make test-frameworks``); skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl", reason="verl is not installed (run `make test-frameworks`)")

import numpy as np  # noqa: E402
import verl  # noqa: E402  (loads the verl.plugins entry points, as every verl process does)
from verl.utils import rollout_trace  # noqa: E402
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op  # noqa: E402
from verl.utils.tracking import Tracking, ValidationGenerationsLogger  # noqa: E402

from trackstore.integrations import verl as ts_verl  # noqa: E402

from .store_read import checkpoints, only_run, rows, spans  # noqa: E402


@pytest.fixture
def store(root, monkeypatch):
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    RolloutTraceConfig.reset()
    yield root
    RolloutTraceConfig.reset()


def hydra_config(project: str, experiment: str) -> dict:
    """verl's real PPO trainer config, composed by Hydra and resolved as verl's trainers pass it."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            "algorithm.adv_estimator=grpo", "trainer.logger=[console,trackstore]",
            f"trainer.project_name={project}", f"trainer.experiment_name={experiment}",
        ])
    return OmegaConf.to_container(cfg, resolve=True)


def test_plugin_entry_point_patches_verl_in_a_fresh_process(tmp_path):
    code = ("import os, verl\nfrom verl.utils.tracking import Tracking\n"
            "print(Tracking.supported_backend.count('trackstore'), os.environ.get('TRACKSTORE_DIR'))")
    env = {k: v for k, v in os.environ.items() if k != "TRACKSTORE_DIR"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    # patched, and the store root pinned (absolute) before verl would start Ray
    assert out.stdout.split()[-2:] == ["1", str(tmp_path / "tsruns")]
    env["VERL_USE_EXTERNAL_PLUGINS"] = "none"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split()[-2:] == ["0", "None"], "with plugins off, verl must be untouched"


def test_install_is_idempotent():
    init_before, finish_before = Tracking.__init__, Tracking.finish
    assert ts_verl.install() is True
    assert ts_verl.install() is True
    assert Tracking.supported_backend.count("trackstore") == 1
    assert Tracking.__init__ is init_before and Tracking.finish is finish_before
    # exactly one layer of wrapping over verl's own functions
    assert not getattr(Tracking.__init__.__trackstore_original__, "__trackstore_patched__", False)
    assert rollout_trace.rollout_trace_op is rollout_trace_op


def test_metrics_config_and_finish_land_exactly(store):
    config = hydra_config("gsm8k_grpo", "qwen_grpo_tiny")
    tracking = Tracking(project_name="gsm8k_grpo", experiment_name="qwen_grpo_tiny",
                        default_backend=config["trainer"]["logger"], config=config)
    logged = {
        0: {"val-core/openai/gsm8k/acc/mean@1": np.float64(0.25)},
        1: {"actor/pg_loss": np.float32(0.5), "actor/entropy": 1.25, "training/global_step": 1,
            "perf/total_num_tokens": np.int64(4096), "critic/vf_explained_var": float("nan")},
        2: {"actor/pg_loss": 0.375, "actor/entropy": np.float64(1.125), "training/global_step": 2,
            "train/total_tokens(B)": 0.001},
    }
    for step, data in logged.items():
        before = dict(data)
        tracking.log(data=data, step=step)
        assert data == before or step == 1  # NaN != NaN; checked by identity below
        assert data.keys() == before.keys() and all(data[k] is before[k] for k in data)
    tracking.finish(exit_code=0)
    tracking.finish(exit_code=0)  # verl guards it; trackstore's finish is idempotent too

    info = only_run(store, "gsm8k_grpo")
    assert info.name == "qwen_grpo_tiny" and info.status == "finished"
    assert info.meta["config"] == config  # the whole resolved Hydra config
    got = {(r["step"], r["key"]): r["value"] for r in rows(info, "metrics")}
    want = {(s, k): float(v) for s, d in logged.items() for k, v in d.items()}
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, nan_ok=True)
    assert len(rows(info, "metrics")) == len(want)  # nothing duplicated


def test_a_value_trackstore_cannot_store_is_skipped_not_raised(store):
    tracking = Tracking("p", "e", ["trackstore"], config={})
    tracking.log(data={"a": 1.0, "note": "text"}, step=1)
    tracking.log(data={"a": 2.0, "note": "text"}, step=2)
    tracking.finish()
    assert sorted((r["step"], r["key"], r["value"]) for r in rows(only_run(store), "metrics")) == [
        (1, "a", 1.0), (2, "a", 2.0)]


def test_legacy_garbage_collection_finish_path(store):
    # verl's legacy trainer never calls finish: the Tracking object is dropped at the end of fit().
    tracking = Tracking("p", "legacy", ["console", "trackstore"], config={"trainer": {}})
    tracking.log(data={"x": 1.0}, step=1)
    del tracking
    gc.collect()
    info = only_run(store)
    assert info.status == "finished"
    assert [(r["step"], r["key"]) for r in rows(info, "metrics")] == [(1, "x")]


def test_failed_training_is_recorded(store):
    tracking = Tracking("p", "boom", ["trackstore"])
    tracking.finish(exit_code=1)
    info = only_run(store)
    assert info.status == "failed" and info.meta["exit_code"] == 1


def test_validation_generations_become_samples(store):
    tracking = Tracking("p", "val", ["console", "trackstore"])
    vgl = ValidationGenerationsLogger(project_name="p", experiment_name="val")
    samples = [("What is 2+2?", "4", np.float32(1.0)), ("日本の首都は?", "東京", 0.0), ("x" * 5000, "", -1.0)]
    vgl.log(["console", "trackstore"], samples, 10)
    vgl.log(["console"], samples, 11)  # trackstore not among the loggers: nothing stored
    tracking.finish()
    got = [(r["step"], r["split"], r["sample_index"], r["input"], r["output"], r["score"])
           for r in rows(only_run(store), "samples")]
    assert got == [(10, "val", i, s[0], s[1], float(s[2])) for i, s in enumerate(samples)]


def test_trainers_own_val_generation_selection_is_stored(store):
    """verl's trainer method picks N samples (sorted, seeded shuffle) and passes its ListConfig
    logger list; exactly those samples are stored."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    tracking = Tracking("p", "legacy-val", ["console", "trackstore"])
    config = OmegaConf.create({"trainer": {"log_val_generations": 3, "logger": ["console", "trackstore"]}})
    captured = []

    class Recording(ValidationGenerationsLogger):
        def log(self, loggers, samples, step):
            captured.append(list(samples))
            return super().log(loggers, samples, step)

    trainer = SimpleNamespace(config=config, global_steps=5,
                              validation_generations_logger=Recording(project_name="p", experiment_name="legacy-val"))
    inputs = [f"question {i}" for i in range(8)]
    RayPPOTrainer._maybe_log_val_generations(trainer, inputs, [f"answer {i}" for i in range(8)],
                                             [float(i) for i in range(8)])
    tracking.finish()
    (chosen,) = captured
    assert len(chosen) == 3
    got = [(r["step"], r["input"], r["output"], r["score"]) for r in rows(only_run(store), "samples")]
    assert got == [(5, i, o, s) for i, o, s in chosen]


# ---------------------------------------------------------------------- rollout traces
class CharTokenizer:
    """A tokenizer that needs no download: token id = code point."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)


TOK = CharTokenizer()


class FakeServer:
    """Stands in for the inference server only; the decorator and its wiring are verl's."""

    def __init__(self):
        self.tokenizer = TOK

    @rollout_trace_op
    async def generate(self, request_id, *, prompt_ids: list[int], sampling_params: dict):
        from verl.workers.rollout.replica import TokenOutput

        await asyncio.sleep(0.01)
        text = "<tool_call>" + '{"name": "calc", "arguments": {"expr": "2+2"}}' + "</tool_call>"
        return TokenOutput(token_ids=TOK.encode(text), stop_reason="completed")


class TinyAgentLoop:
    def __init__(self, tool):
        from verl.experimental.agent_loop.tool_parser import HermesToolParser

        self.server = FakeServer()
        self.tokenizer = TOK
        self.parser = HermesToolParser(TOK)  # verl's real parser; its extract_tool_calls is traced
        self.tool = tool

    @rollout_trace_op
    async def run(self, sampling_params: dict, **kwargs):
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

        prompt_ids = TOK.encode(kwargs["raw_prompt"])
        out = await self.server.generate("req", prompt_ids=prompt_ids, sampling_params=sampling_params)
        content, calls = await self.parser.extract_tool_calls(out.token_ids)
        assert calls and calls[0].name == "calc"
        await self.tool.execute("inst", {"expr": "2+2"})  # verl's BaseTool.execute, traced
        if kwargs.get("fail"):
            raise RuntimeError("reward server down")
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=out.token_ids,
                               response_mask=[1] * len(out.token_ids), num_turns=2, metrics=AgentLoopMetrics())


def make_tool():
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    schema = OpenAIFunctionToolSchema.model_validate({
        "type": "function",
        "function": {"name": "calc", "description": "calculator",
                     "parameters": {"type": "object", "properties": {}, "required": []}},
    })
    return BaseTool(config={}, tool_schema=schema)


async def run_batch(loop: TinyAgentLoop, step: int, n: int, traced: set[int], validate: bool = False):
    async def one(i: int):
        # the same call verl's AgentLoopWorker._run_agent_loop makes
        with rollout_trace_attr(step=np.int64(step), sample_index=i // n, rollout_n=i % n, validate=validate,
                                name="agent_loop", trace=i in traced):
            return await loop.run({"temperature": 1.0}, raw_prompt=f"q{i // n}")

    return await asyncio.gather(*(one(i) for i in range(4)))


def test_traced_async_agent_loop_becomes_span_trees(store):
    tracking = Tracking("gsm8k", "traced", ["console", "trackstore"])
    RolloutTraceConfig.init("gsm8k", "traced", "trackstore", token2text=True)
    loop = TinyAgentLoop(make_tool())
    asyncio.run(run_batch(loop, step=1, n=2, traced={0, 1, 3}))
    asyncio.run(run_batch(loop, step=2, n=2, traced={0, 1, 2, 3}, validate=True))

    async def failing():
        with rollout_trace_attr(step=3, sample_index=7, rollout_n=0, name="agent_loop"):
            await loop.run({}, raw_prompt="q7", fail=True)

    with pytest.raises(RuntimeError, match="reward server down"):
        asyncio.run(failing())
    tracking.finish()

    got = spans(only_run(store))
    roots = [s for s in got if s["parent_span_id"] is None]
    assert sorted((r["step"], r["sample_index"], r["rollout_n"], r["validate"]) for r in roots) == sorted(
        [(1, 0, 0, False), (1, 0, 1, False), (1, 1, 1, False)]
        + [(2, i // 2, i % 2, True) for i in range(4)] + [(3, 7, 0, False)])
    assert all(r["name"] == "agent_loop" and r["kind"] == "agent" for r in roots)
    assert all(r["attributes"]["experiment_name"] == "traced" for r in roots)
    by_id = {s["span_id"]: s for s in got}
    for root in roots:
        tree = [s for s in got if s["trace_id"] == root["trace_id"]]
        names = {s["name"]: s for s in tree}
        assert set(names) == {"agent_loop", "TinyAgentLoop.run", "FakeServer.generate",
                              "HermesToolParser.extract_tool_calls", "BaseTool.execute"}
        run_span = names["TinyAgentLoop.run"]
        assert run_span["parent_span_id"] == root["span_id"]
        for child in ("FakeServer.generate", "HermesToolParser.extract_tool_calls", "BaseTool.execute"):
            assert by_id[names[child]["parent_span_id"]]["name"] == "TinyAgentLoop.run"
        gen = names["FakeServer.generate"]
        assert gen["kind"] == "llm" and gen["inputs"]["prompt_ids"] == TOK.encode(f"q{root['sample_index']}")
        assert gen["outputs"]["response_text"].startswith("<tool_call>")  # token2text
        assert gen["start_ns"] <= gen["end_ns"]
        if root["step"] == 3:
            assert run_span["status"] == "error" and "reward server down" in run_span["error"]
            assert root["status"] == "error"
        else:
            assert run_span["status"] == "ok"
            assert run_span["outputs"]["prompt_text"] == f"q{root['sample_index']}"
            assert run_span["outputs"]["response_ids"] == gen["outputs"]["token_ids"]


def test_uuid_sample_index_is_kept_as_an_attribute(store):
    tracking = Tracking("p", "uuid", ["trackstore"])
    RolloutTraceConfig.init("p", "uuid", "trackstore")

    async def one():
        with rollout_trace_attr(step=1, sample_index="9b1deb4d-3b7d", rollout_n=2, name="agent_loop"):
            await FakeServer().generate("r", prompt_ids=[104, 105], sampling_params={})

    asyncio.run(one())
    tracking.finish()
    (root,) = [s for s in spans(only_run(store)) if s["parent_span_id"] is None]
    assert (root["step"], root["sample_index"], root["rollout_n"]) == (1, None, 2)
    assert root["attributes"]["verl_sample_index"] == "9b1deb4d-3b7d"


def test_other_trace_backends_are_untouched(store):
    RolloutTraceConfig.init("p", "e", None)
    loop = TinyAgentLoop(make_tool())
    asyncio.run(run_batch(loop, step=1, n=2, traced={0, 1, 2, 3}))
    assert list(store.iterdir()) == []


def test_worker_process_joins_the_drivers_run(store):
    """Traces come from AgentLoopWorker processes: they join the running run of the same name."""
    tracking = Tracking("gsm8k", "multi", ["trackstore"])
    tracking.log(data={"actor/pg_loss": 0.5}, step=1)
    code = (
        "import asyncio, verl\n"
        "from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op\n"
        "class Loop:\n"
        "    @rollout_trace_op\n"
        "    async def run(self, x):\n"
        "        return {'answer': x * 2}\n"
        "RolloutTraceConfig.init('gsm8k', 'multi', 'trackstore')\n"
        "async def main():\n"
        "    with rollout_trace_attr(step=1, sample_index=0, rollout_n=0, name='agent_loop'):\n"
        "        await Loop().run(21)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    tracking.finish()
    info = only_run(store, "gsm8k")
    assert info.status == "finished"
    got = spans(info)
    assert sorted(s["name"] for s in got) == ["Loop.run", "agent_loop"]
    assert [s["outputs"] for s in got if s["name"] == "Loop.run"] == [{"answer": 42}]
    assert len({s["writer"] for s in got}) == 1 and got[0]["writer"] != rows(info, "metrics")[0]["writer"]


def test_ray_worker_processes_load_the_plugin_and_trace_into_the_run(store):
    """verl's AgentLoopWorkers are Ray actors: the plugin must load there (at their `import verl`)
    and their spans must land in the driver's run, in the store the driver pinned."""
    ray = pytest.importorskip("ray")

    tracking = Tracking("gsm8k", "ray", ["trackstore"])
    # as verl's launcher does: ray.init in the process where $TRACKSTORE_DIR is set
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        @ray.remote
        class Worker:
            def run(self, index: int) -> int:
                import asyncio as aio
                import os as _os

                from verl.utils.rollout_trace import RolloutTraceConfig as Config
                from verl.utils.rollout_trace import rollout_trace_attr as attr
                from verl.utils.rollout_trace import rollout_trace_op as op

                class Loop:
                    @op
                    async def run(self, x):
                        return {"answer": x}

                Config.init("gsm8k", "ray", "trackstore")

                async def main():
                    with attr(step=1, sample_index=index, rollout_n=0, name="agent_loop"):
                        await Loop().run(index)

                aio.run(main())
                return _os.getpid()

        workers = [Worker.remote() for _ in range(2)]
        pids = ray.get([w.run.remote(i) for i, w in enumerate(workers)])
        assert os.getpid() not in pids and len(set(pids)) == 2
    finally:
        ray.shutdown()
    tracking.finish()
    info = only_run(store, "gsm8k")
    assert info.status == "finished", info.writers
    got = spans(info)
    names = sorted(("Loop.run" if s["name"].endswith(".Loop.run") else s["name"], s["sample_index"]) for s in got)
    assert names == [("Loop.run", 0), ("Loop.run", 1), ("agent_loop", 0), ("agent_loop", 1)]
    assert len({s["writer"] for s in got}) == 2  # one writer per worker process


def test_verls_own_wandb_backend_under_trackstore_run(store, tmp_path):
    """An unchanged `trainer.logger=[console,wandb]` job run through `trackstore run`: verl's own
    wandb code (init, log(data=...), its rebuilt validation table, finish) lands in the store."""
    script = tmp_path / "job.py"
    script.write_text(
        "import verl\n"
        "from verl.utils.tracking import Tracking, ValidationGenerationsLogger\n"
        "t = Tracking('wb-verl', 'exp', ['console', 'wandb'], config={'trainer': {'total_epochs': 1}})\n"
        "v = ValidationGenerationsLogger('wb-verl', 'exp')\n"
        "for step in (1, 2):\n"
        "    t.log(data={'actor/pg_loss': 0.5 / step}, step=step)\n"
        "    v.log(['console', 'wandb'], [('q1', 'a1', 1.0), ('q2', 'a2', 0.0)], step)\n"
        "import wandb\n"
        "print('MODULE', wandb.__name__)\n"
        "t.finish(exit_code=0)\n"
    )
    out = subprocess.run([sys.executable, "-m", "trackstore.cli.main", "run", "--", sys.executable, str(script)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "MODULE trackstore.compat.wandb" in out.stdout and not (tmp_path / "wandb").exists()
    info = only_run(store, "wb-verl")
    assert info.status == "finished" and info.meta["config"] == {"trainer": {"total_epochs": 1}}
    assert sorted((r["step"], r["key"], r["value"]) for r in rows(info, "metrics")) == [
        (1, "actor/pg_loss", 0.5), (2, "actor/pg_loss", 0.25)]
    # verl re-logs its whole wide table each time: each row is stored once
    import json

    wide = [(r["step"], json.loads(r["extra"])) for r in rows(info, "samples")]
    assert [(s, e["step"], e["input_1"], e["output_2"], e["score_2"]) for s, e in wide] == [
        (1, 1, "q1", "a2", 0.0), (2, 2, "q1", "a2", 0.0)]


def save_like_verl(folder, step: int) -> None:
    """What verl's trainer leaves at a checkpoint: global_step_N/{actor,data.pt}, then its tracker
    file (written last, verl's sign that the checkpoint is complete), named by verl itself."""
    import torch
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    step_dir = folder / f"global_step_{step}"
    (step_dir / "actor").mkdir(parents=True)
    torch.save({"w": torch.full((64,), float(step))}, step_dir / "actor" / "model_world_size_1_rank_0.pt")
    torch.save({"epoch": 0, "step": step}, step_dir / "data.pt")
    with open(get_checkpoint_tracker_filename(str(folder)), "w") as f:
        f.write(str(step))


@pytest.mark.parametrize("switch", ["config", "env", "off"])
def test_checkpoints_become_model_versions_by_reference(store, tmp_path, monkeypatch, switch):
    ckpt = tmp_path / "checkpoints"
    config = hydra_config("gsm8k_grpo", f"ckpt_{switch}")
    config["trainer"]["default_local_dir"] = str(ckpt)
    if switch == "config":
        config["trainer"]["trackstore_log_model"] = True  # +trainer.trackstore_log_model=true
    elif switch == "env":
        monkeypatch.setenv("TRACKSTORE_LOG_CHECKPOINTS", "1")
    tracking = Tracking(project_name="gsm8k_grpo", experiment_name=f"ckpt_{switch}",
                        default_backend=config["trainer"]["logger"], config=config)
    for step in range(1, 5):
        if step % 2 == 0:  # trainer.save_freq=2: verl saves before it logs the step's metrics
            save_like_verl(ckpt, step)
        tracking.log(data={"critic/score/mean": step / 10, "actor/pg_loss": np.float32(0.5)}, step=step)
    tracking.finish(exit_code=0)

    info = only_run(store, "gsm8k_grpo")
    versions, holders = checkpoints(info)
    if switch == "off":
        assert versions == []
        return
    assert [(v.name, v.version, v.step, v.storage, v.source) for v in versions] == [
        (f"model-{info.run_id}", 0, 2, "reference", str(ckpt / "global_step_2")),
        (f"model-{info.run_id}", 1, 4, "reference", str(ckpt / "global_step_4"))]
    assert holders == {"latest": 1, "step-2": 0, "step-4": 1}
    assert versions[1].metadata == {"step": 4, "metrics": {"critic/score/mean": 0.4, "actor/pg_loss": 0.5}}
    assert sorted(f.logical_path for f in versions[0].files) == ["actor/model_world_size_1_rank_0.pt", "data.pt"]
    assert not any((info.paths.dir / "artifacts").rglob("*.pt"))  # nothing copied into the store


def test_checkpoints_replay_to_wandb_with_their_aliases(store, tmp_path, monkeypatch):
    """The same checkpoints, synced to wandb (offline) and read back with wandb's own reader:
    one artifact version per checkpoint, the trainer's bytes, latest on the newest."""
    import json

    from tests.sync_harness import WandbHarness

    ckpt = tmp_path / "checkpoints"
    config = hydra_config("gsm8k_grpo", "ckpt_wandb")
    config["trainer"].update(default_local_dir=str(ckpt), trackstore_log_model=True)
    tracking = Tracking(project_name="gsm8k_grpo", experiment_name="ckpt_wandb",
                        default_backend=config["trainer"]["logger"], config=config)
    for step in (1, 2, 3, 4):
        if step % 2 == 0:
            save_like_verl(ckpt, step)
        tracking.log(data={"critic/score/mean": step / 10}, step=step)
    tracking.finish(exit_code=0)
    info = only_run(store, "gsm8k_grpo")

    wb = WandbHarness(tmp_path, monkeypatch)
    env = {**os.environ, **wb.env(), "TRACKSTORE_DIR": str(store)}
    res = subprocess.run([sys.executable, "-m", "trackstore.cli.main", "sync", "--to", "wandb", "--format", "json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)["runs"][0]
    assert out["result"] == "ok" and out["skipped_by_reason"] == {}, out
    arts = [a for a in wb.artifacts("gsm8k_grpo", info.run_id) if a["type"] == "model"]
    assert [(a["name"], a["metadata"]["trackstore.version"], sorted(a.get("aliases") or [])) for a in arts] == [
        (f"model-{info.run_id}", 0, ["latest", "step-2"]), (f"model-{info.run_id}", 1, ["latest", "step-4"])]
    entry = next(e for e in arts[1]["manifest"]["contents"] if e["path"] == "actor/model_world_size_1_rank_0.pt")
    original = ckpt / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt"
    assert open(entry["local_path"], "rb").read() == original.read_bytes()
