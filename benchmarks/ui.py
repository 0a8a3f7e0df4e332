"""The dashboard's speed: ``trackstore ui`` vs TensorBoard and an MLflow server on the same data, in one run.

    .venv/bin/python benchmarks/ui.py                 # 1,000 runs x 10k points + one run of 10M points
    .venv/bin/python benchmarks/ui.py --quick         # 100 runs x 10k + 1M points, MLflow with 20 runs
    .venv/bin/python benchmarks/ui.py --no-tensorboard --no-mlflow

The store is built once under ``--dir`` (reused while the sizes match) with the writer's own
``write_part``: ``--runs`` runs of ``--steps`` points of one key (``critic/score/mean``, a smooth
walk with a one-step spike of +5 at a different step in every run) and one run of ``--big``
points of ``loss`` with a one-step spike of +50. The same points are written as tfevents with
TensorBoard's own record writer (one run folder per run) and, for ``--mlflow-runs`` of the runs,
synced to a local ``mlflow server`` with ``trackstore sync`` (the big run is not: syncing 10M
points takes longer than the benchmark).

Questions, each timed over HTTP as the page (or a script) asks them:

* **start to the runs table's data**: ``trackstore ui`` started until ``/api/runs`` lists every run;
* **start to the first chart**: the same start until one run's curve has answered; for
  TensorBoard, ``tensorboard --logdir`` started until its scalars API answers the key for every
  run in full (its last step loaded);
* **one key overlaid for 100 and for 1,000 runs** (trackstore: ``/api/series``, M4 into 1,000
  buckets; TensorBoard: ``scalars_multirun``; MLflow: ``get-history-bulk-interval``, what its UI
  charts with, 100 runs per call, or ``get-history`` per run);
* **the 10M-point run zoomed out, and at a 1% zoom around its spike**.

"cold" is the first answer (the result cache and the part summaries under _catalog/curves/
are empty, the files are in the page cache); "after a restart" a new server's first answer with
the part summaries on disk; "a live poll" the answer after one part was appended to a run;
"warm" the median of 5 repeats (trackstore answers those from its result cache, keyed by the
part files' path, size and mtime); "recomputed" the median of 5 answers with the result cache
bypassed (another bucket count each time), which is what a live run costs on every poll.
The extremes: the largest plotted value of each run against the stored one, for trackstore and
for TensorBoard's 1,000-point reservoir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

KEY, BIG_KEY = "critic/score/mean", "loss"
WRITER = "bench-1-000000"
REPEAT = 5


# ---------------------------------------------------------------------- data
def curve(r: int, steps: int):
    import numpy as np

    rng = np.random.default_rng(r)
    v = 0.5 + np.cumsum(rng.standard_normal(steps)) * 0.01
    spike = (r * 7919) % steps
    v[spike] += 5.0
    return v, spike


def big_curve(n: int):
    import numpy as np

    v = 1.0 + np.sin(np.arange(n) / 5000.0) * 0.1
    spike = int(n * 0.6543)
    v[spike] += 50.0
    return v, spike


def write_run(root: Path, project: str, run_id: str, name: str, values, start_us: int, parts: int = 1) -> None:
    import numpy as np
    import pyarrow as pa

    from trackstore.store import schema
    from trackstore.store.clock import iso
    from trackstore.store.layout import RunPaths, part_file_name
    from trackstore.store.meta import write_run_json
    from trackstore.store.parts import write_part

    paths = RunPaths(root, project, run_id)
    n = len(values)
    write_run_json(paths, {"project": project, "run_id": run_id, "name": name, "status": "finished",
                           "created_at": iso(start_us / 1e6), "ended_at": iso(start_us / 1e6 + n), "last_step": n - 1,
                           "config": {"lr": 1e-6, "seed": run_id}, "tags": ["bench"],
                           "summary": {KEY: float(values[-1])}}, durable=False)
    per = -(-n // parts)
    for lo in range(0, n, per):
        hi = min(n, lo + per)
        st = np.arange(lo, hi, dtype=np.int64)
        table = pa.Table.from_arrays([
            pa.array(st), pa.array([KEY if project != "big" else BIG_KEY] * (hi - lo)), pa.array(values[lo:hi]),
            pa.array(start_us + st * 1_000_000).cast(schema.TS_TYPE), pa.repeat(pa.scalar(WRITER), hi - lo),
            pa.array(st),
        ], schema=schema.with_metadata(schema.METRIC_POINTS, "metrics"))
        write_part(paths.kind_dir("metrics") / part_file_name(WRITER, lo), table, "metrics")


def build(base: Path, runs: int, steps: int, big: int) -> tuple[Path, list[str]]:
    root = base / "store"
    spec = {"runs": runs, "steps": steps, "big": big, "v": 1}
    marker = base / "store.json"
    ids = [f"run{r:05d}" for r in range(runs)]
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return root, ids
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.time()
    now_us = int((time.time() - 86400) * 1e6)
    for r, rid in enumerate(ids):
        write_run(root, "bench", rid, f"exp{r}", curve(r, steps)[0], now_us + r * 60_000_000)
    write_run(root, "big", "run-big", "big", big_curve(big)[0], now_us, parts=max(1, big // 1_000_000))
    marker.write_text(json.dumps(spec))
    print(f"  built the store: {runs} x {steps:,} + {big:,} points in {time.time() - t0:.0f} s", flush=True)
    return root, ids


def build_tfevents(base: Path, runs: int, steps: int, big: int) -> Path:
    """The same points as tfevents, written with TensorBoard's own event writer."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.record_writer import RecordWriter

    logdir = base / "tb"
    spec = {"runs": runs, "steps": steps, "big": big, "v": 2}
    marker = base / "tb.json"
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return logdir
    shutil.rmtree(logdir, ignore_errors=True)
    t0 = time.time()
    start = time.time() - 86400

    def write(name: str, key: str, values) -> None:
        # TensorBoard's own record writer (what its EventFileWriter runs on its thread), fed directly:
        # the same bytes on disk, without a queue and a thread hop per event
        folder = logdir / name
        folder.mkdir(parents=True)
        with open(folder / f"events.out.tfevents.{int(start)}.bench", "wb") as f:
            w = RecordWriter(f)
            w.write(Event(wall_time=start, file_version="brain.Event:2").SerializeToString())
            value = Summary.Value(tag=key, simple_value=0.0)
            event = Event(summary=Summary(value=[value]))
            sv = event.summary.value[0]
            for step, v in enumerate(values.tolist()):
                event.wall_time, event.step, sv.simple_value = start + step, step, v
                w.write(event.SerializeToString())

    for r in range(runs):
        write(f"run{r:05d}", KEY, curve(r, steps)[0])
    write("run-big", BIG_KEY, big_curve(big)[0])
    marker.write_text(json.dumps(spec))
    print(f"  wrote tfevents: {runs} x {steps:,} + {big:,} events in {time.time() - t0:.0f} s", flush=True)
    return logdir


