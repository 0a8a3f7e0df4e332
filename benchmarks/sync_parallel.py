"""``trackstore sync --jobs N`` over a slow link: runs/s and points/s for N = 1, 2, 4, 8, in one run.

    python benchmarks/sync_parallel.py                       # 64 runs x 20,000 points, 50 ms per request
    python benchmarks/sync_parallel.py --runs 16 --points 2000   # a quick look
    python benchmarks/sync_parallel.py --processes           # also: N separate sync processes

A local ``mlflow server`` (sqlite backend, ``tests/servers.py``'s server with MLflow's default of
4 worker processes; ``--server-workers 1`` is how the tests start it) is reached through
``tests/proxy.py``'s proxy, which holds every request 50 ms (``--latency``) before forwarding it:
a link with that round-trip time. Each ``--jobs`` level syncs its own store of ``--runs`` runs
(``--points`` points each: 20 keys x points/20 steps) into its own experiment, through the
library entry point the CLI calls (``trackstore.sync.sync``). Printed: the measured round trip
through the proxy and directly (the anchor that shows the link is what it says), then per level
the time, runs/s, points/s and the ratio to ``--jobs 1`` measured in the same run.

``--direct`` adds ``--jobs 1`` and the largest ``--jobs`` straight to the server (no proxy):
the difference to the proxied ``--jobs 1`` is what the link costs, and the direct largest level
is what the server itself allows (on one machine the server's own CPU bounds every level).

``--processes`` adds the other way to be parallel: N ``trackstore sync`` processes started at
once on one store (the per-run locks split the runs between them), which is what threads are
measured against (docs/performance.md).

After each level the benchmark checks, in the server's own database, that MLflow holds every
point exactly once: one remote run per local run, and the (key, step, timestamp, value) rows of
each equal to the local ones (same count, same set). It exits 1 if not.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KEYS = 20


def make_store(root: Path, project: str, runs: int, points: int, seed: int) -> dict[str, list[tuple]]:
    """``runs`` finished runs of ``points`` points each; returns the expected points per run id."""
    import trackstore

    rng = random.Random(seed)
    steps = max(1, points // KEYS)
    for i in range(runs):
        run = trackstore.init(project, name=f"r{i:03d}", root=root)
        for s in range(steps):
            run.log({f"actor/k{j:02d}": rng.random() for j in range(KEYS)}, step=s)
        run.finish()
    return local_points(root, project)


def local_points(root: Path, project: str) -> dict[str, list[tuple]]:
    import pyarrow.parquet as pq

    out = {}
    for run_dir in sorted((root / f"project={project}").glob("run=*")):
        t = pq.read_table(run_dir / "metrics")
        ts = [x // 1000 for x in t.column("ts").cast("int64").to_pylist()]
        out[run_dir.name[4:]] = sorted(zip(t.column("key").to_pylist(), t.column("step").to_pylist(), ts,
                                           t.column("value").to_pylist()))
    return out


def check_exactly_once(db: Path, project: str, want: dict[str, list[tuple]]) -> str | None:
    """None when MLflow holds every point of every run once; else what is wrong."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        exp = con.execute("SELECT experiment_id FROM experiments WHERE name = ?", (project,)).fetchone()
        if exp is None:
            return f"no experiment {project!r}"
        remote = con.execute("SELECT t.value, r.run_uuid FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
                             "WHERE r.experiment_id = ? AND t.key = 'trackstore.run_id'", (exp[0],)).fetchall()
        by_run: dict[str, list[str]] = {}
        for run_id, uuid in remote:
            by_run.setdefault(run_id, []).append(uuid)
        for run_id, points in want.items():
            uuids = by_run.get(run_id, [])
            if len(uuids) != 1:
                return f"{run_id}: {len(uuids)} remote runs"
            got = sorted(con.execute("SELECT key, step, timestamp, value FROM metrics WHERE run_uuid = ?",
                                     (uuids[0],)).fetchall())
            if got != points:
                return f"{run_id}: {len(got)} points at MLflow, {len(points)} stored, or different values"
        if len(by_run) != len(want):
            return f"{len(by_run)} remote runs for {len(want)} local ones"
    finally:
        con.close()
    return None


