"""Wrong paths never succeed, reading never writes, fixed-set options refuse other values, and a
read-only store can still be read and exported.

Every test runs the real CLI in a subprocess. The read-only store is a real read-only bind
mount, made in a private mount namespace of the CLI's own process (``unshare --mount``), so
it is read-only even for root and disappears with the process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trackstore
from tests.helpers import run_cli
from trackstore.errors import UsageError
from trackstore.read.listing import list_runs
from trackstore.store import locks

RUN_A, RUN_B = "20261201-000000000-aaaaaaaa", "20261201-000000001-bbbbbbbb"


def _log_run(root: Path, run_id: str, steps: int = 5) -> None:
    with trackstore.init("p", root=root, run_id=run_id, name=run_id[-8:], config={"lr": steps}) as run:
        for step in range(steps):
            run.log({"loss": 1.0 / (step + 1)}, step=step)


@pytest.fixture
def store(root) -> Path:
    """A store with two finished runs of project p."""
    _log_run(root, RUN_A)
    _log_run(root, RUN_B, steps=7)
    return root


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root (the root itself included) with its type, size and mtime, but the
    catalog (``_catalog/``: a cache reading commands refresh, docs/format.md section 11) and the
    root's own mtime (which the catalog's first write changes)."""
    out = {}
    for path in [root, *root.rglob("*")]:
        rel = str(path.relative_to(root))
        if rel.split("/")[0] == "_catalog":
            continue
        st = path.lstat()
        out[rel] = (path.is_dir(), st.st_size, st.st_mtime_ns if path != root else None)
    return out


# ------------------------------------------------------------------ 1. the root must exist
EVERY_COMMAND = {  # every reader, as a cron job or a user would call it (demo, run and import write runs)
    "runs": ["runs"],
    "show": ["show", RUN_A],
    "sql": ["sql", "SELECT 1"],
    "plot": ["plot", RUN_A, "-k", "loss", "-f", "csv"],
    "compare": ["compare", RUN_A, RUN_B],
    "status": ["status"],
    "sync": ["sync", "--to", "wandb-offline"],
    "sync --dry-run": ["sync", "--to", "mlflow", "--dry-run"],
    "gc": ["gc", "--older-than", "0d", "--yes"],
    "gc --dry-run": ["gc", "--older-than", "0d", "--dry-run"],
    "compact": ["compact"],
    "export": ["export", "--all", "-o", "{tmp}/out.tar"],
    "doctor": ["doctor"],
    "doctor --fix": ["doctor", "--fix"],
    "ui": ["ui", "--port", "0"],
}


WRITERS = {"import": ["import", "{tmp}/in.tar"]}  # writes runs: creates a missing root, unlike the readers


def _args(name: str, tmp_path: Path) -> list[str]:
    return [a.replace("{tmp}", str(tmp_path)) for a in {**EVERY_COMMAND, **WRITERS}[name]]


@pytest.mark.parametrize("command", list(EVERY_COMMAND))
def test_missing_root_is_refused_and_not_created(command, tmp_path):
    missing = tmp_path / "typo" / "tsruns"
    out = run_cli(*_args(command, tmp_path), root=missing)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"store root {missing} does not exist (from --root)" in out.stderr
    assert "Traceback" not in out.stderr
    assert not missing.exists() and not missing.parent.exists()


@pytest.mark.parametrize("command", ["runs", "gc", "doctor"])
def test_missing_root_from_env_is_named(command, tmp_path):
    missing = tmp_path / "nope"
    out = run_cli(*_args(command, tmp_path), env={"TRACKSTORE_DIR": str(missing)})
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"store root {missing} does not exist (from $TRACKSTORE_DIR)" in out.stderr
    assert not missing.exists()


