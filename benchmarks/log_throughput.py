"""How fast is ``run.log``, and what does it cost on disk and in memory, next to its peers?

One run of this script measures, on this machine and side by side:

* the pure-Python floor, two ways: ``floor`` iterates the pre-built dicts and touches every
  (key, value) pair, the least a logger must do per point (it has to see both);
  ``floor-values`` touches only the values, a stricter lower bound shown for reference;
* trackstore (``run.log(d, step=i)`` then ``run.finish()``);
* a plain buffered pyarrow logger (append to Python lists, one zstd Parquet file of the
  long-format rows ``step, key, value, ts`` at finish): the byte baseline;
* wandb offline (``wandb.init(mode="offline", dir=tmp)``, ``wandb.log(d, step=i)``);
* MLflow with a sqlite store (``mlflow.log_metrics(d, step=i)`` per step);
* SwanLab offline (``swanlab.init(mode="offline", logdir=tmp)``, ``swanlab.log(d, step=i)``).

The workload is the same for all: ``--keys`` (50) noisy float64 metrics per step, the dicts
built before the clock starts. trackstore, the floor and the Parquet baseline log
``--steps`` (20 000) steps, i.e. one million points; slow peers log fewer steps and are
compared per point. Each contender runs in its own subprocess, so its peak RSS
(``ru_maxrss``) is its own; helper processes a client starts (wandb-core, SwanLab's) are
reported separately when the OS accounts them. ``init`` is timed apart from the loop; for
trackstore it includes the writer thread's one-time pyarrow import.

    python benchmarks/log_throughput.py            # the full run, best of 3 (two to four minutes)
    python benchmarks/log_throughput.py --quick    # a small run, once each (under a minute)
    python benchmarks/log_throughput.py --only floor,trackstore --repeat 5 --json

Timings on a shared machine vary with what else runs; each contender is run ``--repeat``
times and its fastest run (by loop + finish) is reported, and the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trackstore.store.files import tree_bytes

CONTENDERS = ("floor", "floor-values", "trackstore", "parquet", "wandb", "mlflow", "swanlab")
# Steps per contender, full and --quick. Slow peers log fewer steps and are compared per point.
STEPS = {"floor": 20_000, "floor-values": 20_000, "trackstore": 20_000, "parquet": 20_000, "wandb": 2_000, "mlflow": 200, "swanlab": 1_000}
QUICK = {"floor": 2_000, "floor-values": 2_000, "trackstore": 2_000, "parquet": 2_000, "wandb": 200, "mlflow": 40, "swanlab": 100}


def workload(steps: int, keys: int, seed: int = 0) -> list[dict[str, float]]:
    """Noisy float64 metrics with verl-like names (random walks plus noise: realistic entropy)."""
    rng = random.Random(seed)
    names = [f"{fam}/{i:02d}" for i, fam in zip(range(keys), ["actor", "critic", "response_length", "timing_s",
                                                               "perf"] * keys)]
    level = [rng.uniform(-1, 1) for _ in names]
    out = []
    for _ in range(steps):
        level = [x + rng.gauss(0, 0.01) for x in level]
        out.append({n: x + rng.gauss(0, 0.1) for n, x in zip(names, level)})
    return out


def run_floor(dicts, tmp):
    t0 = time.perf_counter()
    for _step, d in enumerate(dicts):
        for k, v in d.items():
            k, v  # noqa: B018 - touching each key and value is the point
    return {"init_s": 0.0, "loop_s": time.perf_counter() - t0, "finish_s": 0.0, "bytes": 0}


def run_floor_values(dicts, tmp):
    t0 = time.perf_counter()
    for _step, d in enumerate(dicts):
        for v in d.values():
            v  # noqa: B018 - touching each value is the point
    return {"init_s": 0.0, "loop_s": time.perf_counter() - t0, "finish_s": 0.0, "bytes": 0}


def run_trackstore(dicts, tmp):
    import trackstore

    t0 = time.perf_counter()
    run = trackstore.init("bench", root=tmp / "store")
    t1 = time.perf_counter()
    log = run.log
    for step, d in enumerate(dicts):
        log(d, step=step)
    t2 = time.perf_counter()
    run.finish()
    t3 = time.perf_counter()
    return {"init_s": t1 - t0, "loop_s": t2 - t1, "finish_s": t3 - t2, "bytes": tree_bytes(run.dir / "metrics"),
            "bytes_all": tree_bytes(run.dir), "parts": len(run.paths.parts("metrics"))}


def run_parquet(dicts, tmp):
    """A plain buffered pyarrow logger: long-format lists, one zstd Parquet file at the end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    steps, keys, values, times = [], [], [], []
    t1 = time.perf_counter()
    for step, d in enumerate(dicts):
        now = time.time()
        for k, v in d.items():
            steps.append(step)
            keys.append(k)
            values.append(v)
            times.append(now)
    t2 = time.perf_counter()
    table = pa.table({"step": pa.array(steps, pa.int64()), "key": pa.array(keys, pa.string()),
                      "value": pa.array(values, pa.float64()),
                      "ts": pa.array([int(t * 1e6) for t in times], pa.int64()).cast(pa.timestamp("us", tz="UTC"))})
    path = tmp / "plain.parquet"
    pq.write_table(table, path, compression="zstd")
    t3 = time.perf_counter()
    return {"init_s": t1 - t0, "loop_s": t2 - t1, "finish_s": t3 - t2, "bytes": path.stat().st_size}


