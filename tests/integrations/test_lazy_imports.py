"""Integrations cost nothing until used: importing them never imports the framework they serve."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

HEAVY = ("verl", "torch", "ray", "transformers", "lightning", "pytorch_lightning", "wandb")


def _imported_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint(' '.join(m for m in %r if m in sys.modules))" % (HEAVY,)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_importing_the_integration_modules_imports_no_framework():
    modules = "trackstore.integrations.verl, trackstore.integrations.verl_trace, trackstore.compat.wandb"
    assert _imported_after(f"import {modules}") == set()


def test_verl_install_without_verl_imports_nothing():
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here; test_verl.py checks that install() patches it")
    got = _imported_after("from trackstore.integrations.verl import install\nassert install() is False")
    assert got == set()
