"""A live RL run: one flush per step, queried while it trains, with and without merging.

    .venv/bin/python benchmarks/live_run.py               # 2,000 steps x 100 keys
    .venv/bin/python benchmarks/live_run.py --steps 500   # quicker

An RL loop logs once per step, and the writer flushes what it has every couple of seconds, so
a real run leaves about one part file per step. This script logs ``--steps`` steps of
``--keys`` keys through ``trackstore.init`` (calling ``run.flush()`` after each step, as a
slow RL step would), then, while the run is still live, times what a user watching it asks:
a 1,000-point curve of one key (``trackstore.read.overview.curves``, what ``trackstore plot``
draws), ``latest`` over the run, and a new connection. It does it twice: with the default
(``compact=True``: the writer merges its own files as it goes, see ``trackstore/rolling.py``)
and with ``compact=False`` (every flush stays its own file), and then times ``finish()``,
which merges what is left. MLflow answers the same two questions about a run of the same
shape in its sqlite store (``get_metric_history`` bucketed in Python, ``get_run``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from query import fastest_of  # noqa: E402  (the same "fastest of N" as the query benchmark)


def trackstore_live(root: Path, steps: int, keys: int, compact: bool) -> dict[str, float]:
    import trackstore
    from trackstore.read.listing import resolve_run
    from trackstore.read.overview import curves
    from trackstore.read.views import connect, run_sql

    names = [f"actor/k{i}" for i in range(keys)]
    run = trackstore.init("live", root=root, flush_interval=3600, compact=compact)
    t0 = time.perf_counter()
    for s in range(steps):
        run.log({k: s * 0.001 + i for i, k in enumerate(names)}, step=s)
        run.flush()
    logging = time.perf_counter() - t0
    time.sleep(1.0)  # let the writer's thread finish the merges the last flushes called for
    info = resolve_run(run.id, root)
    out = {"log+flush per step": logging / steps, "parts while live": len(info.paths.parts("metrics"))}
    out["curve"] = fastest_of(lambda: curves([info], [names[7]], points=1000))
    t0 = time.perf_counter()
    con = connect(root, runs=[info], sync_state=False)
    out["connect"] = time.perf_counter() - t0
    out["latest"] = fastest_of(lambda: run_sql(con, "SELECT key, value FROM latest"))
    con.close()
    t0 = time.perf_counter()
    run.finish()
    out["finish"] = time.perf_counter() - t0
    out["parts after finish"] = len(info.paths.parts("metrics"))
    return out


def mlflow_run(workdir: Path, steps: int, keys: int) -> dict[str, float]:
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.ERROR)
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.create_experiment("live", artifact_location=str(workdir / "artifacts"))
    run_id = client.create_run(exp).info.run_id
    names = [f"actor/k{i}" for i in range(keys)]
    for s in range(steps):  # one request per step, as a training loop logs
        client.log_batch(run_id, metrics=[Metric(k, s * 0.001 + i, 1_700_000_000_000 + s * 1000, s)
                                          for i, k in enumerate(names)])

    def curve():
        hist = sorted(client.get_metric_history(run_id, names[7]), key=lambda m: m.step)
        width = max(1, -(-len(hist) // 1000))
        return [sum(m.value for m in hist[i:i + width]) / len(hist[i:i + width]) for i in range(0, len(hist), width)]

    return {"curve": fastest_of(curve), "latest": fastest_of(lambda: client.get_run(run_id).data.metrics)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--no-mlflow", action="store_true")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores; a live run of {args.steps} steps x {args.keys} keys, one flush per step")
    results = {}
    for compact in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            results[compact] = trackstore_live(Path(tmp), args.steps, args.keys, compact)
    rows = ["log+flush per step", "parts while live", "curve", "connect", "latest", "finish", "parts after finish"]
    print(f"\n  {'':<22}{'compact=True (default)':>26}{'compact=False':>20}")
    for r in rows:
        a, b = results[True][r], results[False][r]
        fmt = (lambda v: f"{v:.0f}") if r.startswith("parts") else (lambda v: f"{v * 1000:.1f} ms")
        print(f"  {r:<22}{fmt(a):>26}{fmt(b):>20}")
    if args.no_mlflow:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        m = mlflow_run(Path(tmp), args.steps, args.keys)
    import mlflow

    print(f"\n  MLflow {mlflow.__version__} over sqlite, the same run: curve {m['curve'] * 1000:.1f} ms, "
          f"latest (get_run) {m['latest'] * 1000:.1f} ms")
    for q in ("curve", "latest"):
        print(f"  {q}: MLflow / trackstore = {m[q] / results[True][q]:.1f}x (default), "
              f"{m[q] / results[False][q]:.1f}x (compact=False)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
