"""A bundle's manifest: its first member, listing every file's path, size and sha256.

Promises: :func:`manifest_base` is what every manifest starts with (format, version, kind,
source host, trackstore and schema versions); :func:`listed_files` and :func:`run_entries`
return its file list and its runs, checked (a malformed entry refuses the bundle with a
:class:`~trackstore.errors.BundleError`). Reading the manifest out of a tar stream is
:func:`~.staging.read_manifest`.
"""

from __future__ import annotations

import time
from typing import Any

from ...errors import BundleError, InvalidNameError
from ...store.clock import iso
from ...store.host import hostname
from ...store.names import validate_project, validate_run_id
from ...store.ranges import check_count

TOP = "trackstore-bundle"
MANIFEST = "manifest.json"
FORMAT = "trackstore-bundle"
BUNDLE_VERSION = 2  # 2: the manifest is the first member (1, trackstore 0.1.0's first bundles: the last)
MAX_MANIFEST = 256 << 20  # a million files listed take about 150 MB


def manifest_base(kind: str, compress: str | None) -> dict:
    """The fields every manifest of ``kind`` (``"runs"`` or ``"receipt"``) starts with."""
    from ..._version import __version__
    from ...store.schema import SCHEMA_VERSION

    return {"format": FORMAT, "version": BUNDLE_VERSION, "kind": kind, "created_at": iso(time.time()),
            "source_host": hostname(), "trackstore_version": __version__, "schema_version": SCHEMA_VERSION,
            "compression": compress}


def listed_files(manifest: dict, bundle) -> dict[str, tuple[int, str]]:
    """``{path: (size, sha256)}`` of every file the manifest lists (a malformed list is refused)."""
    listed: dict[str, tuple[int, str]] = {}
    try:
        for f in manifest.get("files") or []:
            path, size, sha = f["path"], f["size"], f["sha256"]
            if not (isinstance(path, str) and type(size) is int and size >= 0 and isinstance(sha, str)
                    and len(sha) == 64) or path in listed or path == MANIFEST:
                raise ValueError(f"bad entry {f!r}")
            listed[path] = (size, sha)
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"refusing bundle {bundle}: its manifest's file list is malformed ({exc}); "
                          "nothing was imported") from None
    return listed


def run_entries(entries: Any) -> list[dict]:
    """The manifest's ``runs`` list, each entry checked (a malformed one refuses the bundle)."""
    if not isinstance(entries, list):
        raise BundleError(f"refusing bundle: its manifest's runs are not a list ({type(entries).__name__}); "
                          "nothing was imported")
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("project"), str) and isinstance(e.get("run_id"), str)
                and isinstance(e.get("rows", {}), dict)):
            raise BundleError(f"refusing bundle: malformed run entry in its manifest: {str(e)[:80]}; "
                              "nothing was imported")
        try:
            for kind, n in (e.get("rows") or {}).items():
                check_count(n, f"rows.{kind}")
        except ValueError as exc:
            raise BundleError(f"refusing bundle: run entry {e['project']}/{e['run_id']} of its manifest: {exc}; "
                              "nothing was imported") from exc
        try:
            validate_project(e["project"])
            validate_run_id(e["run_id"])
        except InvalidNameError as exc:
            raise BundleError(f"refusing bundle: run entry {e['project']!r}/{e['run_id']!r}: {exc}; "
                              "nothing was imported") from exc
    return entries