def run_wandb(dicts, tmp):
    import wandb

    t0 = time.perf_counter()
    run = wandb.init(project="bench", mode="offline", dir=str(tmp), settings=wandb.Settings(silent=True))
    t1 = time.perf_counter()
    for step, d in enumerate(dicts):
        run.log(d, step=step)
    t2 = time.perf_counter()
    run.finish()
    t3 = time.perf_counter()
    return {"init_s": t1 - t0, "loop_s": t2 - t1, "finish_s": t3 - t2, "bytes": tree_bytes(tmp / "wandb")}


def run_mlflow(dicts, tmp):
    import mlflow

    t0 = time.perf_counter()
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlflow.db")
    mlflow.set_experiment("bench")
    mlflow.start_run()
    t1 = time.perf_counter()
    for step, d in enumerate(dicts):
        mlflow.log_metrics(d, step=step)
    t2 = time.perf_counter()
    mlflow.end_run()
    t3 = time.perf_counter()
    return {"init_s": t1 - t0, "loop_s": t2 - t1, "finish_s": t3 - t2, "bytes": tree_bytes(tmp)}


def run_swanlab(dicts, tmp):
    import swanlab

    t0 = time.perf_counter()
    swanlab.init(project="bench", mode="offline", logdir=str(tmp / "swanlog"))
    t1 = time.perf_counter()
    for step, d in enumerate(dicts):
        swanlab.log(d, step=step)
    t2 = time.perf_counter()
    swanlab.finish()
    t3 = time.perf_counter()
    return {"init_s": t1 - t0, "loop_s": t2 - t1, "finish_s": t3 - t2, "bytes": tree_bytes(tmp / "swanlog")}


RUNNERS = {"floor": run_floor, "floor-values": run_floor_values, "trackstore": run_trackstore, "parquet": run_parquet, "wandb": run_wandb,
           "mlflow": run_mlflow, "swanlab": run_swanlab}


