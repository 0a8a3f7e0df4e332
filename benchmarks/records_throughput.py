"""Samples and spans: throughput (rows/s) and disk bytes per row, trackstore vs. the peers, in one run.

    .venv/bin/python benchmarks/records_throughput.py            # 2,000 samples, 400 traces x 5 spans
    .venv/bin/python benchmarks/records_throughput.py --quick    # a tenth of that
    .venv/bin/python benchmarks/records_throughput.py --repeat 3 --json out.json   # medians of 3

Every system gets the same rows, built from a fixed seed:

* samples: validation generations (a ~700-character prompt, a ~1,800-character response mixing
  English, Chinese and code, a score and two reward components), logged 100 per step;
* spans: agent trajectories of 5 spans (episode -> assistant turn -> tool call -> assistant
  answer -> reward) with JSON inputs/outputs of a few hundred characters.

What each system does with them (each in its own subprocess, so SDK imports and background
services do not leak into each other). The clock starts after ``init`` (``trackstore.init``,
``wandb.init``, ``mlflow.start_run`` and creating MLflow's SQLite schema, ``swanlab.init``) and
stops after everything is written (``finish``/``end_run``; MLflow's trace export is flushed):

* trackstore: ``run.log_samples`` per step / ``run.trace`` + ``tr.span``.
* wandb (offline): one ``wandb.Table`` per step logged with ``run.log`` (samples), a ``wandb.Table``
  of span rows (wandb has no trace API without weave).
* MLflow (SQLite store, local artifacts): ``mlflow.log_table`` per step (samples), real traces with
  ``mlflow.start_span`` (spans).
* SwanLab (offline): a list of ``swanlab.Text`` per step (samples), one ``Text`` of JSON per span.

Bytes per row are the bytes the system left on disk (its whole run folder / database, minus what
an empty run of the same system occupies) divided by the rows. The figures are for this machine;
the ratios are what carries over.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trackstore.store.files import tree_bytes

REPO = Path(__file__).resolve().parent.parent
PER_STEP = 100
WORDS = ["policy", "gradient", "reward", "token", "答案", "推理", "def f(x):", "return x * 2", "因此", "the",
         "value", "is", "42", "step", "验证", "assert", "loop", "model", "=", "{", "}"]


def make_text(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def make_samples(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"input": make_text(rng, 700), "output": make_text(rng, 1800), "score": rng.random(),
             "reward/format": rng.random(), "reward/acc": float(rng.random() > 0.5)} for _ in range(n)]


def make_traces(n: int, seed: int = 1) -> list[list[dict]]:
    """Each trace: 5 spans as (name, kind, depth, inputs, outputs)."""
    rng = random.Random(seed)
    traces = []
    for _ in range(n):
        q = make_text(rng, 200)
        traces.append([
            {"name": "episode", "kind": "agent", "inputs": {"question": q}, "outputs": {"reward": 1.0}},
            {"name": "assistant_turn", "kind": "llm", "inputs": {"messages": [{"role": "user", "content": q}]},
             "outputs": {"tool_calls": [{"name": "search", "arguments": {"q": make_text(rng, 60)}}]}},
            {"name": "search", "kind": "tool", "inputs": {"q": make_text(rng, 60)}, "outputs": make_text(rng, 400)},
            {"name": "assistant_answer", "kind": "llm", "inputs": {"context": make_text(rng, 300)},
             "outputs": make_text(rng, 300)},
            {"name": "reward", "kind": "reward", "inputs": {"answer": make_text(rng, 80)}, "outputs": 1.0},
        ])
    return traces


def bench_trackstore(work: Path, kind: str, n: int) -> dict:
    import trackstore

    root = work / "store"
    if kind == "samples":
        rows = make_samples(n)
        run = trackstore.init("bench", root=root)
        t0 = time.perf_counter()
        log_s = 0.0
        for step, i in enumerate(range(0, n, PER_STEP)):
            t = time.perf_counter()
            run.log_samples(rows[i:i + PER_STEP], step=step)
            log_s += time.perf_counter() - t
        run.finish()
        total = time.perf_counter() - t0
        disk = tree_bytes(run.dir / "samples")
        nrows = n
    else:
        traces = make_traces(n)
        run = trackstore.init("bench", root=root)
        t0 = time.perf_counter()
        t = time.perf_counter()
        for i, spans in enumerate(traces):
            root_s, turn, tool, answer, reward = spans
            with run.trace(step=i // 50, sample_index=i % 50) as tr:
                tr.set_inputs(root_s["inputs"])
                with tr.span(turn["name"], kind=turn["kind"], inputs=turn["inputs"]) as s:
                    with tr.span(tool["name"], kind=tool["kind"], inputs=tool["inputs"]) as c:
                        c.set_outputs(tool["outputs"])
                    s.set_outputs(turn["outputs"])
                with tr.span(answer["name"], kind=answer["kind"], inputs=answer["inputs"]) as s:
                    s.set_outputs(answer["outputs"])
                with tr.span(reward["name"], kind=reward["kind"], inputs=reward["inputs"]) as s:
                    s.set_outputs(reward["outputs"])
                tr.set_reward(1.0)
                tr.set_outputs(root_s["outputs"])
        log_s = time.perf_counter() - t
        run.finish()
        total = time.perf_counter() - t0
        disk = tree_bytes(run.dir / "spans")
        nrows = 5 * n
    return {"rows": nrows, "seconds": total, "log_seconds": log_s, "bytes": disk}


def bench_wandb(work: Path, kind: str, n: int) -> dict:
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DIR=str(work), WANDB_CONSOLE="off")
    import wandb

    def empty_run_bytes() -> int:
        r = wandb.init(project="bench-empty", dir=str(work / "empty"), mode="offline")
        r.finish()
        return tree_bytes(work / "empty")

    base = empty_run_bytes()
    if kind == "samples":
        rows = make_samples(n)
        cols = ["input", "output", "score", "reward/format", "reward/acc"]
        run = wandb.init(project="bench", dir=str(work / "run"), mode="offline")
        t0 = time.perf_counter()
        for step, i in enumerate(range(0, n, PER_STEP)):
            table = wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in rows[i:i + PER_STEP]])
            run.log({"val/generations": table}, step=step)
        run.finish()
        nrows = n
    else:
        traces = make_traces(n)
        cols = ["trace", "span", "parent", "name", "kind", "start_ns", "end_ns", "inputs", "outputs"]
        run = wandb.init(project="bench", dir=str(work / "run"), mode="offline")
        t0 = time.perf_counter()
        for step, i in enumerate(range(0, n, 50)):
            data = []
            for t, spans in enumerate(traces[i:i + 50]):
                for j, s in enumerate(spans):
                    data.append([f"t{i + t}", f"s{j}", None if j == 0 else "s0", s["name"], s["kind"],
                                 time.time_ns(), time.time_ns(), json.dumps(s["inputs"], ensure_ascii=False),
                                 json.dumps(s["outputs"], ensure_ascii=False)])
            run.log({"rollout/spans": wandb.Table(columns=cols, data=data)}, step=step)
        run.finish()
        nrows = 5 * n
    total = time.perf_counter() - t0
    return {"rows": nrows, "seconds": total, "bytes": max(0, tree_bytes(work / "run") - base)}


def bench_mlflow(work: Path, kind: str, n: int) -> dict:
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    import mlflow

    db = work / "mlflow.db"
    mlflow.set_tracking_uri(f"sqlite:///{db}")
    exp = mlflow.create_experiment("bench", artifact_location=(work / "artifacts").as_uri())
    mlflow.set_experiment(experiment_id=exp)
    with mlflow.start_run():  # creates the schema (not timed)
        pass
    base = tree_bytes(work)
    if kind == "samples":
        rows = make_samples(n)
        with mlflow.start_run():
            t0 = time.perf_counter()
            for step, i in enumerate(range(0, n, PER_STEP)):
                chunk = rows[i:i + PER_STEP]
                mlflow.log_table({c: [r[c] for r in chunk] for c in chunk[0]},
                                 artifact_file=f"samples/step_{step}.json")
        nrows = n
    else:
        traces = make_traces(n)
        t0 = time.perf_counter()
        for i, spans in enumerate(traces):
            root_s, turn, tool, answer, reward = spans
            with mlflow.start_span(name="episode", span_type="AGENT") as tr:
                tr.set_inputs(root_s["inputs"])
                tr.set_attributes({"step": i // 50, "sample_index": i % 50})
                with mlflow.start_span(name=turn["name"], span_type="LLM") as s:
                    s.set_inputs(turn["inputs"])
                    with mlflow.start_span(name=tool["name"], span_type="TOOL") as c:
                        c.set_inputs(tool["inputs"])
                        c.set_outputs(tool["outputs"])
                    s.set_outputs(turn["outputs"])
                with mlflow.start_span(name=answer["name"], span_type="LLM") as s:
                    s.set_inputs(answer["inputs"])
                    s.set_outputs(answer["outputs"])
                with mlflow.start_span(name=reward["name"], span_type="UNKNOWN") as s:
                    s.set_inputs(reward["inputs"])
                    s.set_outputs(reward["outputs"])
                tr.set_outputs(root_s["outputs"])
        flush = getattr(mlflow, "flush_trace_async_logging", None)
        if callable(flush):
            flush()
        nrows = 5 * n
    total = time.perf_counter() - t0
    return {"rows": nrows, "seconds": total, "bytes": max(0, tree_bytes(work) - base)}


def bench_swanlab(work: Path, kind: str, n: int) -> dict:
    import swanlab

    def one_run(name: str, body) -> float:
        swanlab.init(project="bench", name=name, mode="offline", log_dir=str(work / name), reinit=True)
        t0 = time.perf_counter()
        body()
        swanlab.finish()
        return time.perf_counter() - t0

    one_run("empty", lambda: None)
    base = tree_bytes(work / "empty")
    if kind == "samples":
        rows = make_samples(n)

        def body():
            for step, i in enumerate(range(0, n, PER_STEP)):
                swanlab.log({"val/generations": [swanlab.Text(r["output"], caption=r["input"][:200])
                                                 for r in rows[i:i + PER_STEP]]}, step=step)
        nrows = n
    else:
        traces = make_traces(n)

        def body():
            for step, i in enumerate(range(0, n, 50)):
                texts = [swanlab.Text(json.dumps(s, ensure_ascii=False)) for spans in traces[i:i + 50] for s in spans]
                for j in range(0, len(texts), 100):  # SwanLab limits how many media one key takes per step
                    swanlab.log({f"rollout/spans_{j // 100}": texts[j:j + 100]}, step=step)
        nrows = 5 * n
    seconds = one_run("run", body)
    return {"rows": nrows, "seconds": seconds, "bytes": max(0, tree_bytes(work / "run") - base)}


SYSTEMS = {"trackstore": bench_trackstore, "wandb": bench_wandb, "mlflow": bench_mlflow, "swanlab": bench_swanlab}


def child_main(system: str, kind: str, n: int) -> None:
    with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as tmp:
        work = Path(tmp)
        os.environ["HOME"] = str(work)  # SDK settings stay in the sandbox
        import contextlib
        import io

        noise = io.StringIO()
        with contextlib.redirect_stdout(noise):
            result = SYSTEMS[system](work, kind, n)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(system: str, kind: str, n: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_", "SWANLAB_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, __file__, "--child", system, kind, str(n)], capture_output=True,
                          text=True, env=env, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of the default sizes")
    ap.add_argument("--samples", type=int, default=2000, help="sample rows per system (default 2000)")
    ap.add_argument("--traces", type=int, default=400, help="traces of 5 spans per system (default 400)")
    ap.add_argument("--only", nargs="*", choices=sorted(SYSTEMS), help="systems to measure (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per system and kind; the median is shown")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args.child[0], args.child[1], int(args.child[2]))
        return
    n_samples = max(PER_STEP, args.samples // (10 if args.quick else 1))
    n_traces = max(50, args.traces // (10 if args.quick else 1))
    systems = args.only or list(SYSTEMS)
    results: dict = {}
    for kind, n in (("samples", n_samples), ("spans", n_traces)):
        for system in systems:
            tries = [run_child(system, kind, n) for _ in range(max(1, args.repeat))]
            ok = sorted((t for t in tries if "error" not in t), key=lambda t: t["seconds"])
            results[(kind, system)] = r = ok[len(ok) // 2] if ok else tries[0]
            print(f"  measured {kind:7s} {system:10s} {r}", file=sys.stderr, flush=True)
    print(f"\nSamples: {n_samples} rows (~2.5 kB of text each); spans: {n_traces} traces x 5 spans\n")
    print(f"{'kind':8s} {'system':11s} {'rows/s':>10s} {'bytes/row':>10s} {'log call µs/row':>16s} "
          f"{'trackstore faster':>18s} {'trackstore smaller':>19s}")
    for kind in ("samples", "spans"):
        ours = results.get((kind, "trackstore"), {})
        for system in systems:
            r = results[(kind, system)]
            if "error" in r:
                print(f"{kind:8s} {system:11s} failed: {r['error']}")
                continue
            rps = r["rows"] / r["seconds"]
            bpr = r["bytes"] / r["rows"]
            call = f"{r['log_seconds'] / r['rows'] * 1e6:.1f}" if "log_seconds" in r else "-"
            if system == "trackstore" or "error" in ours:
                ratio_t = ratio_b = "-"
            else:
                ratio_t = f"{(ours['rows'] / ours['seconds']) / rps:.1f}x"
                ratio_b = f"{bpr / (ours['bytes'] / ours['rows']):.1f}x" if ours["bytes"] else "-"
            print(f"{kind:8s} {system:11s} {rps:10.0f} {bpr:10.0f} {call:>16s} {ratio_t:>18s} {ratio_b:>19s}")
    if args.json:
        Path(args.json).write_text(json.dumps({f"{k}/{s}": v for (k, s), v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