# ---------------------------------------------------------------------- HTTP
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, data: bytes | None = None, headers: dict | None = None, timeout: float = 300, parse: bool = True):
    """The answer, decoded (``parse=False``: its bytes; a browser's JSON.parse is not what is timed)."""
    req = urllib.request.Request(url, data=data, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if parse else body


def post_json(url: str, body: dict, parse: bool = True):
    return get(url, json.dumps(body).encode(), {"Content-Type": "application/json"}, parse=parse)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median_of(fn, n: int = REPEAT) -> float:
    return statistics.median(timed(fn)[0] for _ in range(n))


def env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "TRACKSTORE_")) and "proxy" not in k.lower()}


def wait(fn, timeout: float, interval: float = 0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            out = fn()
            if out:
                return out
        except OSError:
            pass
        time.sleep(interval)
    raise RuntimeError("timed out")


def ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1000:,.0f} ms" if s >= 0.01 else f"{s * 1000:.1f} ms"


# ---------------------------------------------------------------------- contenders
def bench_trackstore(root: Path, ids: list[str], steps: int, big: int) -> dict:
    shutil.rmtree(root / "_catalog" / "curves", ignore_errors=True)  # "cold" is a first look: no curve cache
    out = _bench_trackstore(root, ids, steps, big)
    out.update(bench_restart_and_poll(root, ids, big))
    return out


