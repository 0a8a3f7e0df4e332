"""What `trackstore ingest` costs beside the source's own reader alone, for a 1M-point wandb
offline run and a 1M-point TensorBoard event file.

    .venv/bin/python benchmarks/ingest.py            # both sources, 1M points each (built once, cached)
    .venv/bin/python benchmarks/ingest.py --points 200000

The sources (built once under ``/tmp/trackstore-bench-ingest/``): a wandb 0.31 offline run
logged by wandb itself (``wandb.init(mode="offline")``, 100 keys x 10,000 steps), and a
TensorBoard event file written by TensorBoard's own writer (``EventFileWriter``, 100 TF2-style
scalar tensors per step x 10,000 steps). Measured, each in a fresh process timed from outside
(median of ``--repeat``, after one untimed run):

1. **floor**: the source's own reader alone, reading every point: for wandb, the ``.wandb``
   records read with wandb's protobuf class (``trackstore.sync.wandb_log.LogReader``, which the
   project uses for it) and each history item's value decoded; for TensorBoard, every scalar
   read through its data server (``tensorboard-data-server``, the reader ``trackstore.sync.
   ingest.tensorboard`` uses), nothing downsampled.
2. **ingest**: ``trackstore ingest --from wandb|tensorboard SOURCE --root <fresh store>``, the
   whole command: discover, read, write the run. The ratio to the floor is the figure (target:
   within 1.5x).
3. **again**: the same command on the same store, nothing new (the run's rows are compared with
   the source's by content; nothing is written).

Anchors in the same run: ``python -c pass`` and ``trackstore --help`` (what any command pays to
start), and for TensorBoard also its ``EventAccumulator`` (the pure-Python fallback reader).
Each ingested store is checked: exactly the source's points.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path("/tmp/trackstore-bench-ingest")
KEYS = 100
BIN = Path(sys.executable).parent

WANDB_BUILD = r"""
import sys, wandb
steps, keys = int(sys.argv[2]), int(sys.argv[3])
names = [f"group{k // 10}/metric{k % 10}" for k in range(keys)]
run = wandb.init(project="bench", id="bench", mode="offline", dir=sys.argv[1], config={"lr": 1e-6})
for step in range(steps):
    run.log({k: step * 0.001 + i for i, k in enumerate(names)}, step=step)
run.finish()
"""

TB_BUILD = r"""
import sys, time
import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.plugins.scalar import metadata as scalar_metadata
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util
steps, keys = int(sys.argv[2]), int(sys.argv[3])
names = [f"group{k // 10}/metric{k % 10}" for k in range(keys)]
meta = scalar_metadata.create_summary_metadata(display_name="", description="")
w = EventFileWriter(sys.argv[1])
t0 = time.time() - steps
for step in range(steps):
    values = [summary_pb2.Summary.Value(tag=k, metadata=meta,
                                        tensor=tensor_util.make_tensor_proto(np.float32(step * 0.001 + i)))
              for i, k in enumerate(names)]
    w.add_event(event_pb2.Event(wall_time=t0 + step, step=step, summary=summary_pb2.Summary(value=values)))
w.close()
"""

WANDB_FLOOR = r"""
import json, sys, time
from pathlib import Path
from trackstore.sync.wandb_log import LogReader
t = time.perf_counter()
(log,) = Path(sys.argv[1]).glob("wandb/offline-run-*/run-*.wandb")
n = 0
for rec in LogReader(log).records():
    if rec.WhichOneof("record_type") == "history":
        for item in rec.history.item:
            json.loads(item.value_json)
            n += not (item.key or item.nested_key[0]).startswith("_")  # _step, _timestamp, _runtime: not points