def test_missing_default_root_is_named(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    cmd = [sys.executable, "-m", "trackstore.cli.main", "sync", "--to", "wandb-offline"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"store root {cwd / 'tsruns'} does not exist (from the default ./tsruns" in out.stderr
    assert list(cwd.iterdir()) == []


def _cli_in(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real CLI run from the folder ``cwd`` (a user in that folder)."""
    cmd = [sys.executable, "-m", "trackstore.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120, env={**os.environ, **(env or {})})


@pytest.fixture
def folder_with_stores(tmp_path) -> Path:
    """A working folder holding the demo's store, a store with only trackstore's own folders, an
    empty folder and a source folder: the two stores are worth suggesting, the others are not."""
    cwd = tmp_path / "work"
    _log_run(cwd / "demo-store", RUN_A, steps=2)
    (cwd / "tsruns-old" / "_locks").mkdir(parents=True)
    (cwd / "empty").mkdir()
    (cwd / "src" / "pkg").mkdir(parents=True)
    (cwd / ".hidden" / "project=x").mkdir(parents=True)
    return cwd


def test_missing_default_root_names_the_stores_nearby(folder_with_stores):
    cwd = folder_with_stores
    out = _cli_in(cwd, "runs")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert f"store root {cwd / 'tsruns'} does not exist (from the default ./tsruns" in out.stderr
    assert "Stores nearby: demo-store, tsruns-old;" in out.stderr, out.stderr  # runs first, then the closest name
    # the other folders are not stores; the first named is the one to use, both ways
    assert "empty" not in out.stderr and "src" not in out.stderr and "hidden" not in out.stderr
    assert f"use --root demo-store or export TRACKSTORE_DIR={cwd / 'demo-store'}" in out.stderr
    after = _cli_in(cwd, "runs", "-f", "csv", "--root", "demo-store")  # the advice works as given
    assert after.returncode == 0 and RUN_A in after.stdout, after.stderr
    after = _cli_in(cwd, "runs", "-f", "csv", env={"TRACKSTORE_DIR": str(cwd / "demo-store")})
    assert after.returncode == 0 and RUN_A in after.stdout, after.stderr


def test_mistyped_root_suggests_the_closest_store_first(folder_with_stores):
    cwd = folder_with_stores
    out = _cli_in(cwd, "show", RUN_A, "--root", "demo-stor")
    assert out.returncode == 2, out.stderr
    assert f"store root {cwd / 'demo-stor'} does not exist (from --root). Stores nearby: demo-store, tsruns-old;" \
        in out.stderr, out.stderr
    # a root given inside another folder: its parent is searched too, and shown as a path from here
    elsewhere = cwd / "src"
    out = _cli_in(elsewhere, "runs", "--root", str(cwd / "tsrun"))
    assert out.returncode == 2, out.stderr
    assert f"Stores nearby: {cwd / 'demo-store'}, {cwd / 'tsruns-old'}; use --root {cwd / 'demo-store'} " in out.stderr


def test_missing_root_without_stores_nearby_says_how_to_make_one(tmp_path):
    cwd = tmp_path / "bare"
    cwd.mkdir()
    out = _cli_in(cwd, "runs", "--root", "typo")
    assert out.returncode == 2, out.stderr
    assert "Stores nearby" not in out.stderr and "an empty folder is a valid new store" in out.stderr


def test_library_names_the_stores_nearby_with_its_own_argument(folder_with_stores, monkeypatch):
    monkeypatch.chdir(folder_with_stores)
    with pytest.raises(UsageError, match=r"Stores nearby: demo-store, tsruns-old; use root='demo-store' or export "):
        trackstore.connect()


def test_root_that_is_a_file_or_another_folder_is_refused(tmp_path, store):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a store")
    out = run_cli("runs", root=a_file)
    assert out.returncode == 2 and f"store root {a_file} is not a directory" in out.stderr
    home_like = tmp_path / "home-like"
    (home_like / "src").mkdir(parents=True)
    (home_like / "README.md").write_text("hi")
    before = tree(home_like)
    out = run_cli("gc", "--older-than", "0d", "--yes", root=home_like)
    assert out.returncode == 2 and "is not a trackstore store" in out.stderr, out.stderr
    assert tree(home_like) == before  # no _locks/ created in someone's folder


def test_empty_folder_is_an_empty_store(root):
    for args in (["runs", "-f", "json"], ["doctor"], ["status"]):
        out = run_cli(*args, root=root)
        assert out.returncode == 0, out.stderr
    assert run_cli("runs", "-f", "json", root=root).stdout.strip() == "[]"


def test_demo_and_run_still_create_the_root(tmp_path):
    new = tmp_path / "new" / "tsruns"
    out = run_cli("demo", "--steps", "2", root=new)
    assert out.returncode == 0, out.stderr
    assert len(list_runs(new)) == 1
    other = tmp_path / "other"
    script = "import wandb; r = wandb.init(project='w'); r.log({'a': 1.0}); r.finish()"
    out = run_cli("run", "--root", str(other), "--", sys.executable, "-c", script)
    assert out.returncode == 0, out.stderr
    assert [i.project for i in list_runs(other)] == ["w"]


def test_import_creates_a_missing_root(store, tmp_path):
    assert run_cli("export", "--all", "-o", str(tmp_path / "runs.tar"), root=store).returncode == 0
    new = tmp_path / "other-side" / "tsruns"
    out = run_cli("import", str(tmp_path / "runs.tar"), root=new)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert sorted(i.run_id for i in list_runs(new)) == [RUN_A, RUN_B]
    out = run_cli("import", str(tmp_path / "runs.tar"), env={"TRACKSTORE_DIR": str(tmp_path / "from-env")})
    assert out.returncode == 0, out.stderr
    assert len(list_runs(tmp_path / "from-env")) == 2
    out = run_cli("runs", root=tmp_path / "still-missing")  # a reader still refuses
    assert out.returncode == 2 and "does not exist" in out.stderr


@pytest.mark.parametrize("command", ["import", "demo"])
def test_writing_command_refuses_a_root_that_is_not_a_store(command, store, tmp_path):
    assert run_cli("export", "--all", "-o", str(tmp_path / "runs.tar"), root=store).returncode == 0
    args = ["import", str(tmp_path / "runs.tar")] if command == "import" else ["demo", "--steps", "2"]
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a store")
    out = run_cli(*args, root=a_file)
    assert out.returncode == 2 and f"store root {a_file} is not a directory (from --root)" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    home_like = tmp_path / "home-like"
    (home_like / "src").mkdir(parents=True)
    before = tree(home_like)
    out = run_cli(*args, root=home_like)
    assert out.returncode == 2 and "is not a trackstore store" in out.stderr, out.stderr
    assert tree(home_like) == before


def test_library_connect_refuses_a_missing_root(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(UsageError, match=f"store root {missing} does not exist"):
        trackstore.connect(missing)
    with pytest.raises(UsageError, match="does not exist"):
        trackstore.query("SELECT 1", root=missing)
    assert not missing.exists()
    with trackstore.init("p", root=missing) as run:  # writing still creates it
        run.log({"a": 1.0}, step=0)
    assert trackstore.connect(missing).execute("SELECT count(*) FROM metrics").fetchone() == (1,)


# ------------------------------------------------------------------ 2. reading writes nothing
READ_ONLY = ["runs", "show", "sql", "plot", "compare", "status", "sync --dry-run", "gc --dry-run", "doctor",
             "export"]


@pytest.mark.parametrize("command", READ_ONLY)
def test_reading_commands_create_nothing(command, store, tmp_path):
    before = tree(store)
    out = run_cli(*_args(command, tmp_path), root=store)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert tree(store) == before
    if command == "export":
        assert (tmp_path / "out.tar").stat().st_size > 0


# ------------------------------------------------------------------ 3. fixed sets of values
INVALID = [
    (["runs", "--status", "finshed"], ["running", "finished", "failed", "crashed"]),
    (["runs", "--format", "xml"], ["table", "csv", "json", "jsonl", "parquet"]),
    (["runs", "--sort", "bogus"], ["created_at", "updated_at"]),
    (["plot", RUN_A, "-k", "loss", "--x", "epoch"], ["step", "time"]),
    (["sync", "--to", "mlfow", "--dry-run"], ["mlflow", "wandb", "wandb-offline", "swanlab"]),
    (["sync", "--to", "mlflow", "--format", "csv"], ["table", "json"]),
    (["sync", "--to", "wandb", "--mode", "bogus"], ["online", "offline", "local", "cloud"]),
    (["sync", "--to", "wandb", "--mode", "local"], ["online", "offline"]),
    (["sync", "--to", "mlflow", "--mode", "offline"], ["mlflow", "has no modes"]),
    (["status", "--to", "mlfow"], ["mlflow", "wandb", "wandb-offline", "swanlab"]),
    (["gc", "--older-than", "0d", "--dry-run", "--status", "running"], ["finished", "failed", "crashed"]),
    (["gc", "--older-than", "0d", "--dry-run", "--require-synced-to", "wandb,mlfow"], ["mlflow", "wandb"]),
]


@pytest.mark.parametrize("args,valid", INVALID, ids=[" ".join(a) for a, _ in INVALID])
def test_invalid_choice_is_refused_listing_the_valid_ones(args, valid, store):
    before = tree(store)
    out = run_cli(*args, root=store)
    assert out.returncode == 2, (out.stdout, out.stderr)
    for value in valid:
        assert value in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert tree(store) == before


def test_valid_choices_still_work(store):
    out = run_cli("runs", "--status", "finished", "-s", "crashed", "-f", "csv", root=store)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("finished") == 2
    out = run_cli("status", "--to", "mlflow", "-f", "json", root=store)
    assert out.returncode == 0, out.stderr
    out = run_cli("plot", RUN_A, "-k", "loss", "--x", "time", "-f", "csv", root=store)
    assert out.returncode == 0, out.stderr
    # x = seconds since the run started: points logged microseconds apart may share a bucket,
    # so count the points the buckets hold (column n), not the lines
    lines = out.stdout.splitlines()
    assert lines[0].split(",")[-1] == "n" and sum(int(line.rsplit(",", 1)[1]) for line in lines[1:]) == 5


# ------------------------------------------------------------------ export vs maintenance
def test_export_and_maintenance_exclude_each_other(store, tmp_path):
    with locks.acquire_maintenance(store, job="gc"):
        out = run_cli("export", "--all", "-o", str(tmp_path / "x.tar"), root=store)
    assert out.returncode == 6 and "maintenance" in out.stderr, out.stderr
    assert not (tmp_path / "x.tar").exists()
    before = tree(store)
    with locks.reading(store, job="export"):  # what a running export holds: nothing on disk
        assert tree(store) == before
        out = run_cli("gc", "--older-than", "0d", "--yes", "--include-unsynced", root=store)
        assert out.returncode == 6 and "being read" in out.stderr, out.stderr
    assert len(list_runs(store)) == 2  # gc deleted nothing while it was read


# ------------------------------------------------------------------ 4. a read-only store
def _read_only_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI in its own mount namespace in which ``root`` is a read-only bind mount."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(root),
           sys.executable, "-m", "trackstore.cli.main", *args, "--root", str(root)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture
def read_only_store(store) -> Path:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a read-only bind mount")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && touch "$0/x"', str(store)],
                           capture_output=True, text=True)
    if "Read-only file system" not in probe.stderr:
        pytest.skip(f"cannot make a read-only bind mount here (needs CAP_SYS_ADMIN): {probe.stderr.strip()}")
    return store


def test_read_only_store_can_be_read_and_exported(read_only_store, tmp_path):
    before = tree(read_only_store)
    for name in READ_ONLY:
        out = _read_only_cli(read_only_store, *_args(name, tmp_path))
        assert out.returncode == 0, (name, out.stdout, out.stderr)
    assert tree(read_only_store) == before
    copy = tmp_path / "copy"
    copy.mkdir()
    out = run_cli("import", str(tmp_path / "out.tar"), root=copy)
    assert out.returncode == 0, out.stderr
    out = run_cli("sql", "SELECT run_id, count(*) AS n FROM metrics GROUP BY ALL ORDER BY 1", "-f", "csv", root=copy)
    assert out.stdout.splitlines()[1:] == [f"{RUN_A},5", f"{RUN_B},7"]


@pytest.mark.parametrize("command", ["gc", "compact", "sync", "import", "doctor --fix"])
def test_writing_commands_fail_in_one_line_on_a_read_only_store(command, read_only_store, tmp_path):
    if command == "import":
        assert run_cli("export", RUN_A, "-o", str(tmp_path / "in.tar"), root=read_only_store).returncode == 0
    if command == "doctor --fix":
        (read_only_store / "project=p" / "run=20261201-000000002-orphaned").mkdir()  # no run.json: a finding
    before = tree(read_only_store)
    args = _args(command, tmp_path) + (["--include-unsynced"] if command == "gc" else [])
    out = _read_only_cli(read_only_store, *args)
    assert out.returncode == 4, (out.stdout, out.stderr)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Read-only file system" in errors[0], out.stderr
    assert "Traceback" not in out.stderr
    assert tree(read_only_store) == before