def bench_restart_and_poll(root: Path, ids: list[str], big: int) -> dict:
    """A restarted server (the part summaries on disk under _catalog/curves/, the result cache
    empty), then a live poll: one part of 1,000 new points appended to the big run, asked again."""
    import numpy as np

    from trackstore.store import schema
    from trackstore.store.layout import RunPaths, part_file_name
    from trackstore.store.parts import write_part

    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", "ui", "--root", str(root), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
    out: dict = {}
    extra = RunPaths(root, "big", "run-big").kind_dir("metrics") / part_file_name("bench-poll-000000", 0)
    try:
        wait(lambda: get(base + "api/runs"), 120)
        for n in (100, 1000):
            if len(ids) >= n:
                body = {"run": [f"bench/{i}" for i in ids[:n]], "key": KEY, "width": 1000}
                out[f"overlay{n}_restart"], _ = timed(lambda b=body: post_json(base + "api/series", b, parse=False))
        big_body = {"run": ["big/run-big"], "key": BIG_KEY, "width": 1000}
        out["big_restart"], _ = timed(lambda: post_json(base + "api/series", big_body, parse=False))
        import pyarrow as pa

        st = np.arange(big, big + 1000, dtype=np.int64)
        table = pa.Table.from_arrays([
            pa.array(st), pa.array([BIG_KEY] * 1000), pa.array(np.zeros(1000)),
            pa.array(1_700_000_000_000_000 + st * 1_000_000).cast(schema.TS_TYPE),
            pa.repeat(pa.scalar("bench-poll-000000"), 1000), pa.array(np.arange(1000, dtype=np.int64)),
        ], schema=schema.with_metadata(schema.METRIC_POINTS, "metrics"))
        write_part(extra, table, "metrics")
        out["big_poll"], raw = timed(lambda: post_json(base + "api/series", big_body, parse=False))
        assert json.loads(raw)["series"][0]["n"] == big + 1000
    finally:
        proc.terminate()
        proc.wait()
        extra.unlink(missing_ok=True)  # the store stays as built, for the next run of the benchmark
    return out


