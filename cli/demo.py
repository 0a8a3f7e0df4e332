"""A realistic simulated GRPO run, for ``trackstore demo``, docs and benchmarks.

The metric keys mirror what verl's PPO/GRPO trainer logs each step (``actor/*``, ``critic/*``,
``response_length/*``, ``timing_s/*``, ``perf/*``, ``val-core/*`` on validation steps), with
values that move the way a healthy run's do (reward rises, entropy falls, KL creeps up).
"""

from __future__ import annotations

import math
import random
from typing import Any

from trackstore import Run, init

ACTOR = ["entropy", "pg_loss", "pg_clipfrac", "ppo_kl", "pg_clipfrac_lower", "grad_norm", "lr", "kl_loss", "kl_coef"]
STATS = ["mean", "max", "min"]
TIMING = ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "step", "testing", "save_checkpoint"]
PERF = ["total_num_tokens", "time_per_step", "throughput", "max_memory_allocated_gb", "max_memory_reserved_gb",
        "cpu_memory_used_gb", "mfu/actor"]
VAL_SETS = ["gsm8k", "math500"]


def step_metrics(step: int, total: int, rng: random.Random) -> dict[str, float]:
    """One training step's metrics (about 100 keys), as verl would log them."""
    p = step / max(total, 1)
    reward = 0.2 + 0.6 * (1 - math.exp(-4 * p)) + rng.gauss(0, 0.03)
    entropy = 1.2 * math.exp(-1.5 * p) + 0.15 + rng.gauss(0, 0.02)
    m: dict[str, float] = {}
    for k in ACTOR:
        base = {"entropy": entropy, "pg_loss": rng.gauss(0, 0.05), "pg_clipfrac": 0.02 + 0.01 * rng.random(),
                "ppo_kl": 0.001 + 0.004 * p + abs(rng.gauss(0, 0.0005)), "pg_clipfrac_lower": 0.001 * rng.random(),
                "grad_norm": 0.5 + 0.3 * rng.random(), "lr": 1e-6, "kl_loss": 0.002 + 0.01 * p,
                "kl_coef": 0.001}[k]
        m[f"actor/{k}"] = base
    for fam, centre, spread in (("score", reward, 0.5), ("rewards", reward, 0.5), ("advantages", 0.0, 1.5),
                                ("returns", reward, 0.5), ("values", reward * 0.9, 0.4)):
        m[f"critic/{fam}/mean"] = centre + rng.gauss(0, 0.01)
        m[f"critic/{fam}/max"] = centre + spread
        m[f"critic/{fam}/min"] = centre - spread
    length = 300 + 500 * p + rng.gauss(0, 20)
    for fam, centre in (("response_length", length), ("prompt_length", 120.0)):
        m[f"{fam}/mean"] = centre
        m[f"{fam}/max"] = centre * 2.5
        m[f"{fam}/min"] = centre * 0.2
        m[f"{fam}/clip_ratio"] = 0.01 * rng.random()
    for k in TIMING:
        m[f"timing_s/{k}"] = abs(rng.gauss({"gen": 40, "update_actor": 25, "step": 90}.get(k, 3), 1.0))
        m[f"timing_per_token_ms/{k}"] = m[f"timing_s/{k}"] / 1000
    for k in PERF:
        m[f"perf/{k}"] = abs(rng.gauss(100.0, 5.0))
    for k in ("global_seqlen/min", "global_seqlen/max", "global_seqlen/mean", "global_seqlen/balanced_min",
              "global_seqlen/balanced_max", "global_seqlen/minmax_diff"):
        m[k] = 50_000 + rng.gauss(0, 1000)
    for k in ("num_turns/mean", "num_turns/max", "num_turns/min"):
        m[f"training/{k}"] = 2 + rng.random()
    m["training/global_step"] = float(step)
    m["training/epoch"] = float(step // 50)
    for i in range(30):
        m[f"actor/layer_{i:02d}/grad_norm"] = abs(rng.gauss(0.05, 0.01))
    return m


def simulate_grpo(
    project: str = "demo-grpo",
    name: str = "qwen2.5-0.5b-grpo-gsm8k",
    steps: int = 200,
    *,
    root: Any = None,
    seed: int = 0,
    val_every: int = 20,
    samples_per_val: int = 8,
    with_records: bool = True,
) -> Run:
    """Write a finished simulated GRPO run and return it."""
    rng = random.Random(seed)
    config = {
        "algorithm": {"adv_estimator": "grpo", "kl_ctrl": {"kl_coef": 0.001}},
        "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"},
                              "actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 64},
                              "rollout": {"name": "vllm", "n": 5, "temperature": 1.0}},
        "data": {"train_batch_size": 256, "max_prompt_length": 512, "max_response_length": 1024},
        "trainer": {"total_epochs": 4, "project_name": project, "experiment_name": name, "seed": seed},
    }
    run = init(project=project, name=name, config=config, tags=["demo", "grpo"], notes="simulated GRPO run",
               root=root)
    with run:
        for step in range(1, steps + 1):
            metrics = step_metrics(step, steps, rng)
            if step % val_every == 0 or step == steps:
                p = step / steps
                for ds in VAL_SETS:
                    metrics[f"val-core/{ds}/reward/mean@1"] = 0.25 + 0.5 * (1 - math.exp(-3 * p)) + rng.gauss(0, 0.02)
                if with_records:
                    _log_validation(run, step, rng, samples_per_val)
            if with_records and step % val_every == 0:
                from trackstore import Histogram

                metrics["critic/advantages/hist"] = Histogram([rng.gauss(0, 1) for _ in range(256)], bins=32)
            run.log(metrics, step=step)
    return run


def _log_validation(run: Run, step: int, rng: random.Random, n: int) -> None:
    """Validation generations and one traced tool-using trajectory, when those kinds exist."""
    try:
        rows = []
        for _ in range(n):
            a, b = rng.randint(2, 99), rng.randint(2, 99)
            right = rng.random() < 0.3 + 0.5 * step / 200
            answer = a * b if right else a * b + rng.randint(1, 9)
            rows.append({"input": f"What is {a} * {b}?", "output": f"Let me compute. {a} * {b} = {answer}. #### {answer}",
                         "score": 1.0 if right else 0.0, "ground_truth": str(a * b)})
        run.log_samples(rows, step=step, split="val")
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        with run.trace(step=step, sample_index=0, rollout_n=0, validate=True) as tr:
            with tr.span("user", kind="other", inputs={"content": f"What is {a} * {b}? Use the calculator."}):
                pass
            with tr.span("assistant", kind="llm", inputs=[{"role": "user", "content": f"{a} * {b}"}]) as turn:
                with tr.span("calculator", kind="tool", inputs={"expression": f"{a} * {b}"}) as tool:
                    tool.set_outputs(a * b)
                turn.set_outputs(f"The answer is {a * b}.")
            with tr.span("reward", kind="reward", inputs={"answer": a * b}) as rw:
                rw.set_outputs(1.0)
            tr.set_reward(1.0)
    except (ImportError, AttributeError):
        return
