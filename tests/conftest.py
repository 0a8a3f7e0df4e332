"""Shared fixtures. Every test gets its own store root and a scrubbed environment.

Hermetic by construction: WANDB_*, MLFLOW_*, SWANLAB_*, TRACKSTORE_*, AWS_* and proxy variables are
removed, so no test reaches outside 127.0.0.1 or reads a developer's credentials.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.servers import (  # noqa: F401  (shared fixtures)
    mlflow_experiment_name,
    mlflow_file_server,
    mlflow_proxy,
    mlflow_server,
    s3_prefix,
    weed_s3,
)
from tests.sync_harness import HARNESSES

REPO = Path(__file__).resolve().parent.parent
# session and module fixtures are made before the per-test environment below: their runs do not
# sample system metrics either (trackstore.write.system)
os.environ.setdefault("TRACKSTORE_SYSTEM_METRICS", "0")
# AWS_: a developer's S3 endpoint, keys or profile never reach the team store's tests
SCRUB_PREFIXES = ("WANDB_", "MLFLOW_", "SWANLAB_", "TRACKSTORE_", "AWS_")
SCRUB_NAMES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
               "no_proxy")


@pytest.fixture(autouse=True)
def hermetic_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith(SCRUB_PREFIXES) or name in SCRUB_NAMES:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRACKSTORE_DISABLE_GIT", "1")
    # runs sample system metrics by default (trackstore.write.system); tests that count metrics
    # rows expect only what they logged, so the sampler is on only where a test turns it on
    monkeypatch.setenv("TRACKSTORE_SYSTEM_METRICS", "0")
    monkeypatch.setenv("COLUMNS", "200")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # SDKs write settings under ~; keep them in the sandbox
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    yield


@pytest.fixture
def root(tmp_path) -> Path:
    """A fresh, empty store root for this test."""
    r = tmp_path / "store"
    r.mkdir()
    return r


@pytest.fixture(autouse=True)
def _no_current_run():
    """Finish whatever run a test left open, so tests never leak state into each other."""
    yield
    from trackstore.write import endings

    for run in list(endings.live_runs):
        try:
            run.finish()
        except Exception:
            pass
    endings.current = None


CRASH_DIR = "TRACKSTORE_TEST_CRASH_DIR"  # where each xdist worker's faulthandler report goes


@pytest.hookimpl(trylast=True)  # after pytest's own faulthandler plugin, which this one replaces in workers
def pytest_configure(config):
    """A worker that dies in native code ("worker 'gwN' crashed while running ...") wrote its
    faulthandler report (every Python thread's stack; a crash in a library's own native thread
    has no "Current thread") to a stderr that CI shows only the end of. The first process makes
    a folder for the reports (the workers inherit its name), each worker writes its own there,
    and the end of the run prints the ones that are not empty, with the kernel's lines about
    the crash when it lets this user read them (they name the crashing thread and library)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        import tempfile

        os.environ[CRASH_DIR] = tempfile.mkdtemp(prefix="trackstore-test-crashes-")
        config.stash[_KERNEL_BEFORE] = len(_kernel_crash_lines())
    elif os.environ.get(CRASH_DIR):
        import faulthandler

        report = open(Path(os.environ[CRASH_DIR]) / f"{worker}.log", "w")  # noqa: SIM115 (open until the end)
        faulthandler.enable(file=report, all_threads=True)
        config.stash[_CRASH_REPORT] = report


_CRASH_REPORT = pytest.StashKey()
_KERNEL_BEFORE = pytest.StashKey[int]()


def _kernel_crash_lines() -> list[str]:
    """The kernel log's lines about crashed threads (empty when this user may not read it)."""
    import subprocess

    try:
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln for ln in kernel if "segfault" in ln or "traps:" in ln or "general protection" in ln]


def pytest_terminal_summary(terminalreporter, config):
    folder = os.environ.get(CRASH_DIR)
    if os.environ.get("PYTEST_XDIST_WORKER") or not folder or not Path(folder).is_dir():
        return
    reports = [p for p in sorted(Path(folder).glob("*.log")) if p.stat().st_size]
    for p in reports:
        terminalreporter.write_sep("=", f"native crash report of worker {p.stem}")
        terminalreporter.write_line(p.read_text(errors="replace"))
    if reports:
        lines = _kernel_crash_lines()[config.stash.get(_KERNEL_BEFORE, 0):]
        terminalreporter.write_sep("=", "the kernel's lines about crashes during this run")
        terminalreporter.write_line("\n".join(lines[-5:]) or "(none, or dmesg cannot be read here)")
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (make test) pytest-xdist keeps the tests of one xdist_group on
    one worker by adding ``@group`` to their node ids; with a pytest it cannot do that for
    (9.2), the groups were silently ignored and shared servers started once per worker."""
    if getattr(config.option, "loadgroup", False) and hasattr(config, "workerinput"):
        lost = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if lost:
            raise pytest.UsageError(f"--dist loadgroup is not in effect with pytest {pytest.__version__} (e.g. "
                                    f"{lost[0]} has no @group): install the pytest pyproject.toml's test extra names")


@pytest.fixture(params=sorted(HARNESSES))
def harness(request, tmp_path, monkeypatch):
    """One test per sync target (tests/sync_harness.py): the target's harness, its environment
    set for the test. A module may narrow or widen the targets with a fixture of its own."""
    h = HARNESSES[request.param](tmp_path, monkeypatch)
    for k, v in h.env().items():
        monkeypatch.setenv(k, v)
    return h


@pytest.fixture
def wb(tmp_path, monkeypatch):
    """The real wandb client in offline mode for this test (its variables set), read back with
    wandb's own reader: :class:`tests.sync_harness.WandbHarness`."""
    from tests.sync_harness import WandbHarness

    h = WandbHarness(tmp_path, monkeypatch)
    for k, v in h.env().items():
        monkeypatch.setenv(k, v)
    return h
