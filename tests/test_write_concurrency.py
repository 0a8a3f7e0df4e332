"""Many processes writing one store, and one run, at the same time: nothing lost, no collisions."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pyarrow.parquet as pq

from trackstore.read.listing import list_runs
from trackstore.store import meta as tsmeta
from trackstore.store.layout import RunPaths

STEPS = 400
KEYS = 20

CHILD = textwrap.dedent(
    """
    import os, sys, time, trackstore
    root, go, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    run_id = sys.argv[4] if len(sys.argv) > 4 else None
    while not os.path.exists(go):  # start together, to collide if anything can collide
        time.sleep(0.005)
    run = trackstore.init("shared", name=f"rank{{rank}}", root=root, run_id=run_id, resume=run_id is not None,
                          flush_interval=0.02, config={{"rank": rank}})
    for step in range({steps}):
        run.log({{f"rank{{rank}}/k{{i:02d}}": rank * 1e6 + step * 100 + i for i in range({keys})}}, step=step)
        if step % 40 == 0:
            time.sleep(0.005)  # let the writer thread flush many small parts while others do too
    run.summary["rank_done"] = rank
    run.finish()
    print(run.id, run.writer_id)
    """
).format(steps=STEPS, keys=KEYS)


def run_children(tmp_path, root, n, run_id=None):
    go = tmp_path / "go"
    args = [str(root), str(go)]
    children = [_child(args + [str(rank)] + ([run_id] if run_id else [])) for rank in range(n)]
    time.sleep(0.5)
    go.write_text("go")
    outs = []
    for c in children:
        out, err = c.communicate(timeout=180)
        assert c.returncode == 0, err
        outs.append(out.split())
    return outs


def _child(argv):
    return subprocess.Popen([sys.executable, "-c", CHILD, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def expected(rank):
    return {(step, f"rank{rank}/k{i:02d}"): rank * 1e6 + step * 100 + i for step in range(STEPS) for i in range(KEYS)}


def read_points(paths):
    t = pq.read_table(paths.kind_dir("metrics"))
    return t.to_pydict()


def test_eight_processes_one_store(tmp_path, root):
    outs = run_children(tmp_path, root, 8)
    run_ids = [o[0] for o in outs]
    assert len(set(run_ids)) == 8, "run ids collided"
    infos = {i.run_id: i for i in list_runs(root, project="shared")}
    assert set(infos) == set(run_ids)
    for rank, (run_id, _writer) in enumerate(outs):
        info = infos[run_id]
        assert info.status == "finished" and info.meta["config"] == {"rank": rank}
        cols = read_points(info.paths)
        got = {(s, k): v for s, k, v in zip(cols["step"], cols["key"], cols["value"])}
        assert len(cols["key"]) == STEPS * KEYS, "points lost or duplicated"
        assert got == expected(rank)
        assert sorted(cols["seq"]) == list(range(STEPS * KEYS))
        assert info.meta["last_step"] == STEPS - 1


def test_several_processes_into_one_run(tmp_path, root):
    n = 4
    outs = run_children(tmp_path, root, n, run_id="ranks-run")
    writer_ids = [o[1] for o in outs]
    assert len(set(writer_ids)) == n
    [info] = list_runs(root, project="shared")
    assert info.run_id == "ranks-run"
    assert info.status == "finished" and info.meta["status"] == "finished"
    cols = read_points(info.paths)
    assert len(cols["key"]) == n * STEPS * KEYS, "points lost or duplicated"
    got = {(s, k): v for s, k, v in zip(cols["step"], cols["key"], cols["value"])}
    want = {}
    for rank in range(n):
        want.update(expected(rank))
    assert got == want
    # (writer, seq) identifies each row exactly once; every writer's seqs are dense from 0.
    by_writer = {}
    for w, s in zip(cols["writer"], cols["seq"]):
        by_writer.setdefault(w, []).append(s)
    assert set(by_writer) == set(writer_ids)
    assert all(sorted(v) == list(range(STEPS * KEYS)) for v in by_writer.values())
    # Part names carry the writer id: no two processes ever wrote the same file name.
    names = [p.name for p in info.paths.parts("metrics")]
    assert len(names) == len(set(names))
    assert all(any(w in name for w in writer_ids) for name in names)
    # Every process is recorded as an attempt, every heartbeat file says finished.
    meta = json.loads(info.paths.run_file.read_text())
    assert sorted(a["writer_id"] for a in meta["attempts"]) == sorted(writer_ids)
    assert sorted(w["status"] for w in tsmeta.read_writer_files(info.paths)) == ["finished"] * n
    assert meta["last_step"] == STEPS - 1
    assert {f"rank{r}/k00" for r in range(n)} <= set(meta["summary"])
    assert meta["summary"]["rank_done"] in range(n)
    assert not list(RunPaths(root, "shared", "ranks-run").kind_dir("metrics").glob(".*.tmp"))


FORKING = textwrap.dedent(
    """
    import os, signal, sys, time, trackstore
    run = trackstore.init("fork", root=sys.argv[1], run_id="r1", flush_interval=0.05)
    for step in range(100):
        run.log({"x": float(step)})
    # A DataLoader-style worker that exits normally (running atexit hooks) after trying to log.
    pid = os.fork()
    if pid == 0:
        try:
            run.log({"x": -1.0})
        except trackstore.UsageError as exc:
            print("child refused:", "fork" in str(exc), flush=True)
        trackstore.log({"x": -2.0}) if trackstore.current_run() else None
        sys.exit(0)
    os.waitpid(pid, 0)
    # A worker that is terminated with SIGTERM, as torch does with stuck workers.
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(3)
    time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    print("worker died of signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, flush=True)
    for step in range(100, 200):
        run.log({"x": float(step)})
    run.finish()
    print("parent finished", flush=True)
    """
)


def test_forked_children_never_write_or_end_the_parents_run(root):
    out = subprocess.run([sys.executable, "-c", FORKING, str(root)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["child refused: True", f"worker died of signal {15}", "parent finished"]
    paths = RunPaths(root, "fork", "r1")
    cols = pq.read_table(paths.kind_dir("metrics")).to_pydict()
    assert sorted(cols["value"]) == [float(s) for s in range(200)]  # nothing from the children, nothing lost
    assert sorted(cols["seq"]) == list(range(200)) and len(set(cols["writer"])) == 1
    [info] = list_runs(root)
    assert info.status == "finished" and "error" not in info.meta
    [w] = tsmeta.read_writer_files(paths)
    assert w["status"] == "finished"
