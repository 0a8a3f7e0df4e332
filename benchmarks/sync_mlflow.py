"""Replay throughput into MLflow: trackstore sync vs the naive and the raw ways, in one run.

    python benchmarks/sync_mlflow.py            # 100 keys x 2000 steps = 200k points
    python benchmarks/sync_mlflow.py --quick    # 50 keys x 200 steps
    python benchmarks/sync_mlflow.py --no-server

Contenders, on the same points (original steps and timestamps):

* ``trackstore sync``   the engine + MLflow adapter (cursor fsynced twice per batch)
* ``raw log_batch``     MlflowClient.log_batch with 1000 metrics per call, no engine (the floor)
* ``naive per step``    mlflow.log_metrics(dict, step=s) per step, as verl's MLflow backend does
                        online (measured on a subset and scaled per point)

each into a fresh sqlite store, and (unless --no-server) into a local ``mlflow server``, best
of ``--repeat`` rounds after an untimed warm-up of the target, contenders taking turns to go
first. Prints points/s and the ratios against the floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def make_store(root: Path, keys: int, steps: int, project: str = "bench"):
    import random

    import trackstore

    rng = random.Random(0)
    run = trackstore.init(project, name="sync-bench", root=root)
    for s in range(steps):
        run.log({f"actor/k{i:03d}": rng.random() for i in range(keys)}, step=s)
    run.finish()
    return run


def local_points(run):
    import pyarrow.parquet as pq

    t = pq.read_table(run.dir / "metrics")
    ts = t.column("ts").cast("int64").to_pylist()
    return list(zip(t.column("key").to_pylist(), t.column("value").to_pylist(), [x // 1000 for x in ts],
                    t.column("step").to_pylist()))


def bench_trackstore(root: Path, uri: str) -> float:
    from mlflow.tracking import MlflowClient

    from trackstore.sync import SyncOptions, TargetOptions, sync

    MlflowClient(tracking_uri=uri).search_experiments()  # create the DB before timing, as for the others
    t0 = time.perf_counter()
    report = sync(root, "mlflow", SyncOptions(), TargetOptions(uri=uri))
    dt = time.perf_counter() - t0
    assert report.ok, [r.error for r in report.runs]
    return dt


def bench_raw(points, uri: str, experiment: str = "raw") -> float:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    exp = c.create_experiment(experiment)
    rid = c.create_run(exp).info.run_id
    metrics = [Metric(k, v, ts, s) for k, v, ts, s in points]
    t0 = time.perf_counter()
    for i in range(0, len(metrics), 1000):
        c.log_batch(rid, metrics=metrics[i:i + 1000])
    return time.perf_counter() - t0


def bench_naive(points, uri: str, max_steps: int) -> tuple[float, int]:
    import mlflow

    by_step: dict[int, dict] = {}
    for k, v, _ts, s in points:
        by_step.setdefault(s, {})[k] = v
    steps = sorted(by_step)[:max_steps]
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("naive")
    n = 0
    with mlflow.start_run():
        t0 = time.perf_counter()
        for s in steps:
            mlflow.log_metrics(by_step[s], step=s)
            n += len(by_step[s])
        dt = time.perf_counter() - t0
    return dt, n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and "proxy" not in k.lower()}
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}", "--workers", "1",
                             "--artifacts-destination", str(tmp / "artifacts")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not start")


def run_suite(label: str, uri_for, tmp: Path, args) -> tuple[list[tuple], int]:
    """Best of ``args.repeat`` rounds per contender, after an untimed warm-up of the target.

    The first requests a fresh MLflow server (or sqlite file) answers are several times slower
    than later ones (lazy imports, first queries, cold caches): whoever went first would pay
    for it. Every round uses a fresh project / experiment, so nothing is ever sent twice, and
    the contenders take turns going first.
    """
    stores = []
    for r in range(args.repeat):  # one store per round: each round's sync creates its own experiment
        root = tmp / f"store-{label}-{r}"
        stores.append((root, make_store(root, args.keys, args.steps, project=f"bench-{label}-{r}")))
    points = local_points(stores[0][1])
    n = len(points)
    bench_raw(points[:5000], uri_for("warmup"), experiment=f"warmup-{label}")
    best: dict[str, float] = {}
    n_naive = 0

    def timed(name: str, r: int) -> None:
        nonlocal n_naive
        if name == "ts":
            dt = bench_trackstore(stores[r][0], uri_for(f"ts{r}"))
        elif name == "raw":
            dt = bench_raw(points, uri_for(f"raw{r}"), experiment=f"raw-{label}-{r}")
        else:
            dt, n_naive = bench_naive(points, uri_for(f"naive{r}"), args.naive_steps)
            dt = dt / n_naive * n  # per point, scaled to the full workload
        best[name] = min(best.get(name, dt), dt)

    order = ["ts", "raw", "naive"]
    for r in range(args.repeat):
        for name in order[r % 3:] + order[:r % 3]:
            timed(name, r)
    t_ts, t_raw, t_naive = best["ts"], best["raw"], best["naive"]
    return [
        (label, "trackstore sync", n / t_ts, t_raw / t_ts),
        (label, "raw log_batch (floor)", n / t_raw, 1.0),
        (label, f"naive log_metrics per step ({n_naive} pts/round)", n / t_naive, t_raw / t_naive),
    ], n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--naive-steps", type=int, default=100)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="rounds per contender; the best is reported")
    args = ap.parse_args()
    if args.quick:
        args.keys, args.steps, args.naive_steps = 50, 200, 20
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    tmp = Path(tempfile.mkdtemp(prefix="ts-bench-sync-"))
    try:
        rows, n = run_suite("sqlite", lambda name: f"sqlite:///{tmp / (name + '.db')}", tmp, args)
        if not args.no_server:
            proc, url = start_server(tmp)
            try:
                rows += run_suite("server", lambda name: url, tmp, args)[0]
            finally:
                os.killpg(proc.pid, 9)
        print(f"\nMLflow replay, {n:,} points ({args.keys} keys x {args.steps} steps), "
              f"{os.cpu_count()} cores, best of {args.repeat} rounds after a warm-up, load average "
              + "/".join(f"{x:.1f}" for x in os.getloadavg()))
        print(f"{'store':8} {'contender':45} {'points/s':>12} {'vs floor':>9}")
        for store, name, rate, ratio in rows:
            print(f"{store:8} {name:45} {rate:12,.0f} {ratio:8.2f}x")
        for store in sorted({r[0] for r in rows}):
            ts = next(r for r in rows if r[0] == store and r[1] == "trackstore sync")
            naive = next(r for r in rows if r[0] == store and r[1].startswith("naive"))
            print(f"{store}: trackstore sync is {ts[2] / naive[2]:.1f}x faster than per-step logging, "
                  f"{1 / ts[3]:.2f}x the time of the raw log_batch floor")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
