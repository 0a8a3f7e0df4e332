"""What a command costs on a store of 1,000 and 10,000 runs, beside MLflow and the floor of Python.

    .venv/bin/python benchmarks/store_scale.py                 # 1,000 and 10,000 runs (the first build takes minutes)
    .venv/bin/python benchmarks/store_scale.py --sizes 300 --repeat 3

Builds (once; cached under ``/tmp/trackstore-bench-store-scale/``) stores of N runs in 10
projects, each run 200 steps x 20 keys (4,000 points) written with trackstore's own part writer
(``trackstore.store.parts.write_part``; fsync skipped while building), with ``run.json``, a
writer file and a sync cursor for the default MLflow destination saying every row was
acknowledged and the final status pushed (what a completed ``trackstore sync --to mlflow``
leaves). Beside each, an MLflow sqlite store with the same number of runs (one experiment;
each run with 20 latest metrics, 10 params and 3 tags, inserted in MLflow's own schema made by
MLflow; the metric history is left out: neither timed call reads it).

Each case is a fresh process (the whole command: start-up, imports, answer), timed from
outside; "warm" is the median of ``--repeat`` runs after one untimed run; "cold" is one run
after every file of the store (catalog included) was evicted from the page cache with
``posix_fadvise(DONTNEED)`` (folders stay cached by the kernel). The first untimed run of each
size also shows what a first command costs without a catalog (it builds it).

With two sizes it also prints, per command, its cost per run and its fixed cost (from the two
warm medians), what "the larger size at most 2x the smaller" allows per run (fixed /
(large - 2 x small)), and the **stat floor**: the ``stat`` calls the catalog's contract makes
``status`` take for a run that did not change (run.json, the run folder, ``_writers``, each
kind folder), in a bare loop in one process (best of 5), with the scan that finds the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path("/tmp/trackstore-bench-store-scale")
BUILD_VERSION = 1
STEPS, KEYS, PROJECTS = 200, 20, 10
KEY_NAMES = [f"{g}/{k}" for g in ("actor", "critic", "rollout", "perf") for k in ("a", "b", "c", "d", "e")]


# ----------------------------------------------------------------------------- building
def template_files(root: Path) -> tuple[dict, dict]:
    """The run.json and writer file of a real run (made beside ``root`` and removed): the
    templates a built store's runs copy, so they look as trackstore writes them."""
    import trackstore

    template_root = root.parent / f"{root.name}-template"
    shutil.rmtree(template_root, ignore_errors=True)
    with trackstore.init(project="t", name="t", root=template_root, config={"lr": 1e-6}) as run:
        run.log({"x": 1.0}, step=0)
        tpl_paths = run.paths
    tpl_meta = json.loads(tpl_paths.run_file.read_text())
    tpl_writer = json.loads(next(tpl_paths.writers_dir.glob("*.json")).read_text())
    shutil.rmtree(template_root, ignore_errors=True)
    return tpl_meta, tpl_writer