def round_trip(url: str, n: int = 20) -> float:
    """Median seconds of a small REST request to ``url``."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        with opener.open(f"{url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=30) as resp:
            resp.read()
        times.append(time.perf_counter() - t0)
    return sorted(times)[n // 2]


def sync_threads(root: Path, url: str, jobs: int) -> float:
    from trackstore.sync import SyncOptions, TargetOptions, sync

    t0 = time.perf_counter()
    report = sync(root, "mlflow", SyncOptions(), TargetOptions(uri=url), jobs=jobs)
    dt = time.perf_counter() - t0
    bad = [(r.run_id, r.error) for r in report.runs if not r.ok]
    if bad:
        raise SystemExit(f"--jobs {jobs}: runs failed: {bad[:3]}")
    return dt


def sync_processes(root: Path, url: str, n: int) -> float:
    """``n`` ``trackstore sync --jobs 1`` processes at once on one store (the per-run locks split the runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    cmd = [sys.executable, "-m", "trackstore.cli.main", "sync", "--to", "mlflow", "--uri", url, "--jobs", "1",
           "--format", "json", "--root", str(root)]
    logs = [root.parent / f"{root.name}-proc{i}.log" for i in range(n)]
    t0 = time.perf_counter()
    procs = []
    for log in logs:
        with open(log, "w") as f:
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=f))
    codes = [p.wait() for p in procs]
    dt = time.perf_counter() - t0
    # 6: some runs were being sent by a sibling at the end (each run is sent by exactly one of them)
    if any(c not in (0, 6) for c in codes):
        raise SystemExit(f"{n} processes: exit codes {codes}: {logs[0].read_text()[-500:]}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=64)
    ap.add_argument("--points", type=int, default=20000, help="points per run (20 keys x points/20 steps)")
    ap.add_argument("--latency", type=float, default=0.05, help="seconds the proxy holds each request")
    ap.add_argument("--jobs", default="1,2,4,8")
    ap.add_argument("--processes", action="store_true", help="also N separate sync processes (N = the largest --jobs)")
    ap.add_argument("--server-workers", type=int, default=4, help="worker processes of the mlflow server "
                    "(default 4, `mlflow server`'s own default; the tests start it with 1)")
    ap.add_argument("--direct", action="store_true", help="also --jobs 1 and the largest --jobs straight to the "
                    "server, no proxy: what the link costs, and what the server itself allows")
    args = ap.parse_args()
    levels = [int(x) for x in args.jobs.split(",")]
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from tests.proxy import FaultyProxy
    from tests.servers import MlflowServer

    tmp = Path(tempfile.mkdtemp(prefix="ts-bench-parallel-"))
    server = MlflowServer(tmp / "server", extra_args=["--workers", str(args.server_workers)])
    try:
        t0 = time.perf_counter()
        contenders = [(f"--jobs {j}", j, "threads") for j in levels]
        if args.processes:
            contenders.append((f"{max(levels)} processes", max(levels), "processes"))
        if args.direct:
            contenders += [("--jobs 1, no proxy", 1, "direct"), (f"--jobs {max(levels)}, no proxy", max(levels), "direct")]
        stores = {}
        for i, (label, _n, _how) in enumerate(contenders):
            project = f"bench-{i}"
            stores[label] = (tmp / f"store-{i}", project, make_store(tmp / f"store-{i}", project, args.runs,
                                                                     args.points, seed=i))
        print(f"stores written in {time.perf_counter() - t0:.0f} s", flush=True)
        server.start()
        with FaultyProxy("127.0.0.1", server.port) as proxy:
            proxy.latency(args.latency)
            direct, slow = round_trip(server.url), round_trip(proxy.url)
            warm = tmp / "warm"  # the server's first requests are slow: pay for them untimed
            make_store(warm, "warmup", 2, 2000, seed=99)
            sync_threads(warm, proxy.url, 2)
            rows = []
            for label, n, how in contenders:
                root, project, want = stores[label]
                if how == "processes":
                    dt = sync_processes(root, proxy.url, n)
                else:
                    dt = sync_threads(root, server.url if how == "direct" else proxy.url, n)
                problem = check_exactly_once(server.db_path, project, want)
                points = sum(len(p) for p in want.values())
                rows.append((label, dt, args.runs / dt, points / dt, problem))
                print(f"  {label}: {dt:.1f} s{'' if problem is None else '  NOT EXACT: ' + problem}", flush=True)
        base = rows[0][1]
        print(f"\nsync --jobs N to a local mlflow server through a proxy adding {args.latency * 1000:.0f} ms per "
              f"request: {args.runs} runs x {args.points:,} points, {os.cpu_count()} cores, load average "
              + "/".join(f"{x:.1f}" for x in os.getloadavg()))
        print(f"server: {args.server_workers} worker process{'es' if args.server_workers != 1 else ''}, sqlite backend")
        print(f"round trip of a small request: {direct * 1000:.1f} ms direct, {slow * 1000:.1f} ms through the proxy")
        print(f"{'contender':20} {'seconds':>8} {'runs/s':>8} {'points/s':>10} {'vs --jobs 1':>12}  exactly once")
        for label, dt, rps, pps, problem in rows:
            print(f"{label:20} {dt:8.1f} {rps:8.2f} {pps:10,.0f} {base / dt:11.2f}x  "
                  f"{'yes' if problem is None else 'NO: ' + problem}")
        if any(r[4] for r in rows):
            sys.exit(1)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
