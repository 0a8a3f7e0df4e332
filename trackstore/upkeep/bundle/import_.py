"""Importing a bundle or a receipt (``trackstore import``): verify, then merge.

Promises (:func:`import_bundle`): under the store's maintenance lock, the bundle is extracted
and verified in full (:func:`~.staging.extract_verified`) before anything becomes visible; then
its runs are merged (:func:`~.merge_runs.import_runs`) or its cursors
(:func:`~.receipts.import_receipt`). The staging folder is removed whatever happens.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from ...errors import BundleError
from ...store.layout import IMPORT_DIR, resolve_root
from .merge_runs import import_runs
from .receipts import import_receipt
from .results import ImportResult
from .staging import extract_verified, remove_empty


def import_bundle(root: str | Path | None, bundle: str | os.PathLike, *, expect: str | None = None,
                  on_stage: Callable[[str], None] | None = None) -> ImportResult:
    """Verify and import a bundle or receipt (``expect``: ``"runs"`` or ``"receipt"`` to insist).
    ``on_stage`` is told what begins: verifying, then merging (progress)."""
    from ...store import locks

    root = resolve_root(root)
    root.mkdir(parents=True, exist_ok=True)
    with locks.acquire_maintenance(root, job="import"):
        if on_stage is not None:
            on_stage(f"verifying {bundle}")
        st = extract_verified(root, bundle)
        if on_stage is not None:
            on_stage(f"merging {len(st.manifest.get('runs') or [])} runs")
        try:
            kind = st.manifest.get("kind")
            if expect is not None and kind != expect:
                raise BundleError(f"{bundle} is a {kind!r} bundle, not a {expect!r} one"
                                  + (" (drop --receipt)" if expect == "receipt" else " (add --receipt)"))
            if kind == "runs":
                return import_runs(root, st)
            if kind == "receipt":
                return import_receipt(root, st)
            raise BundleError(f"unknown bundle kind {kind!r}")
        finally:
            shutil.rmtree(st.dir, ignore_errors=True)
            remove_empty(root / IMPORT_DIR)
