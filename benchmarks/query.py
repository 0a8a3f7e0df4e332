"""Query speed: trackstore's DuckDB views vs MLflow's sqlite store on the same questions.

    .venv/bin/python benchmarks/query.py            # stores of 10M and 50M points (builds take minutes)
    .venv/bin/python benchmarks/query.py --quick    # 1M and 5M points, for a quick look

Stores are built once under ``--dir`` (default ``/tmp/trackstore-bench``) and reused when the
sizes match. Parts are written with :func:`trackstore.store.parts.write_part` (the writer's own
schema, encodings and atomic rename), so they are exactly what training leaves on disk:
``runs`` runs x ``steps`` steps x ``keys`` keys, in 5 part files per run (one per flush), plus
100,000 samples (a fifth of them mention "reward hacking" somewhere in their text). Each store
is then asked the questions twice:

* **as finished runs leave it**: every run merged by
  :func:`trackstore.store.merge.compact_finished_run`, what ``finish()`` does when a run's last
  writer ends (one key-clustered metrics part per run);
* **as flushed**: the 5 parts per run as they are while runs are still being written (or
  finished with ``compact=False``).

The questions:

1. latest value of every key of every run (``SELECT project, run_id, key, value FROM latest``);
2. mean of one key over a step window, per run, across all runs;
3. a 1,000-point downsampled curve of one key of one run (:func:`trackstore.read.overview.curves`,
   what ``trackstore plot`` draws);
4. a LIKE search over the 100,000 samples.

"warm" is the fastest of 5 runs on an open connection; "cold" is a new connection plus its
first query (for the curve, which needs no connection, its first call). MLflow answers the
same questions over a smaller sqlite store (``search_runs`` reads its latest-metric table,
``get_metric_history`` per run for the window mean and the curve, ``load_table`` + a substring
filter for samples); times are scaled per point (per sample for question 4, per point of one
equally long history for the curve) and the ratio is MLflow's time per point over trackstore's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KEYS_PER_RUN = 20
PARTS_PER_RUN = 5
SAMPLES = 100_000
WARM_REPEAT = 5
PHRASE = "reward hacking"


# ---------------------------------------------------------------------- building stores
def build_store(root: Path, runs: int, steps: int, keys: int = KEYS_PER_RUN, samples: int = SAMPLES) -> None:
    """Write ``runs x steps x keys`` metric points and ``samples`` samples in the store layout."""
    import numpy as np
    import pyarrow as pa

    from trackstore.store import schema
    from trackstore.store.clock import iso
    from trackstore.store.layout import RunPaths, part_file_name
    from trackstore.store.meta import write_run_json
    from trackstore.store.parts import write_part

    marker = root / "_bench.json"
    spec = {"runs": runs, "steps": steps, "keys": keys, "samples": samples, "v": 4}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return
    if root.exists():
        shutil.rmtree(root)
    rng = np.random.default_rng(0)
    key_names = pa.array([f"actor/k{i}" if i else "critic/score/mean" for i in range(keys)])
    words = np.array("the model answer reward policy step token value loss proof so thus we get".split())
    per_run_samples = max(1, samples // runs)
    t0 = time.time()
    now = time.time()
    for r in range(runs):
        paths = RunPaths(root, f"proj{r % 4}", f"run{r:05d}")
        start_us = int((now - 86400 + r * 60) * 1e6)
        write_run_json(paths, {
            "project": paths.project, "run_id": paths.run_id, "name": f"exp{r}", "status": "finished",
            "created_at": iso(start_us / 1e6), "ended_at": iso(start_us / 1e6 + steps), "last_step": steps - 1,
            "config": {"lr": [1e-6, 3e-6, 1e-5][r % 3], "seed": r}, "tags": ["bench"],
        }, durable=False)
        per = steps // PARTS_PER_RUN
        walk = np.cumsum(rng.standard_normal((steps, keys)) * 0.01, axis=0)  # smooth, like real curves
        for j in range(PARTS_PER_RUN):
            lo, hi = j * per, (steps if j == PARTS_PER_RUN - 1 else (j + 1) * per)
            st = np.arange(lo, hi, dtype=np.int64)
            n = len(st) * keys
            idx = np.tile(np.arange(keys, dtype=np.int32), len(st))
            key_col = pa.DictionaryArray.from_arrays(pa.array(idx), key_names).cast(pa.string())
            table = pa.Table.from_arrays([
                pa.array(np.repeat(st, keys)), key_col, pa.array(walk[lo:hi].reshape(-1)),
                pa.array(start_us + np.repeat(st, keys) * 1_000_000).cast(schema.TS_TYPE),
                pa.repeat(pa.scalar("bench-1-000000"), n), pa.array(np.arange(lo * keys, lo * keys + n, dtype=np.int64)),
            ], schema=schema.with_metadata(schema.METRIC_POINTS, "metrics"))
            write_part(paths.kind_dir("metrics") / part_file_name("bench-1-000000", lo * keys), table, "metrics")
        texts = [" ".join(rng.choice(words, 40)) + (f" ... {PHRASE} detected" if i % 5 == 0 else "")
                 for i in range(per_run_samples)]
        rows = pa.table({
            "step": pa.array(np.arange(per_run_samples) // 16 * 10, pa.int64()),
            "split": pa.array(["val"] * per_run_samples),
            "sample_index": pa.array(np.arange(per_run_samples) % 16, pa.int64()),
            "input": pa.array([f"question {i}" for i in range(per_run_samples)]),
            "output": pa.array(texts),
            "score": pa.array(rng.integers(0, 2, per_run_samples).astype(float)),
            "extra": pa.array([None] * per_run_samples, pa.string()),
            "json_fields": pa.array([None] * per_run_samples, pa.list_(pa.string())),
            "ts": pa.array(np.full(per_run_samples, start_us), pa.int64()).cast(schema.TS_TYPE),
            "writer": pa.array(["bench-1-000000"] * per_run_samples),
            "seq": pa.array(np.arange(per_run_samples, dtype=np.int64)),
        }).select(schema.SAMPLES.names).cast(schema.with_metadata(schema.SAMPLES, "samples"))
        write_part(paths.kind_dir("samples") / part_file_name("bench-1-000000", 0), rows, "samples")
    marker.write_text(json.dumps(spec))
    print(f"  built {root} in {time.time() - t0:.1f} s ({_du(root) / 1e6:.0f} MB)", flush=True)


def finished_copy(root: Path) -> Path:
    """A copy of ``root`` as finished runs leave it: each run merged as ``finish()`` merges it."""
    from trackstore.read.listing import list_runs
    from trackstore.store.merge import compact_finished_run

    out = root.with_name(root.name + "-finished")
    marker = (root / "_bench.json").read_text()
    if (out / "_bench.json").exists() and (out / "_bench.json").read_text() == marker:
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(root, out)
    (out / "_bench.json").unlink()
    t0 = time.perf_counter()
    runs = list_runs(out)
    for r in runs:
        res = compact_finished_run(r.paths)
        if not res.changed:
            raise SystemExit(f"finish-time compaction did not merge {r.run_id}: {res.skipped}")
    took = time.perf_counter() - t0
    (out / "_bench.json").write_text(marker)
    print(f"  merged {len(runs)} runs as finish() does in {took:.1f} s ({took / len(runs) * 1000:.0f} ms per run "
          f"of {_points(out) // len(runs):,} points; {_du(out) / 1e6:.0f} MB)", flush=True)
    return out


def _points(root: Path) -> int:
    spec = json.loads((root / "_bench.json").read_text()) if (root / "_bench.json").exists() else None
    return spec["runs"] * spec["steps"] * spec["keys"] if spec else 0


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ---------------------------------------------------------------------- trackstore side
def trackstore_questions(root: Path, steps: int) -> dict[str, tuple[float, float, int]]:
    """{question: (cold seconds, warm median seconds, result rows)}."""
    from trackstore.read.listing import resolve_run
    from trackstore.read.overview import curves
    from trackstore.read.views import connect, run_sql

    lo, hi = steps // 4, steps // 2
    run = resolve_run("run00001", root)
    questions = {
        "latest": lambda con: run_sql(con, "SELECT project, run_id, key, value FROM latest"),
        "window_mean": lambda con: run_sql(
            con, "SELECT project, run_id, avg(value) AS mean FROM metrics WHERE key = $k AND step BETWEEN $lo AND $hi "
                 "GROUP BY ALL", {"k": "critic/score/mean", "lo": lo, "hi": hi}),
        "curve_1000": lambda con: curves([run], ["critic/score/mean"], points=1000),  # reads the run's files
        "samples_like": lambda con: run_sql(
            con, "SELECT project, run_id, step, sample_index FROM samples WHERE output LIKE $pat",
            {"pat": f"%{PHRASE}%"}),
    }
    out = {}
    t0 = time.perf_counter()
    connect(root, sync_state=False).close()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    connect(root, sync_state=False).close()
    print(f"  connect: {first:.2f} s first in the process (checks every part's footer), "
          f"{time.perf_counter() - t0:.2f} s again (footers cached)", flush=True)
    for name, fn in questions.items():
        t0 = time.perf_counter()
        con = None if name == "curve_1000" else connect(root, sync_state=False)  # curves need no connection
        rows = fn(con).num_rows
        cold = time.perf_counter() - t0
        out[name] = (cold, fastest_of(lambda fn=fn, con=con: fn(con)), rows)
        if con is not None:
            con.close()
    return out


def fastest_of(fn, repeat: int = WARM_REPEAT) -> float:
    """Fastest of ``repeat`` runs: on a shared machine, the least disturbed one."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