print(n, time.perf_counter() - t)
"""

TB_FLOOR = r"""
import sys, time
t = time.perf_counter()
from trackstore.sync.ingest.tensorboard import read_all_scalars
n = read_all_scalars(sys.argv[1])
print(n, time.perf_counter() - t)
"""

TB_ACCUMULATOR = r"""
import sys, time
t = time.perf_counter()
from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"tensors": 0, "scalars": 0})
acc.Reload()
n = sum(len(acc.Tensors(tag)) for tag in acc.Tags()["tensors"])
print(n, time.perf_counter() - t)
"""


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKSTORE_"))}
    e.update(WANDB_MODE="offline", WANDB_SILENT="true", TRACKSTORE_DISABLE_GIT="1")
    return e


def build(kind: str, steps: int) -> Path:
    where = CACHE / f"{kind}-{steps}x{KEYS}"
    done = where / ".built"
    if done.exists():
        return where
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    t = time.perf_counter()
    code = WANDB_BUILD if kind == "wandb" else TB_BUILD
    subprocess.run([sys.executable, "-c", code, str(where if kind == "wandb" else where / "run"), str(steps),
                    str(KEYS)], env=env(), check=True)
    print(f"  built the {kind} source ({steps * KEYS:,} points) in {time.perf_counter() - t:.1f} s", flush=True)
    done.touch()
    return where


def timed(argv: list[str], repeat: int, before=None) -> tuple[float, str]:
    """Median wall time of ``argv`` as a fresh process (after one untimed run), and its output."""
    times, out = [], ""
    for i in range(repeat + 1):
        if before is not None:
            before()
        t = time.perf_counter()
        proc = subprocess.run(argv, env=env(), capture_output=True, text=True)
        took = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        out = proc.stdout
        if i:
            times.append(took)
    return statistics.median(times), out


def stored_points(root: Path) -> int:
    sys.path.insert(0, str(REPO))
    import trackstore

    con = trackstore.connect(root)
    try:
        return con.sql("SELECT count(*) FROM metrics").fetchall()[0][0]
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=1_000_000, help="points per source (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each command (median)")
    ap.add_argument("--sources", default="wandb,tensorboard", help="which sources (default: wandb,tensorboard)")
    args = ap.parse_args()
    steps = args.points // KEYS
    py = str(BIN / "python")
    ts = str(BIN / "trackstore")
    rows = []
    pass_s, _ = timed([py, "-c", "pass"], args.repeat)
    help_s, _ = timed([ts, "--help"], args.repeat)
    rows += [("python -c pass (anchor)", pass_s, ""), ("trackstore --help (anchor)", help_s, "")]
    work = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    verdicts = []
    try:
        for kind in args.sources.split(","):
            src = build(kind, steps)
            source_arg = src / "wandb" if kind == "wandb" else src / "run"
            floor_code = WANDB_FLOOR if kind == "wandb" else TB_FLOOR
            floor_s, floor_out = timed([py, "-c", floor_code, str(src if kind == "wandb" else source_arg)], args.repeat)
            floor_points = int(floor_out.split()[0])
            store = work / f"store-{kind}"
            ingest_s, _ = timed([ts, "ingest", "--from", kind, str(source_arg), "--root", str(store)], args.repeat,
                                before=lambda s=store: shutil.rmtree(s, ignore_errors=True))
            got = stored_points(store)
            again_s, _ = timed([ts, "ingest", "--from", kind, str(source_arg), "--root", str(store)], args.repeat)
            ratio = ingest_s / floor_s
            verdicts.append((kind, ratio))
            name = "wandb LogReader + values decoded" if kind == "wandb" else "TensorBoard data server, every scalar"
            rows += [(f"{kind} floor: {name} (process)", floor_s, f"{floor_points:,} points"),
                     (f"trackstore ingest --from {kind} (whole command, new store)", ingest_s,
                      f"**{ratio:.2f}x floor**; {got:,} points stored"),
                     (f"trackstore ingest --from {kind} again, nothing new", again_s, f"{again_s / floor_s:.2f}x floor")]
            if got != floor_points:
                raise SystemExit(f"{kind}: the store holds {got:,} points, the source {floor_points:,}")
            if kind == "tensorboard":
                acc_s, acc_out = timed([py, "-c", TB_ACCUMULATOR, str(source_arg)], 1)
                rows.append(("anchor: TensorBoard EventAccumulator, every scalar (process)", acc_s,
                             f"{int(acc_out.split()[0]):,} points; {acc_s / floor_s:.1f}x the data server"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.points:,} points per source ({KEYS} keys x {steps:,} steps); Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| what | seconds | notes |\n|---|---|---|")
    for what, s, note in rows:
        print(f"| {what} | {s:.3f} | {note} |")
    for kind, ratio in verdicts:
        print(f"target: ingest --from {kind} within 1.5x of the floor: {ratio:.2f}x, "
              f"{'met' if ratio <= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