def _bench_trackstore(root: Path, ids: list[str], steps: int, big: int) -> dict:
    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "trackstore.cli.main", "ui", "--root", str(root), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())
    out: dict = {}
    try:
        runs = wait(lambda: (d := get(base + "api/runs")) and len(d["runs"]) == len(ids) + 1 and d, 120)
        out["start_to_runs"] = time.perf_counter() - t0
        first = post_json(base + "api/series", {"run": [f"bench/{ids[0]}"], "key": KEY, "width": 1000})
        out["start_to_first_chart"] = time.perf_counter() - t0
        assert first["series"][0]["n"] > 0
        out["runs_warm"] = median_of(lambda: get(base + "api/runs", parse=False))
        assert len(runs["runs"]) == len(ids) + 1
        widths = iter(range(999, 0, -1))  # another bucket count each time: the result cache cannot answer
        for n in (100, 1000):
            refs = [f"bench/{i}" for i in ids[:n]]
            if len(refs) < n:
                continue
            body = {"run": refs, "key": KEY, "width": 1000}
            out[f"overlay{n}_cold"], raw = timed(lambda b=body: post_json(base + "api/series", b, parse=False))
            d = json.loads(raw)
            out[f"overlay{n}_warm"] = median_of(lambda b=body: post_json(base + "api/series", b, parse=False))
            fewer = iter(range(100_000 // (4 * n) - 1, 0, -1))  # under the server's cap: each one a new M4
            out[f"overlay{n}_recomputed"] = median_of(
                lambda b=body, f=fewer: post_json(base + "api/series", {**b, "width": next(f)}, parse=False))
            out[f"overlay{n}_points"] = sum(len(s["x"]) for s in d["series"])
            missed = 0
            for s, rid in zip(d["series"], ids[:n]):
                missed += max(s["y"]) != float(curve(int(rid[3:]), steps)[0].max())
            out[f"overlay{n}_missed_extremes"] = missed
        big_ref = ["big/run-big"]
        big_body = {"run": big_ref, "key": BIG_KEY, "width": 1000}
        out["big_cold"], raw = timed(lambda: post_json(base + "api/series", big_body, parse=False))
        d = json.loads(raw)
        out["big_warm"] = median_of(lambda: post_json(base + "api/series", big_body, parse=False))
        out["big_recomputed"] = median_of(lambda: post_json(base + "api/series", {**big_body, "width": next(widths)},
                                                            parse=False))
        values, spike = big_curve(big)
        out["big_max_plotted"], out["big_max_stored"] = max(d["series"][0]["y"]), float(values.max())
        out["big_points_drawn"] = len(d["series"][0]["x"])
        lo, hi = spike - big // 200, spike + big // 200
        zoom = {"run": big_ref, "key": BIG_KEY, "width": 1000, "lo": lo, "hi": hi}
        out["zoom_cold"], raw = timed(lambda: post_json(base + "api/series", zoom, parse=False))
        dz = json.loads(raw)
        out["zoom_warm"] = median_of(lambda: post_json(base + "api/series", zoom, parse=False))
        out["zoom_recomputed"] = median_of(lambda: post_json(base + "api/series", {**zoom, "width": next(widths)},
                                                             parse=False))
        out["zoom_max_plotted"] = max(dz["series"][0]["y"])
    finally:
        proc.terminate()
        proc.wait()
    return out


def bench_tensorboard(logdir: Path, ids: list[str], steps: int, big: int) -> dict:
    import numpy as np

    port = free_port()
    base = f"http://127.0.0.1:{port}/"
    out: dict = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
                             "--port", str(port), "--reload_interval", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env())

    def multirun(runs: list[str], key: str, parse: bool = True):
        data = urllib.parse.urlencode([("tag", key)] + [("runs", r) for r in runs]).encode()
        return get(base + "data/plugin/scalars/scalars_multirun", data, parse=parse)

    try:
        def complete():
            d = multirun(ids, KEY)
            return len(d) == len(ids) and all(v and v[-1][1] == steps - 1 for v in d.values())
        wait(complete, 3600, interval=0.5)
        out["start_to_all_runs"] = time.perf_counter() - t0
        for n in (100, 1000):
            if len(ids) >= n:
                out[f"overlay{n}_warm"] = median_of(lambda n=n: multirun(ids[:n], KEY, parse=False))
                d = multirun(ids[:n], KEY)
                out[f"overlay{n}_points"] = sum(len(v) for v in d.values())
                out[f"overlay{n}_missed_extremes"] = sum(
                    max(p[2] for p in d[rid]) < float(np.float32(curve(int(rid[3:]), steps)[0].max()))
                    for rid in ids[:n])
        wait(lambda: (d := get(base + f"data/plugin/scalars/scalars?run=run-big&tag={BIG_KEY}")) and d[-1][1] == big - 1,
             3600, interval=0.5)
        out["big_loaded"] = time.perf_counter() - t0
        out["big_warm"] = median_of(lambda: get(base + f"data/plugin/scalars/scalars?run=run-big&tag={BIG_KEY}", parse=False))
        d = get(base + f"data/plugin/scalars/scalars?run=run-big&tag={BIG_KEY}")
        out["big_points"] = len(d)
        out["big_max_plotted"] = max(p[2] for p in d)
    finally:
        proc.terminate()
        proc.wait()
    return out


def bench_mlflow(root: Path, ids: list[str], base_dir: Path) -> dict:
    from trackstore.sync import SyncOptions, TargetOptions, sync

    tmp = base_dir / "mlflow"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out: dict = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}", "--workers", "1",
                             "--artifacts-destination", str(tmp / "artifacts")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), start_new_session=True)
    try:
        wait(lambda: urllib.request.urlopen(url + "/health", timeout=2).status == 200, 180, interval=0.2)
        out["server_start"] = time.perf_counter() - t0
        stage = base_dir / "mlflow-store"  # the runs to sync, alone in a store (sync state stays out of the main one)
        shutil.rmtree(stage, ignore_errors=True)
        for rid in ids:
            shutil.copytree(root / "project=bench" / f"run={rid}", stage / "project=bench" / f"run={rid}")
        t1 = time.perf_counter()
        report = sync(stage, "mlflow", SyncOptions(), TargetOptions(uri=url))
        assert report.ok, [r.error for r in report.runs]
        out["sync_s"] = time.perf_counter() - t1
        exps = get(url + "/api/2.0/mlflow/experiments/search", json.dumps({"max_results": 100}).encode(),
                   {"Content-Type": "application/json"})
        exp_ids = [e["experiment_id"] for e in exps["experiments"]]
        search = {"experiment_ids": exp_ids, "max_results": 1000}
        out["runs_search"] = median_of(lambda: get(url + "/api/2.0/mlflow/runs/search", json.dumps(search).encode(),
                                                   {"Content-Type": "application/json"}))
        run_ids = [r["info"]["run_id"] for r in get(url + "/api/2.0/mlflow/runs/search", json.dumps(search).encode(),
                                                   {"Content-Type": "application/json"})["runs"]]
        n = min(100, len(run_ids))
        q = urllib.parse.urlencode([("metric_key", KEY), ("max_results", 1000)] + [("run_ids", r) for r in run_ids[:n]])
        out["bulk_interval_runs"] = n
        out["bulk_interval"] = median_of(lambda: get(url + "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?" + q,
                                                     parse=False))

        def histories():
            for r in run_ids[:n]:
                token = None
                while True:
                    qs = {"run_id": r, "metric_key": KEY, "max_results": 25000}
                    if token:
                        qs["page_token"] = token
                    d = get(url + "/api/2.0/mlflow/metrics/get-history?" + urllib.parse.urlencode(qs))
                    token = d.get("next_page_token")
                    if not token:
                        break
        out["full_histories"] = median_of(histories, 1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


# ---------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--big", type=int, default=10_000_000)
    ap.add_argument("--mlflow-runs", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="100 runs, a 1M-point run, 20 runs in MLflow")
    ap.add_argument("--no-tensorboard", action="store_true")
    ap.add_argument("--no-mlflow", action="store_true")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/trackstore-bench-ui"))
    a = ap.parse_args()
    if a.quick:
        a.runs, a.big, a.mlflow_runs = 100, 1_000_000, 20
    a.dir.mkdir(parents=True, exist_ok=True)
    print(f"store: {a.runs} runs x {a.steps:,} points + one run of {a.big:,} points ({os.cpu_count()} cores)")
    root, ids = build(a.dir, a.runs, a.steps, a.big)
    ts = bench_trackstore(root, ids, a.steps, a.big)
    tb = ml = None
    if not a.no_tensorboard:
        tb = bench_tensorboard(build_tfevents(a.dir, a.runs, a.steps, a.big), ids, a.steps, a.big)
    if not a.no_mlflow:
        ml = bench_mlflow(root, ids[: a.mlflow_runs], a.dir)

    def row(q, t, other="", note=""):
        print(f"| {q} | {t} | {other} | {note} |")

    print("\n| question | trackstore ui | TensorBoard | MLflow server |")
    print("|---|---|---|---|")
    row("start to the runs table's data", ms(ts["start_to_runs"]), "", ms(ml["server_start"]) + " (server start) + "
        + ms(ml["runs_search"]) + " runs/search" if ml else "")
    row("start to the first chart (TensorBoard: every run's key in full)", ms(ts["start_to_first_chart"]),
        ms(tb["start_to_all_runs"]) if tb else "")
    for n in (100, 1000):
        if f"overlay{n}_cold" in ts:
            row(f"one key, {n} runs overlaid: cold / warm / recomputed",
                f"{ms(ts[f'overlay{n}_cold'])} / {ms(ts[f'overlay{n}_warm'])} / {ms(ts[f'overlay{n}_recomputed'])}",
                ms(tb.get(f"overlay{n}_warm")) if tb else "",
                (f"{ms(ml['bulk_interval'])} (bulk-interval, {ml['bulk_interval_runs']} runs); full histories "
                 f"{ms(ml['full_histories'])}") if ml and n == 100 else "")
    row(f"the {a.big:,}-point run zoomed out: cold / warm / recomputed",
        f"{ms(ts['big_cold'])} / {ms(ts['big_warm'])} / {ms(ts['big_recomputed'])}",
        f"{ms(tb['big_warm'])} ({tb['big_points']:,} points kept; loaded after {ms(tb['big_loaded'])})" if tb else "")
    row("after a restart (part summaries on disk): 100 / 1,000 runs overlaid, the big run zoomed out",
        " / ".join(ms(ts.get(k)) for k in ("overlay100_restart", "overlay1000_restart", "big_restart")))
    row("a live poll: the big run zoomed out after one new part of 1,000 points", ms(ts["big_poll"]))
    row("the same at a 1% zoom: cold / warm / recomputed",
        f"{ms(ts['zoom_cold'])} / {ms(ts['zoom_warm'])} / {ms(ts['zoom_recomputed'])}",
        "the same 1,000 points (no more detail)" if tb else "")
    print()
    print(f"big run: stored max {ts['big_max_stored']:.4f}; trackstore plots max {ts['big_max_plotted']:.4f} "
          f"({ts['big_points_drawn']:,} points drawn), at 1% zoom {ts['zoom_max_plotted']:.4f}"
          + (f"; TensorBoard's reservoir max {tb['big_max_plotted']:.4f}" if tb else ""))
    for n in (100, 1000):
        if f"overlay{n}_missed_extremes" in ts:
            print(f"{n} runs, one spike each: trackstore missed {ts[f'overlay{n}_missed_extremes']} "
                  f"({ts[f'overlay{n}_points']:,} points sent)"
                  + (f", TensorBoard missed {tb[f'overlay{n}_missed_extremes']} ({tb[f'overlay{n}_points']:,} points)"
                     if tb and f"overlay{n}_missed_extremes" in tb else ""))
    if tb:
        print(f"start to first chart: TensorBoard / trackstore = {tb['start_to_all_runs'] / ts['start_to_first_chart']:.1f}x")
    if ml:
        print(f"MLflow: {len(ids[: a.mlflow_runs])} runs synced in {ml['sync_s']:.1f} s")
    worst = max(v for k, v in ts.items() if k.endswith(("_warm",)) and isinstance(v, float))
    print(f"slowest warm trackstore answer: {ms(worst)} (target: under 300 ms)")
    print("raw:", json.dumps({"trackstore": ts, "tensorboard": tb, "mlflow": ml}, default=str))


if __name__ == "__main__":
    main()
