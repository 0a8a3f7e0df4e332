"""Helpers for tests: run the real CLI and real child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, root: Path | None = None, env: dict | None = None, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real ``trackstore`` CLI in a subprocess (exit code, stdout, stderr as a user sees them)."""
    cmd = [sys.executable, "-m", "trackstore.cli.main", *args]
    if root is not None:
        cmd += ["--root", str(root)]
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, input=input, timeout=timeout)


def python_child(code: str, *, env: dict | None = None, **kw) -> subprocess.Popen:
    """Start a child Python process running ``code`` (for SIGKILL and concurrency tests)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.Popen([sys.executable, "-c", code], env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def fake_old_client(tmp_path, dist: str, version: str) -> dict:
    """An environment in which ``importlib.metadata`` reports ``dist`` at ``version`` (its
    metadata first on ``sys.path``), while the real package stays importable."""
    site = tmp_path / "old-client-metadata"
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