def build_store(root: Path, n: int) -> None:
    import pyarrow as pa

    from trackstore.store import parts as _parts
    from trackstore.store.layout import RunPaths, part_file_name
    from trackstore.store.ledger import Cursor, save_cursor
    from trackstore.store.meta import write_run_json, write_writer_file
    from trackstore.store.ranges import RangeSet
    from trackstore.store.schema import TS_TYPE

    tpl_meta, tpl_writer = template_files(root)

    real_fsync = os.fsync
    os.fsync = lambda fd: None  # building only: nothing here must survive a power cut
    try:
        rng = random.Random(0)
        steps = pa.array([s for s in range(STEPS) for _ in KEY_NAMES], pa.int64())
        keys = pa.array(KEY_NAMES * STEPS, pa.string())
        seqs = pa.array(range(STEPS * KEYS), pa.int64())
        destination = f"sqlite:///{root}/_mlflow/mlflow.db"
        t0 = time.time() - 400 * 86400
        for i in range(n):
            created = t0 + i * 600.0
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(created)) + f"{i % 1000:03d}"
            run_id = f"{stamp}-{i:08d}"
            project = f"proj{i % PROJECTS}"
            writer = f"vm-{1000 + i}-{i % 0xFFFFFF:06x}"
            paths = RunPaths(root, project, run_id)
            values = [rng.random() for _ in range(STEPS * KEYS)]
            ts = pa.array([int((created + j * 0.01) * 1e6) for j in range(STEPS * KEYS)], pa.int64()).cast(TS_TYPE)
            table = pa.table({"step": steps, "key": keys, "value": pa.array(values, pa.float64()), "ts": ts,
                              "writer": pa.array([writer] * (STEPS * KEYS), pa.string()), "seq": seqs,
                              "last_of_key": pa.array([False] * (STEPS * KEYS), pa.bool_())})
            _parts.write_part(paths.kind_dir("metrics") / part_file_name(writer, 0), table, "metrics")
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + "+00:00"
            end = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created + 300)) + "+00:00"
            last = {k: values[(STEPS - 1) * KEYS + j] for j, k in enumerate(KEY_NAMES)}
            meta = {**tpl_meta, "project": project, "run_id": run_id, "name": f"exp-{i}", "status": "finished",
                    "created_at": iso, "updated_at": end, "ended_at": end, "heartbeat_at": end, "last_step": STEPS - 1,
                    "config": {"lr": 1e-6 * (1 + i % 7), "seed": i, "algo": "grpo"}, "tags": ["rl", f"t{i % 5}"],
                    "summary": last, "summary_auto": last, "summary_user": {},
                    "attempts": [{**tpl_meta["attempts"][0], "writer_id": writer, "started_at": iso}]}
            write_run_json(paths, meta, durable=False)
            write_writer_file(paths, {**tpl_writer, "writer_id": writer, "pid": 1000 + i, "status": "finished",
                                      "started_at": iso, "heartbeat_at": end, "ended_at": end, "last_step": STEPS - 1})
            cursor = Cursor("mlflow", destination, project, run_id, acked={"metrics": RangeSet({writer: [[0, STEPS * KEYS - 1]]})},
                            skipped={"metrics": 0}, remote={"run_id": f"{i:032x}", "experiment_id": "1",
                                                             "key_map": {k: k for k in KEY_NAMES}},
                            synced_status="finished", last_sync_at=end)
            save_cursor(root, cursor)
            if i and i % 1000 == 0:
                print(f"  built {i} runs", flush=True)
    finally:
        os.fsync = real_fsync


def build_mlflow(db: Path, n: int) -> str:
    """An MLflow sqlite store (schema made by MLflow) with ``n`` runs; returns the experiment id."""
    import sqlite3
    import uuid

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{db}"
    client = MlflowClient(uri)
    exp = client.create_experiment("bench")
    con = sqlite3.connect(db)
    rng = random.Random(1)
    t0 = int((time.time() - 400 * 86400) * 1000)
    for i in range(n):
        rid = uuid.UUID(int=rng.getrandbits(128)).hex
        start = t0 + i * 600_000
        con.execute("INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, "
                    "start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id, deleted_time) "
                    "VALUES (?, ?, 'LOCAL', '', '', 'me', 'FINISHED', ?, ?, '', 'active', ?, ?, NULL)",
                    (rid, f"exp-{i}", start, start + 300_000, f"{db.parent}/artifacts/{rid}", int(exp)))
        con.executemany("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) VALUES (?, ?, ?, ?, 0, ?)",
                        [(k, rng.random(), start + 300_000, STEPS - 1, rid) for k in KEY_NAMES])
        con.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)",
                        [(f"p{j}", str(j), rid) for j in range(10)])
        con.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)",
                        [("mlflow.runName", f"exp-{i}", rid), ("team", "rl", rid), ("seed", str(i), rid)])
    con.commit()
    con.close()
    return exp


def ensure(n: int) -> tuple[Path, Path, str]:
    base = CACHE / str(n)
    marker = base / "complete.json"
    if marker.exists() and json.loads(marker.read_text()).get("version") == BUILD_VERSION:
        info = json.loads(marker.read_text())
        return base / "store", base / "mlflow.db", info["experiment"]
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    t = time.perf_counter()
    print(f"building a store of {n} runs under {base} (cached for later runs)...", flush=True)
    build_store(base / "store", n)
    print(f"  trackstore store built in {time.perf_counter() - t:.0f} s; building the MLflow store...", flush=True)
    exp = build_mlflow(base / "mlflow.db", n)
    marker.write_text(json.dumps({"version": BUILD_VERSION, "experiment": exp}))
    print(f"  done in {time.perf_counter() - t:.0f} s", flush=True)
    return base / "store", base / "mlflow.db", exp


