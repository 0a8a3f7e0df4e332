"""A real, non-editable wheel installed into a fresh venv works: the console script, a tiny
log + query, and the package layout (``trackstore.sync``/``trackstore.cli``, no top-level
``sync`` or ``cli``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO

# one worker builds the wheel and its venv once (--dist loadgroup): spread over three, each built them
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_wheel_install")]

SOURCES = ("pyproject.toml", "README.md", "LICENSE", "trackstore", "sync", "cli", "ui")


def sh(*cmd, **kw):
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert out.returncode == 0, f"{cmd}: {out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """The wheel installed by pip into a fresh venv with its declared dependencies and nothing
    else, as ``pip install trackstore`` does on a new machine: a module importing a package the
    wheel does not declare fails here (the dev venv has every extra, so it cannot tell)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy, so the shared working tree gets no build/ or egg-info debris.
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
        elif p.exists():
            shutil.copy2(p, src / name)
    dist = tmp / "dist"
    # Offline when this interpreter can build a wheel itself (setuptools and wheel present);
    # else pip fetches the build backend from the package index, as on any fresh machine.
    can_build = all(importlib.util.find_spec(m) is not None for m in ("setuptools", "wheel"))
    isolation = ["--no-build-isolation"] if can_build else []
    sh(sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-w", dist, *isolation, "-q", cwd=src)
    [wheel] = list(dist.glob("trackstore-*.whl"))
    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", venv)  # ensurepip costs ~6 s of CPU; this venv's pip is ours
    vpy = venv / "bin" / "python"
    vsite = Path(sh(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    # The declared dependencies, resolved by pip from the package index (its cache makes the
    # second time fast), nothing from the dev venv.
    sh(sys.executable, "-m", "pip", "--python", vpy, "install", "-q", "--disable-pip-version-check", wheel)
    installed = sh(sys.executable, "-m", "pip", "--python", vpy, "list", "--format", "json").stdout
    return {"wheel": wheel, "python": vpy, "bin": venv / "bin", "site": vsite,
            "installed": {p["name"].lower() for p in json.loads(installed)}}


def clean_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRACKSTORE_", "VIRTUAL_ENV"))}
    env["HOME"] = str(tmp_path)
    env["TRACKSTORE_SYSTEM_METRICS"] = "0"  # the tests count metrics rows: only what the runs log
    return env


def test_wheel_contains_only_the_trackstore_package(wheel_venv):
    names = zipfile.ZipFile(wheel_venv["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"trackstore"}
    assert "trackstore/sync/__init__.py" in names and "trackstore/cli/main.py" in names
    # the dashboard and its page, with the vendored chart library and its licence (nothing fetched at run time)
    for f in ("ui/server.py", "ui/data.py", "ui/static/index.html", "ui/static/app.js", "ui/static/app.css",
              "ui/static/vendor/uPlot.iife.min.js", "ui/static/vendor/uPlot.min.css", "ui/static/vendor/uPlot.LICENSE"):
        assert f"trackstore/{f}" in names, f
    # every script the page loads is in the wheel
    index = (REPO / "ui" / "static" / "index.html").read_text()
    for script in re.findall(r'src="/static/([^"]+)"', index):
        assert f"trackstore/ui/static/{script}" in names, script
    site_dir = wheel_venv["site"]
    assert (site_dir / "trackstore" / "sync").is_dir() and (site_dir / "trackstore" / "cli").is_dir()
    assert (site_dir / "trackstore" / "ui" / "static" / "vendor" / "uPlot.iife.min.js").is_file()
    for top in ("sync", "cli", "ui"):
        assert not (site_dir / top).exists()


def test_installed_wheel_runs(wheel_venv, tmp_path):
    env = clean_env(tmp_path)
    bin_dir, py = wheel_venv["bin"], wheel_venv["python"]
    out = sh(bin_dir / "trackstore", "--help", cwd=tmp_path, env=env)
    assert "runs" in out.stdout and "demo" in out.stdout
    out = sh(bin_dir / "trackstore", "--version", cwd=tmp_path, env=env)
    assert out.stdout.startswith("trackstore ")

    # Everything imports from the wheel, not from the repository.
    code = ("import json, trackstore, trackstore.sync, trackstore.cli, trackstore.cli.main; "
            "print(json.dumps([trackstore.__file__, trackstore.sync.__file__, trackstore.cli.__file__]))")
    files = json.loads(sh(py, "-c", code, cwd=tmp_path, env=env).stdout)
    assert all(f.startswith(str(wheel_venv["site"])) for f in files), files
    for top in ("sync", "cli", "ui"):
        probe = sh(py, "-c", f"import importlib.util as u, json; s = u.find_spec({top!r}); "
                             "print(json.dumps(s.origin if s else None))", cwd=tmp_path, env=env)
        origin = json.loads(probe.stdout)
        assert origin is None or not origin.startswith(str(wheel_venv["site"])), origin

    store = tmp_path / "store"
    log = ("import trackstore; run = trackstore.init('wheel', name='tiny', root=%r); "
           "[run.log({'loss': 1.0 / (i + 1)}) for i in range(5)]; run.finish(); print(run.id)") % str(store)
    run_id = sh(py, "-c", log, cwd=tmp_path, env=env).stdout.strip()
    out = sh(bin_dir / "trackstore", "runs", "--root", store, "--format", "json", cwd=tmp_path, env=env)
    [row] = json.loads(out.stdout)
    assert (row["project"], row["run_id"], row["name"], row["status"], row["last_step"]) == (
        "wheel", run_id, "tiny", "finished", 4)
    assert row["summary"]["loss"] == pytest.approx(0.2)


EXTRAS_PACKAGES = ("mlflow", "wandb", "swanlab", "matplotlib", "starlette", "uvicorn")


def test_core_install_runs_every_reading_command(wheel_venv, tmp_path):
    """With the declared dependencies only (no extra), the first ten minutes work: the demo run,
    then runs, show, samples, trace, plot (in the terminal) and sql, without a traceback."""
    assert not set(EXTRAS_PACKAGES) & wheel_venv["installed"], "the core install must not bring an extra in"
    env = clean_env(tmp_path)
    env["COLUMNS"] = "80"
    ts = wheel_venv["bin"] / "trackstore"
    store = tmp_path / "store"
    out = sh(ts, "demo", "--root", store, "--steps", "20", cwd=tmp_path, env=env)
    assert "wrote" in out.stdout
    ref = "demo-grpo/qwen2.5-0.5b-grpo-gsm8k"
    runs = json.loads(sh(ts, "runs", "--root", store, "--format", "json", cwd=tmp_path, env=env).stdout)
    assert [(r["project"], r["status"]) for r in runs] == [("demo-grpo", "finished")]
    assert "critic/score/mean" in sh(ts, "show", ref, "--root", store, cwd=tmp_path, env=env).stdout
    assert "What is" in sh(ts, "samples", ref, "--root", store, cwd=tmp_path, env=env).stdout
    assert "calculator" in sh(ts, "trace", ref, "--root", store, cwd=tmp_path, env=env).stdout
    chart = sh(ts, "plot", ref, "-k", "critic/score/mean", "--root", store, cwd=tmp_path, env=env).stdout
    assert "critic/score/mean" in chart and "step" in chart
    rows = json.loads(sh(ts, "sql", "SELECT count(DISTINCT step) AS n FROM metrics", "--root", store,
                         "--format", "json", cwd=tmp_path, env=env).stdout)
    assert rows == [{"n": 20}]


@pytest.mark.parametrize("argv, install", [
    (["plot", "demo-grpo/qwen2.5-0.5b-grpo-gsm8k", "-k", "critic/score/mean", "--png", "out.png"],
     "pip install 'trackstore[plot]'"),
    (["ui", "--port", "0"], "pip install 'trackstore[ui]'"),
    (["sync", "--to", "mlflow"], "pip install 'trackstore[mlflow]'"),
    (["sync", "--to", "wandb"], "pip install 'trackstore[wandb]'"),
    (["sync", "--to", "swanlab"], "pip install 'trackstore[swanlab]'"),
    (["sync", "--to", "store", "--uri", "s3://team/runs"], "pip install 'trackstore[team]'"),
])
def test_core_install_names_the_extra_a_feature_needs(wheel_venv, tmp_path, argv, install):
    """An optional feature without its extra ends in one line that names the install command
    (exit 2, a usage error), never in a ModuleNotFoundError traceback."""
    env = clean_env(tmp_path)
    ts = wheel_venv["bin"] / "trackstore"
    store = tmp_path / "store"
    sh(ts, "demo", "--root", store, "--steps", "3", cwd=tmp_path, env=env)
    out = subprocess.run([str(ts), *argv, "--root", str(store)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert install in out.stderr, out.stderr
    assert "Traceback" not in out.stderr + out.stdout and "ModuleNotFoundError" not in out.stderr
    assert len([line for line in out.stderr.splitlines() if line.strip()]) == 1, out.stderr
    assert not (tmp_path / "out.png").exists()


def test_core_install_replicates_to_a_path_in_worker_processes(wheel_venv, tmp_path):
    """A team store on a shared path needs no extra, and ``--jobs`` spread over worker processes
    works from the installed console script (each process is spawned: it imports trackstore
    from the wheel, not from the repository): the replica lists the runs and holds their rows."""
    env = clean_env(tmp_path)
    env["TRACKSTORE_SYNC_PROCESSES"] = "2"  # two processes, though two runs would not ask for them
    ts = wheel_venv["bin"] / "trackstore"
    store, team = tmp_path / "store", tmp_path / "team"
    for _ in range(2):
        sh(ts, "demo", "--root", store, "--steps", "5", cwd=tmp_path, env=env)
    out = sh(ts, "sync", "--to", "store", "--uri", team, "--jobs", "2", "--root", store, "--format", "json",
             cwd=tmp_path, env=env)
    report = json.loads(out.stdout)
    assert report["processes"] == 2 and [r["result"] for r in report["runs"]] == ["ok", "ok"], out.stdout
    runs = json.loads(sh(ts, "runs", "--root", team, "--format", "json", cwd=tmp_path, env=env).stdout)
    assert len(runs) == 2
    q = "SELECT count(*) AS n FROM metrics"
    here = sh(ts, "sql", q, "--root", store, "--format", "json", cwd=tmp_path, env=env).stdout
    there = sh(ts, "sql", q, "--root", team, "--format", "json", cwd=tmp_path, env=env).stdout
    assert json.loads(here) == json.loads(there) and json.loads(here)[0]["n"] > 0
