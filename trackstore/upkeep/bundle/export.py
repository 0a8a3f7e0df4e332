"""Exporting runs to a bundle (``trackstore export``).

Promises (:func:`export_runs`): every file of each run folder is carried except temp files and
compaction leftovers; run.json and writer heartbeats as one snapshot each, every other file
hashed before and checked again while written. The manifest gives each run's row counts per kind
and schema versions. Export writes nothing into the store (a shared lock holds off gc, compact
and import) and works on a read-only one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ...errors import UsageError
from ...read.listing import RunInfo
from ...store.atomic import is_temp_file
from ...store.layout import (
    PROJECT_PREFIX,
    RUN_FILE,
    RUN_PREFIX,
    WRITERS_DIR,
    RunPaths,
    resolve_root,
)
from .manifest import manifest_base
from .results import ExportResult
from .writing import Member, check_output_folder, write_bundle


def _run_files(paths: RunPaths) -> Iterator[Path]:
    """Files of a run folder worth carrying: no temp files, no compaction leftovers."""
    from ...store.layout import MERGE_MARKER, MERGE_STAGING_PREFIX

    for dirpath, dirs, files in os.walk(paths.dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(MERGE_STAGING_PREFIX))
        for f in sorted(files):
            p = Path(dirpath) / f
            if is_temp_file(p) or f == MERGE_MARKER or p.is_symlink() or not p.is_file():
                continue
            yield p


def _part_stats(path: Path) -> tuple[int, int | None]:
    import pyarrow.parquet as pq

    from ...store.schema import file_version

    try:
        pf = pq.ParquetFile(path)
        return pf.metadata.num_rows, file_version(pf.schema_arrow.metadata)
    except Exception:
        return 0, None


def _run_members(info: RunInfo) -> tuple[dict, list[Member]]:
    """One run's manifest entry and its members (run.json and heartbeats as snapshots)."""
    from ...store.schema import KINDS

    base = f"runs/{PROJECT_PREFIX}{info.project}/{RUN_PREFIX}{info.run_id}"
    run_json = info.paths.run_file.read_bytes()  # one consistent snapshot, taken first
    rows = {}
    versions: set[int] = set()
    for kind in KINDS:
        n = 0
        for p in info.paths.parts(kind):
            r, v = _part_stats(p)
            n += r
            if v is not None:
                versions.add(v)
        rows[kind] = n
    members = []
    for p in _run_files(info.paths):
        rel = p.relative_to(info.paths.dir).as_posix()
        if rel == RUN_FILE:
            continue
        live = rel.startswith(f"{WRITERS_DIR}/")  # heartbeats are rewritten while a run lives
        members.append((Member.snapshot if live else Member.of_file)(f"{base}/{rel}", p))
    members.append(Member.of_bytes(f"{base}/{RUN_FILE}", run_json, info.paths.run_file.stat().st_mtime))
    meta = json.loads(run_json)
    entry = {"project": info.project, "run_id": info.run_id, "name": info.name, "status": info.status,
             "created_at": meta.get("created_at"), "updated_at": meta.get("updated_at"), "rows": rows,
             "schema_versions": sorted(versions), "files": len(members)}
    return entry, members


def export_runs(root: str | Path | None, runs: Iterable[RunInfo], out: str | os.PathLike, *,
                compress: str | None = None, split_bytes: int | None = None,
                on_stage: Callable[[str], None] | None = None) -> ExportResult:
    """Write the given runs to a bundle at ``out`` (see :mod:`trackstore.upkeep.bundle`). ``on_stage`` is
    told what begins: each run read, then the writing of the bundle (progress)."""
    from ...store import locks

    root = resolve_root(root)
    runs = list(runs)
    if not runs:
        raise UsageError("no runs to export: none matched (name runs, or use --project / --since / --all)")
    check_output_folder(out)
    with locks.reading(root, job="export"):  # writes nothing into the store (works on a read-only one)
        entries, members = [], []
        for info in runs:
            if on_stage is not None:
                on_stage(f"reading {info.project}/{info.run_id}")
            entry, files = _run_members(info)
            entries.append(entry)
            members.extend(files)
        manifest = manifest_base("runs", compress)
        manifest["runs"] = entries
        if on_stage is not None:
            on_stage(f"writing {len(members)} files to {out}")
        paths = write_bundle(out, compress, split_bytes, manifest, members)
    return ExportResult(paths, len(entries), len(manifest["files"]), sum(p.stat().st_size for p in paths), manifest)