# ----------------------------------------------------------------------------- timing
def evict(path: Path) -> None:
    """Drop every file below ``path`` from the page cache."""
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


CPU: list[float] = []  # CPU seconds (user + system) of each timed process, beside its wall time


def once(argv: list[str], env: dict) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if p.returncode not in (0,):
        raise SystemExit(f"{' '.join(argv)[:200]} failed ({p.returncode}): {p.stderr[-2000:]}")
    return took


def ts_cmd() -> list[str]:
    script = Path(sys.executable).with_name("trackstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "trackstore.cli.main"]


def add_rows(root: Path, k: int) -> list[Path]:
    """Give ``k`` runs a new metrics part (rows no destination has): what 10 live runs do between syncs."""
    code = ("import sys, json, pyarrow as pa\n"
            "from pathlib import Path\n"
            "from trackstore.store.parts import write_part\n"
            "from trackstore.store.layout import part_file_name\n"
            "from trackstore.store.schema import TS_TYPE\n"
            "out = []\n"
            "for d in sys.argv[1:]:\n"
            "    w = 'vm-1-added0'\n"
            "    t = pa.table({'step': pa.array([500, 501], pa.int64()), 'key': pa.array(['new', 'new']),\n"
            "                  'value': pa.array([1.0, 2.0]), 'ts': pa.array([1, 2], pa.int64()).cast(TS_TYPE),\n"
            "                  'writer': pa.array([w, w]), 'seq': pa.array([0, 1], pa.int64()),\n"
            "                  'last_of_key': pa.array([False, False])})\n"
            "    p = Path(d) / 'metrics' / part_file_name(w, 0)\n"
            "    write_part(p, t, 'metrics')\n"
            "    out.append(str(p))\n"
            "print(json.dumps(out))\n")
    dirs = sorted(str(p) for p in root.glob("project=*/run=*"))[:k]
    p = subprocess.run([sys.executable, "-c", code, *dirs], capture_output=True, text=True, check=True)
    return [Path(x) for x in json.loads(p.stdout)]


STAT_FLOOR = """
import os, sys, time
from pathlib import Path
from trackstore.store.catalog import run_folders
from trackstore.store.layout import KINDS, RunPaths
root = Path(sys.argv[1])
keys = run_folders(root)
paths = []
for project, run_id in keys:  # what the catalog's contract has status check of an unchanged run
    p = RunPaths(root, project, run_id)
    paths += [str(p.run_file), str(p.dir), str(p.writers_dir)]
    paths += [str(p.kind_dir(k)) for k in KINDS if p.kind_dir(k).is_dir()]
best = None
for _ in range(5):
    t = time.perf_counter()
    for x in paths:
        os.stat(x)
    took = time.perf_counter() - t
    best = took if best is None else min(best, took)
t = time.perf_counter()
run_folders(root)
scan = time.perf_counter() - t
print(len(keys), len(paths), best, scan)
"""


def stat_floor(root: Path) -> tuple[int, int, float, float]:
    """``(runs, paths, seconds, scan seconds)``: the ``stat`` of every file and folder the
    catalog's contract makes ``status`` check for a run that did not change (run.json, the
    run folder, ``_writers``, each kind folder), in a bare loop (best of 5, warm), and the
    directory scan that finds the runs."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", STAT_FLOOR, str(root)], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    return int(out[0]), int(out[1]), float(out[2]), float(out[3])


def compile_packages() -> None:
    """Write the bytecode of trackstore's packages (what `pip install` does for a normal install)."""
    import compileall

    import trackstore.cli
    import trackstore.sync
    import trackstore.ui

    for pkg in (trackstore, trackstore.cli, trackstore.sync, trackstore.ui):
        for folder in pkg.__path__:
            compileall.compile_dir(folder, quiet=1)


def measure(n: int, repeat: int, skip: list[str] = ()) -> list[tuple]:
    root, db, exp = ensure(n)
    env = {**os.environ, "COLUMNS": "120", "TRACKSTORE_DISABLE_GIT": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("TRACKSTORE_DIR", None)
    # as installed: modules load from their bytecode. With PYTHONDONTWRITEBYTECODE set (as on
    # the build machines) every command compiled trackstore's ~60 modules it imports anew:
    # about 55 ms of `runs`, and more of every command that imports more
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    compile_packages()
    env.pop("MLFLOW_TRACKING_URI", None)
    ts = ts_cmd()
    run_ids = sorted(p.name.split("=", 1)[1] for p in root.glob("project=*/run=*"))
    picked = random.Random(2).sample(run_ids, 100)
    some_run = picked[0]
    py = sys.executable
    resolve_code = ("import sys\nfrom trackstore.read.listing import resolve_runs\n"
                    f"assert len(resolve_runs(sys.argv[2:], sys.argv[1])) == {len(picked)}\n")
    mlflow_search = ("import sys\nfrom mlflow.tracking import MlflowClient\n"
                     "runs = MlflowClient(sys.argv[1]).search_runs([sys.argv[2]], max_results=50000)\n"
                     f"assert len(runs) == {n}, len(runs)\n")
    mlflow_search_inproc = ("import sys, time\nfrom mlflow.tracking import MlflowClient\nc = MlflowClient(sys.argv[1])\n"
                            "c.search_runs([sys.argv[2]], max_results=1)\nt = time.perf_counter()\n"
                            "runs = c.search_runs([sys.argv[2]], max_results=50000)\n"
                            "print(time.perf_counter() - t)\n")
    mlflow_get = ("import sys\nfrom mlflow.tracking import MlflowClient\nc = MlflowClient(sys.argv[1])\n"
                  "r = c.search_runs([sys.argv[2]], max_results=1)[0]\nc.get_run(r.info.run_id)\n")
    uri = f"sqlite:///{db}"
    r = str(root)
    cases = [
        ("python -c pass (floor)", [py, "-c", "pass"], None),
        ("trackstore --help", [*ts, "--help"], None),
        ("runs", [*ts, "runs", "--root", r], None),
        ("runs --project P", [*ts, "runs", "--project", "proj3", "--root", r], None),
        ("runs --format csv", [*ts, "runs", "--format", "csv", "--root", r], None),
        ("show RUN", [*ts, "show", some_run, "--root", r], None),
        ("resolve 100 run ids", [py, "-c", resolve_code, r, *picked], None),
        ("status", [*ts, "status", "--root", r], None),
        ("sync --to mlflow --dry-run (nothing pending)", [*ts, "sync", "--to", "mlflow", "--dry-run", "--root", r], None),
        ("sync --dry-run after 10 runs got rows", [*ts, "sync", "--to", "mlflow", "--dry-run", "--root", r], "add"),
        ("gc --older-than 500d --dry-run (no run old enough)", [*ts, "gc", "--older-than", "500d", "--dry-run", "--root", r], None),
        ("gc --older-than 1d --dry-run (every run eligible)", [*ts, "gc", "--older-than", "1d", "--dry-run", "--root", r], None),
        ("connect()", [py, "-c", f"import trackstore; trackstore.connect({r!r}).close()"], None),
        ("mlflow search_runs (process)", [py, "-c", mlflow_search, uri, exp], None),
        ("mlflow get_run (process)", [py, "-c", mlflow_get, uri, exp], None),
    ]
    cases = [c for c in cases if not any(word in c[0] for word in skip)]
    shutil.rmtree(root / "_catalog", ignore_errors=True)  # the first runs of each case build it again
    out = []
    for name, argv, setup in cases:
        added: list[Path] = []
        if setup == "add":
            added = add_rows(root, 10)
            time.sleep(3.2)  # older than the catalog's racy window, as between two cron runs
        try:
            first = once(argv, env)  # untimed: warms the page cache and the catalog
            CPU.clear()
            warm = statistics.median(once(argv, env) for _ in range(repeat))
            cpu = statistics.median(CPU)
            evict(root)
            evict(db.parent)
            cold = once(argv, env)
        finally:
            for p in added:
                p.unlink()
        out.append((name, warm, cold, first, cpu))
        print(f"  {n:>6} runs  {name:<50} warm {warm:7.3f} s (cpu {cpu:6.3f})  cold {cold:7.3f} s   "
              f"first {first:7.3f} s", flush=True)
    runs_n, paths_n, floor, scan = stat_floor(root)
    out.append(("stat floor (bare loop, in process)", floor + scan, None, None, None))
    print(f"  {n:>6} runs  stat floor: {paths_n:,} stat calls {floor:.3f} s + scan {scan:.3f} s "
          f"({(floor + scan) / runs_n * 1e6:.1f} us a run)", flush=True)
    p = subprocess.run([py, "-c", mlflow_search_inproc, uri, exp], capture_output=True, text=True, env=env, check=True)
    inproc = float(p.stdout.strip().splitlines()[-1])
    out.append(("mlflow search_runs (in process, after import)", inproc, None, None, None))
    print(f"  {n:>6} runs  mlflow search_runs in process: {inproc:.3f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=5, help="warm runs per case (median; default 5)")
    ap.add_argument("--skip", nargs="*", default=[], help="leave out the cases whose name contains one of these")
    args = ap.parse_args()
    results = {n: measure(n, args.repeat, args.skip) for n in args.sizes}
    load = os.getloadavg()[0]
    print(f"\nPython {sys.version.split()[0]}, {os.cpu_count()} cores, load average {load:.2f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    head = " | ".join(f"{n:,} warm | {n:,} warm cpu | {n:,} cold" for n in args.sizes)
    print(f"| command | {head} |" + (" ratio warm |" if len(args.sizes) > 1 else ""))
    print("|---|" + "---|---|---|" * len(args.sizes) + ("---|" if len(args.sizes) > 1 else ""))
    names = [r[0] for r in results[args.sizes[0]]]
    for i, name in enumerate(names):
        if any(len(results[n]) <= i or results[n][i][0] != name for n in args.sizes):
            continue
        cells = []
        for n in args.sizes:
            _, warm, cold, _first, cpu = results[n][i]
            cells.append(f"{warm:.3f}" if warm is not None else "")
            cells.append(f"{cpu:.3f}" if cpu is not None else "")
            cells.append(f"{cold:.3f}" if cold is not None else "")
        ratio = ""
        if len(args.sizes) > 1:
            a, b = results[args.sizes[0]][i][1], results[args.sizes[-1]][i][1]
            ratio = f" {b / a:.2f}x |" if a else " |"
        print(f"| {name} | " + " | ".join(cells) + " |" + ratio)
    if len(args.sizes) > 1:
        small, big = args.sizes[0], args.sizes[-1]
        print(f"\nwhat each command costs per run, and what '{big:,} runs at most 2x {small:,}' allows (from the warm medians "
              f"above: per run = (t{big} - t{small}) / {big - small}; fixed = t{small} - {small} x per run; "
              f"2x needs per run <= fixed / {big - 2 * small})")
        floor = {n: dict((r[0], r[1]) for r in results[n]).get("stat floor (bare loop, in process)") for n in args.sizes}
        if floor[small] is not None and floor[big] is not None:
            per = (floor[big] - floor[small]) / (big - small)
            print(f"  the stat floor (status's checks of an unchanged run, bare loop): {per * 1e6:.1f} us a run")
        print("| command | per run (us) | fixed (s) | per run allowed for 2x (us) |")
        print("|---|---|---|---|")
        for i, name in enumerate(names):
            if name.startswith(("python", "trackstore --help", "mlflow", "stat floor")) or "in process" in name:
                continue
            if any(len(results[n]) <= i or results[n][i][0] != name for n in (small, big)):
                continue
            a, b = results[small][i][1], results[big][i][1]
            per = (b - a) / (big - small)
            fixed = a - small * per
            allowed = fixed / (big - 2 * small)
            print(f"| {name} | {per * 1e6:.1f} | {fixed:.3f} | {allowed * 1e6:.1f} |")
    print("\nfirst command on a store without a catalog file (it builds it):")
    for n in args.sizes:
        first = {r[0]: r[3] for r in results[n]}
        if "runs" in first and "status" in first:
            print(f"  {n:,} runs: runs {first['runs']:.2f} s (run.json of every run read), then status "
                  f"{first['status']:.2f} s (every part's footer and row ids read)")


if __name__ == "__main__":
    main()