# ---------------------------------------------------------------------- MLflow side
def mlflow_questions(workdir: Path, runs: int, steps: int, keys: int, samples_per_run: int,
                     curve_steps: int) -> dict[str, float]:
    """Build an MLflow sqlite store of the same shape (smaller) and time the same questions."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    import mlflow
    import numpy as np
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    exp = client.create_experiment("bench", artifact_location=str(workdir / "artifacts"))
    rng = np.random.default_rng(0)
    key_names = [f"actor/k{i}" if i else "critic/score/mean" for i in range(keys)]
    words = np.array("the model answer reward policy step token value loss proof so thus we get".split())
    run_ids = []
    t0 = time.time()
    for r in range(runs):
        run = client.create_run(exp, run_name=f"exp{r}")
        run_ids.append(run.info.run_id)
        walk = np.cumsum(rng.standard_normal((steps, keys)) * 0.01, axis=0)
        batch = []
        for s in range(steps):
            for k in range(keys):
                batch.append(Metric(key_names[k], float(walk[s, k]), 1_700_000_000_000 + s * 1000, s))
                if len(batch) == 1000:
                    client.log_batch(run.info.run_id, metrics=batch)
                    batch = []
        if batch:
            client.log_batch(run.info.run_id, metrics=batch)
        texts = [" ".join(rng.choice(words, 40)) + (f" ... {PHRASE} detected" if i % 5 == 0 else "")
                 for i in range(samples_per_run)]
        client.log_table(run.info.run_id, {"step": [i // 16 * 10 for i in range(samples_per_run)], "output": texts},
                         artifact_file="samples.json")
        client.set_terminated(run.info.run_id)
    long_run = client.create_run(exp, run_name="long").info.run_id  # one key, as long as trackstore's runs
    walk = np.cumsum(rng.standard_normal(curve_steps) * 0.01)
    for lo_s in range(0, curve_steps, 1000):
        client.log_batch(long_run, metrics=[Metric("critic/score/mean", float(walk[s]), 1_700_000_000_000 + s * 1000, s)
                                            for s in range(lo_s, min(curve_steps, lo_s + 1000))])
    client.set_terminated(long_run)
    print(f"  built MLflow store ({runs} runs x {steps} steps x {keys} keys, plus one {curve_steps}-step run) "
          f"in {time.time() - t0:.1f} s", flush=True)
    lo, hi = steps // 4, steps // 2

    def latest():
        found = client.search_runs([exp], max_results=50_000)
        return {r.info.run_id: r.data.metrics for r in found}

    def window_mean():
        out = {}
        for rid in run_ids:
            vals = [m.value for m in client.get_metric_history(rid, "critic/score/mean") if lo <= m.step <= hi]
            out[rid] = sum(vals) / len(vals)
        return out

    def curve_1000():
        hist = sorted(client.get_metric_history(long_run, "critic/score/mean"), key=lambda m: m.step)
        width = max(1, len(hist) // 1000 + (len(hist) % 1000 > 0))
        return [sum(m.value for m in hist[i:i + width]) / len(hist[i:i + width]) for i in range(0, len(hist), width)]

    def samples_like():
        df = client.load_table(exp, "samples.json", run_ids=run_ids, extra_columns=["run_id"])
        return df[df["output"].str.contains(PHRASE, regex=False)]

    out = {}
    for name, fn in (("latest", latest), ("window_mean", window_mean), ("curve_1000", curve_1000),
                     ("samples_like", samples_like)):
        fn()
        out[name] = fastest_of(fn)
    return out


# ---------------------------------------------------------------------- report
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1M and 5M points instead of 10M and 50M")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "trackstore-bench",
                    help="where stores are built (reused between invocations)")
    ap.add_argument("--no-mlflow", action="store_true", help="skip the MLflow comparison")
    args = ap.parse_args()
    sizes = [(100, 500), (250, 1000)] if args.quick else [(200, 2500), (500, 5000)]  # (runs, steps) x 20 keys
    mlflow_shape = (10, 100) if args.quick else (20, 250)  # runs, steps (x 20 keys): 20k / 100k points
    print(f"machine: {os.cpu_count()} cores; duckdb threads = cores; {_load()}")
    print(f"warm = fastest of {WARM_REPEAT} on an open connection; cold = a new connection + its first query "
          "(the curve needs no connection: its first call)")
    results: dict[tuple[str, int], dict] = {}
    for runs, steps in sizes:
        points = runs * steps * KEYS_PER_RUN
        root = args.dir / f"store-{points // 1_000_000}M"
        print(f"\n== {points / 1e6:.0f}M points ({runs} runs x {steps} steps x {KEYS_PER_RUN} keys, "
              f"{SAMPLES // runs * runs:,} samples)", flush=True)
        build_store(root, runs, steps)
        for layout, store in (("finished", finished_copy(root)), ("flushed", root)):
            label = ("as finished runs leave it (1 metrics part per run)" if layout == "finished"
                     else f"as flushed ({runs * PARTS_PER_RUN} metrics parts: runs still being written)")
            print(f"  -- {label}", flush=True)
            res = trackstore_questions(store, steps)
            results[(layout, points)] = res
            for q, (cold, warm, rows) in res.items():
                print(f"  {q:<16} warm {warm * 1000:8.1f} ms   cold {cold * 1000:8.1f} ms   ({rows} rows)")
            print(f"  ({_load()})", flush=True)
    biggest = max(p for _l, p in results)
    if args.no_mlflow:
        return 0
    mruns, msteps = mlflow_shape
    mpoints = mruns * msteps * KEYS_PER_RUN
    msamples_per_run = 500
    print(f"\n== MLflow {__import__('mlflow').__version__} over sqlite, {mpoints:,} points ({mruns} runs x {msteps} steps x "
          f"{KEYS_PER_RUN} keys), {mruns * msamples_per_run:,} samples as logged tables", flush=True)
    curve_steps = max(s for _r, s in sizes)
    with tempfile.TemporaryDirectory() as tmp:
        mres = mlflow_questions(Path(tmp), mruns, msteps, KEYS_PER_RUN, msamples_per_run, curve_steps)
    for q, t in mres.items():
        print(f"  {q:<16} {t * 1000:8.1f} ms")
    print(f"  ({_load()})")
    print(f"\n== per point: trackstore at {biggest / 1e6:.0f}M points (warm) vs MLflow (per sample for samples_like, "
          f"per point of the {curve_steps}-step history for the curves)")
    rows = [(f"{q} ({layout})", v) for layout in ("finished", "flushed") for q, v in results[(layout, biggest)].items()]
    for label, (cold, warm, _rows) in rows:
        q = label.split(" ")[0]
        if q == "samples_like":
            ts_unit, ml_unit = warm / SAMPLES, mres[q] / (mruns * msamples_per_run)
        elif q == "curve_1000":  # one run's history of one key, same length on both sides
            ts_unit, ml_unit = warm / curve_steps, mres[q] / curve_steps
        else:
            ts_unit, ml_unit = warm / biggest, mres[q] / mpoints
        print(f"  {label:<26} trackstore {ts_unit * 1e9:10.2f} ns   MLflow {ml_unit * 1e9:11.2f} ns   "
              f"ratio {ml_unit / ts_unit:8.1f}x   under 1 s: {'yes' if warm < 1 and cold < 1 else 'NO'} "
              f"(warm {warm:.3f} s, cold {cold:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
