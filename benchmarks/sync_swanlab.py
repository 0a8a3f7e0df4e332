"""Replay throughput into SwanLab: trackstore sync next to SwanLab's own logging speed, in one run.

    python benchmarks/sync_swanlab.py            # 50 keys x 2000 steps = 100k points
    python benchmarks/sync_swanlab.py --quick    # 20 keys x 300 steps
    python benchmarks/sync_swanlab.py --batch-size 500
    python benchmarks/sync_swanlab.py --repeat 3    # medians of 3 (the machine's cores are shared)

Contenders, on the same points, all with the real swanlab client in offline mode (the cloud
path is the same code; its ceiling is SwanLab's uploader, ~10,000 records per request every
1.5 s):

* ``trackstore sync``     the engine + SwanLab adapter: read Parquet, one ``log`` per (step,
                          original time), the cursor fsynced twice per batch, session ``finish``
* ``swanlab run.log``     the floor: ``swanlab.init`` + ``run.log(row, step=s)`` per step of
                          pre-built dicts + ``finish``, as a training loop would log them

Each contender runs in its own subprocess (SwanLab keeps one run per process) and the time
includes ``init`` and ``finish`` but not the Python and SDK imports. Prints points/s and the
ratio to the floor; the figures are for this machine, the ratio is what carries over.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MAKE = """
import random, sys, trackstore
rng = random.Random(0)
run = trackstore.init("bench", name="swanlab-bench", root=sys.argv[1])
for s in range({steps}):
    run.log({{f"actor/k{{i:03d}}": rng.random() for i in range({keys})}}, step=s)
run.finish()
print(run.id)
"""

TRACKSTORE = """
import json, sys, time
import swanlab  # imported before timing, as for the floor
from trackstore.sync import SyncOptions, TargetOptions, sync
t0 = time.perf_counter()
report = sync(sys.argv[1], "swanlab", SyncOptions(batch_size={batch}), TargetOptions(mode="offline", logdir=sys.argv[2]))
dt = time.perf_counter() - t0
assert report.ok, [r.error for r in report.runs]
print(json.dumps({{"seconds": dt, "points": report.runs[0].sent.get("metrics", 0)}}))
"""

FLOOR = """
import json, random, sys, time
import swanlab
from swanlab import Settings
from swanlab.sdk.internal.pkg import console
console.c.quiet = True
rng = random.Random(0)
rows = [{{f"actor/k{{i:03d}}": rng.random() for i in range({keys})}} for _ in range({steps})]
settings = Settings(interactive=False, terminal=Settings.Terminal(proxy_type="none"),
                    probe=Settings.Probe(hardware=False, runtime=False, requirements=False, conda=False, git=False,
                                         swanlab=False, monitor=False))
t0 = time.perf_counter()
run = swanlab.init(project="floor", mode="offline", log_dir=sys.argv[1], settings=settings)
for s, row in enumerate(rows):
    run.log(row, step=s)
run.finish()
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "points": {keys} * {steps}}}))
"""


def child(code: str, *args: str, env: dict) -> str:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=REPO)
    if res.returncode != 0:
        raise RuntimeError(res.stderr[-2000:])
    return res.stdout.strip().splitlines()[-1]


def count_written(logdir: Path) -> int:
    sys.path.insert(0, str(REPO))
    from trackstore.sync.swanlab import count_points

    total = 0
    for d in logdir.glob("run-*"):
        total += count_points(logdir, d.name.rsplit("-", 1)[-1])["metrics"]
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=50)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=None, help="rows per sync batch (default: the adapter's)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each contender; medians are printed")
    args = ap.parse_args()
    if args.quick:
        args.keys, args.steps = 20, 300
    tmp = Path(tempfile.mkdtemp(prefix="ts-bench-swanlab-"))
    env = {**os.environ, "HOME": str(tmp / "home"), "SWANLAB_ROOT": str(tmp / "swanlab-home"),
           "TRACKSTORE_DISABLE_GIT": "1", "PYTHONPATH": str(REPO)}
    env.pop("SWANLAB_API_KEY", None)
    try:
        root, ts_log, floor_log = tmp / "store", tmp / "ts-log", tmp / "floor-log"
        child(MAKE.format(keys=args.keys, steps=args.steps), str(root), env=env)
        n = args.keys * args.steps
        ts_runs, floor_runs = [], []
        for _ in range(max(1, args.repeat)):  # interleaved, so both see the same machine load
            for d in (root / "_sync", ts_log, floor_log):
                shutil.rmtree(d, ignore_errors=True)
            ts_runs.append(json.loads(child(TRACKSTORE.format(batch=args.batch_size), str(root), str(ts_log),
                                            env=env)))
            written = count_written(ts_log)
            assert written == n, f"trackstore sync wrote {written} of {n} points"
            floor_runs.append(json.loads(child(FLOOR.format(keys=args.keys, steps=args.steps), str(floor_log),
                                               env=env)))
        ts = sorted(ts_runs, key=lambda r: r["seconds"])[len(ts_runs) // 2]
        floor = sorted(floor_runs, key=lambda r: r["seconds"])[len(floor_runs) // 2]
        ts_rate, floor_rate = ts["points"] / ts["seconds"], floor["points"] / floor["seconds"]
        print(f"\nSwanLab replay (offline), {n:,} points ({args.keys} keys x {args.steps} steps), "
              f"{os.cpu_count()} cores, swanlab {_version()}, median of {len(ts_runs)}")
        print(f"{'contender':40} {'seconds':>8} {'points/s':>10} {'steps/s':>9} {'vs floor':>9}")
        for name, r, rate in (("trackstore sync", ts, ts_rate), ("swanlab run.log per step (floor)", floor, floor_rate)):
            print(f"{name:40} {r['seconds']:8.2f} {rate:10,.0f} {rate / args.keys:9,.0f} {rate / floor_rate:8.2f}x")
        print(f"trackstore sync runs at {ts_rate / floor_rate:.2f}x SwanLab's own logging speed "
              f"(read back: {written:,} points, exactly once)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("swanlab")
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