def child(name: str, steps: int, keys: int) -> None:
    dicts = workload(steps, keys)
    tmp = Path(tempfile.mkdtemp(prefix=f"tsbench-{name}-"))
    try:
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = RUNNERS[name](dicts, tmp)
        result.update(
            name=name, steps=steps, keys=keys, points=steps * keys,
            rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            rss_workload_mb=rss_before / 1024,  # the pre-built dicts alone, before the contender
            helper_rss_mb=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # SDK atexit hooks have run their finish already; skip their slow teardown


# ---------------------------------------------------------------------- parent side
def measure(name: str, steps: int, keys: int) -> dict:
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_MODE": "offline", "SWANLAB_MODE": "offline",
           "TRACKSTORE_DISABLE_GIT": "1", "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory(prefix="tsbench-home-") as home:
        env["HOME"] = home  # SDK settings and caches stay out of the user's home
        proc = subprocess.run([sys.executable, __file__, "--child", name, "--steps", str(steps), "--keys", str(keys)],
                              capture_output=True, text=True, env=env, cwd=home, timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"name": name, "error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]}


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" if x >= 1e3 else f"{x:.0f}"


def report(results: dict[str, dict]) -> str:
    lines = []
    head = (f"{'contender':<12} {'points':>9} {'init s':>7} {'loop s':>8} {'finish s':>8} {'calls/s':>9} "
            f"{'loop pts/s':>10} {'loop+fin pts/s':>14} {'rss MB':>7} {'base MB':>7} {'helper MB':>9} {'B/Mpt':>10} {'B/pt':>6}")
    lines += [head, "-" * len(head)]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"{name:<12} not measured: {r['error']}")
            continue
        loop, total = r["loop_s"], r["loop_s"] + r["finish_s"]
        r["calls_per_s"] = r["steps"] / loop if loop else float("inf")
        r["loop_points_per_s"] = r["points"] / loop if loop else float("inf")
        r["total_points_per_s"] = r["points"] / total if total else float("inf")
        r["bytes_per_point"] = r["bytes"] / r["points"]
        lines.append(
            f"{name:<12} {r['points']:>9,} {r['init_s']:>7.2f} {loop:>8.3f} {r['finish_s']:>8.3f} "
            f"{fmt_rate(r['calls_per_s']):>9} {fmt_rate(r['loop_points_per_s']):>10} "
            f"{fmt_rate(r['total_points_per_s']):>14} {r['rss_mb']:>7.0f} {r['rss_workload_mb']:>7.0f} "
            f"{r['helper_rss_mb']:>9.0f} "
            f"{r['bytes_per_point'] * 1e6:>10,.0f} {r['bytes_per_point']:>6.1f}"
        )
    ts = results.get("trackstore", {})
    if "error" in ts or not ts:
        return "\n".join(lines)
    lines += ["", "ratios (trackstore vs ...)             measured   target"]

    def ratio(label, value, target, ok):
        lines.append(f"  {label:<36} {value:>8.2f}x  {target:<10} {'ok' if ok else 'MISSED'}")

    floor = results.get("floor", {})
    if "loop_s" in floor:
        x = (ts["loop_s"] / ts["points"]) / (floor["loop_s"] / floor["points"])
        ratio("loop time / pure-Python floor", x, "<= 3x", x <= 3)
    values_floor = results.get("floor-values", {})
    if "loop_s" in values_floor:
        x = (ts["loop_s"] / ts["points"]) / (values_floor["loop_s"] / values_floor["points"])
        lines.append(f"  {'loop time / values-only floor':<36} {x:>8.2f}x  (reference)")
    peers = {n: r for n, r in results.items() if n in ("wandb", "mlflow", "swanlab") and "error" not in r}
    for n, r in peers.items():
        x = ts["total_points_per_s"] / r["total_points_per_s"]
        target = ">= 20x" if n == "wandb" else ""
        lines.append(f"  {'loop+finish speed vs ' + n:<36} {x:>8.1f}x  {target:<10} "
                     f"{('ok' if x >= 20 else 'MISSED') if n == 'wandb' else ''}")
    if peers:
        fastest = max(peers, key=lambda n: peers[n]["total_points_per_s"])
        x = ts["total_points_per_s"] / peers[fastest]["total_points_per_s"]
        ratio(f"loop+finish vs fastest peer ({fastest})", x, ">= 10x", x >= 10)
    if ts["points"] >= 1_000_000:
        lines.append(f"  {'finish() of a 1M-point run':<36} {ts['finish_s']:>8.3f}s  {'< 1 s':<10} "
                     f"{'ok' if ts['finish_s'] < 1 else 'MISSED'}")
    else:
        lines.append(f"  finish() of a {ts['points']:,}-point run: {ts['finish_s']:.3f}s (run without --quick for 1M)")
    pq_ = results.get("parquet", {})
    if "bytes" in pq_:
        x = ts["bytes_per_point"] / pq_["bytes_per_point"]
        ratio("bytes vs plain zstd Parquet", x, "<= 1.2x", x <= 1.2)
    for n, r in peers.items():
        lines.append(f"  {'bytes: ' + n + ' / trackstore':<36} {r['bytes_per_point'] / ts['bytes_per_point']:>8.1f}x")
    lines += ["", "rss MB: peak RSS of the contender's process; base MB: the same process before the contender",
              "was imported (interpreter + pre-built dicts); helper MB: largest helper process it waited for.",
              "B/Mpt, B/pt: bytes on disk per million points and per point."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small run (a few seconds per contender)")
    ap.add_argument("--keys", type=int, default=50, help="metrics per step (default 50)")
    ap.add_argument("--steps", type=int, default=None, help="steps for trackstore, floor and parquet (default 20000)")
    ap.add_argument("--only", default=",".join(CONTENDERS), help="comma-separated contenders to run")
    ap.add_argument("--repeat", type=int, default=None,
                    help="runs per contender, the fastest (loop + finish) is reported (default 3, 1 with --quick)")
    ap.add_argument("--json", action="store_true", help="also print the raw figures as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.steps, args.keys)
        return 0
    plan = dict(QUICK if args.quick else STEPS)
    if args.steps:
        scale = args.steps / plan["trackstore"]
        plan = {n: max(10, int(s * scale)) for n, s in plan.items()}
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    repeat = args.repeat or (1 if args.quick else 3)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"log throughput: {args.keys} keys/step, python {sys.version.split()[0]}, {os.cpu_count()} cores, "
          f"load average {load} at start, best of {repeat} per contender")
    results = {}
    for name in names:
        print(f"  {name}: {plan[name]:,} steps x {repeat} ...", flush=True)
        runs = [measure(name, plan[name], args.keys) for _ in range(repeat)]
        good = [r for r in runs if "error" not in r]
        results[name] = min(good, key=lambda r: r["loop_s"] + r["finish_s"]) if good else runs[-1]
    print()
    print(report(results))
    print(f"load average {'/'.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
