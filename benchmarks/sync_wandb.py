"""Replay throughput into wandb (offline mode): trackstore sync next to the wandb client's own logging.

    python benchmarks/sync_wandb.py            # 20 keys x 3000 steps = 60k points
    python benchmarks/sync_wandb.py --quick    # 10 keys x 300 steps

Contenders, on the same points, each into its own fresh ``WANDB_DIR`` with ``WANDB_MODE=offline``
(the same client and wandb-core; no network, so this measures the client side):

* ``trackstore sync``   engine + wandb adapter: one ``run.log(row, step=s, commit=True)`` per step
                        with the original ``_timestamp``, a transaction-log barrier per batch, the
                        cursor fsynced twice per batch; includes ``wandb.init`` and ``finish``
* ``wandb client``      a plain loop ``run.log(row, step=s)`` over the same rows, as a training
                        script would log them; includes ``wandb.init`` and ``finish`` (the floor)

Each contender runs in its own subprocess (wandb keeps process-wide state). Prints points/s,
steps/s and the ratio against the client's own speed, plus the barrier cost per batch.
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
sys.path.insert(0, str(REPO))

CHILD_CLIENT = r"""
import json, os, sys, time
rows = json.load(open(sys.argv[1]))
t0 = time.perf_counter()
import wandb
run = wandb.init(project="bench", id="rawclient", settings=wandb.Settings(console="off", quiet=True, silent=True,
                 x_disable_stats=True, disable_git=True, save_code=False, x_save_requirements=False))
for step, row in rows:
    run.log(row, step=step)
run.finish()
print(time.perf_counter() - t0)
"""

CHILD_SYNC = r"""
import sys, time
t0 = time.perf_counter()
from trackstore.sync import SyncOptions, TargetOptions, sync
report = sync(sys.argv[1], "wandb", SyncOptions(batch_size=int(sys.argv[2]) if sys.argv[2] != "0" else None),
              TargetOptions())
assert report.ok, [r.error for r in report.runs]
print(time.perf_counter() - t0)
"""


def make_store(root: Path, keys: int, steps: int):
    import random

    import trackstore

    rng = random.Random(0)
    run = trackstore.init("bench", name="sync-bench", root=root)
    rows = []
    for s in range(steps):
        row = {f"actor/k{i:02d}": rng.random() for i in range(keys)}
        run.log(row, step=s)
        rows.append((s, row))
    run.finish()
    return rows


def child(code: str, args: list[str], wandb_dir: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_DIR=str(wandb_dir), WANDB_SILENT="true")
    wandb_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True,
                         cwd=str(wandb_dir))
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch-size", type=int, default=0, help="rows per sync batch (default: the adapter's 5000)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.keys, args.steps = 10, 300
    tmp = Path(tempfile.mkdtemp(prefix="ts-bench-wandb-"))
    try:
        root = tmp / "store"
        rows = make_store(root, args.keys, args.steps)
        rows_file = tmp / "rows.json"
        rows_file.write_text(json.dumps(rows))
        points = args.keys * args.steps
        t_client = child(CHILD_CLIENT, [str(rows_file)], tmp / "client")
        t_sync = child(CHILD_SYNC, [str(root), str(args.batch_size)], tmp / "sync")
        size = args.batch_size or 5000
        batches = -(-points // size)
        print(f"\nwandb replay (offline), {points:,} points ({args.keys} keys x {args.steps} steps), "
              f"{os.cpu_count()} cores, {batches} sync batches")
        print(f"{'contender':38} {'seconds':>8} {'points/s':>11} {'steps/s':>9} {'vs client':>10}")
        for name, t in (("trackstore sync --to wandb", t_sync), ("wandb client run.log loop (floor)", t_client)):
            print(f"{name:38} {t:8.2f} {points / t:11,.0f} {args.steps / t:9,.0f} {t_client / t:9.2f}x")
        print(f"trackstore sync takes {t_sync / t_client:.2f}x the time of the client's own logging loop "
              f"(barrier + cursor: {(t_sync - t_client) / batches * 1000:+.0f} ms per batch)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
