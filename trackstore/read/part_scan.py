"""Which part files the views read: one scan of the store's run folders, checking each part once.

:func:`scan_parts` lists every record kind's part files under ``project=*/run=*`` (never
``_trash``, ``_quarantine`` or ``_sync``, never a temp file), checks each one's Parquet framing
and footer, and says which are sound (with their columns) and which are damaged and why. The
checks and each kind folder's listing are kept in the store's catalog, so scanning an
unchanged store costs one ``stat`` per kind folder, whatever its number of parts. A file
reached through a link leading out of the store counts as damaged. A damaged file left out of
an answer is reported with :func:`warn_skipped` (a :class:`SkippedFileWarning` naming it).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

from ..store import schema as _schema
from ..store.layout import (
    ARTIFACTS_DIR,
    PART_SUFFIX,
    PROJECT_PREFIX,
    RUN_PREFIX,
    is_part_name,
    kind_folder,
    outside_store,
    resolve_root,
)
from ..store.parts import check_part, part_schema
from ..store.vocab import Kind

RECORD_KINDS = _schema.KINDS  # metrics, samples, spans, histograms, artifacts
# each kind's part files, relative to a run folder
KIND_GLOB: dict[str, str] = {k: f"{kind_folder(k)}/*{PART_SUFFIX}" for k in RECORD_KINDS}
_KIND_FOLDER = {k: KIND_GLOB[k].rsplit("/", 1)[0].replace("/", os.sep) for k in RECORD_KINDS}


class SkippedFileWarning(UserWarning):
    """A damaged part file was left out of the views (the message names it)."""


def warn_skipped(path, problem, *, stacklevel: int = 2) -> None:
    """Warn that a damaged part file is left out of an answer (views, curves)."""
    warnings.warn(f"skipping damaged data file {path}: {problem} (run `trackstore doctor` to quarantine it)",
                  SkippedFileWarning, stacklevel=stacklevel + 1)


@dataclass
class StoreParts:
    """What :func:`scan_parts` found: sound files and their schemas per kind, damaged files."""

    files: dict[str, list[str]]
    schemas: dict[str, set[tuple]]
    bad: dict[str, str]


def scan_parts(root: str | os.PathLike | None = None, only: set[tuple[str, str]] | None = None) -> StoreParts:
    """Every sound part file per kind with its schema, and the damaged ones with the reason.

    Only ``project=*/run=*`` folders are visited (so never ``_trash``, ``_quarantine`` or
    ``_sync``) and only names ending in ``.parquet`` that do not start with a dot. ``only``
    limits the scan to some ``(project, run_id)`` pairs. A file reached through a symbolic
    link that leads outside the store counts as damaged: the views never read it (and the
    read-only sandbox could not: one such link would fail every query).

    What costs time is kept in the store's catalog: each part's check (by path, size and
    mtime) and each kind folder's listing (by the folder's ``stat`` fingerprint). A kind folder
    whose fingerprint did not change is not listed and its parts are not ``stat``-ed: parts
    arrive and leave by renames, which change the folder, and never change in place. So the
    scan of an unchanged store costs a ``stat`` per kind folder, whatever its number of parts.
    """
    from ..store.catalog import fingerprint, open_catalog, run_folders

    root_path = resolve_root(root)
    real_root = os.path.realpath(root_path)
    linked_projects: dict[str, bool] = {}
    found = StoreParts({k: [] for k in RECORD_KINDS}, {k: set() for k in RECORD_KINDS}, {})
    catalog = open_catalog(root_path)  # each part's check, from earlier commands while it is unchanged
    known = catalog.part_checks()
    listed = catalog.part_folders()
    seen: dict[str, tuple] = {}
    seen_folders: dict[str, tuple[str, list[str]]] = {}
    head = f"{root_path}{os.sep}"
    now = time.time()
    if only is None:
        folders: Iterable[tuple[str, str]] = run_folders(root_path)
    else:  # straight to the runs asked for: a question about one run never lists the store
        folders = [(p, r) for p, r in sorted(only)
                   if (root_path / f"{PROJECT_PREFIX}{p}" / f"{RUN_PREFIX}{r}").is_dir()]
    for project, run_id in folders:
        project_dir = f"{head}{PROJECT_PREFIX}{project}"
        if project_dir not in linked_projects:
            linked_projects[project_dir] = os.path.islink(project_dir)
        run_dir = f"{project_dir}{os.sep}{RUN_PREFIX}{run_id}"
        run_linked = linked_projects[project_dir] or os.path.islink(run_dir)
        for kind in RECORD_KINDS:
            d = f"{run_dir}{os.sep}{_KIND_FOLDER[kind]}"
            fp = fingerprint(d, now)  # before the listing: a change meanwhile leaves it old
            if fp == "-":
                continue
            rel_d = d[len(head):] if d.startswith(head) else d
            linked = run_linked or (kind == Kind.ARTIFACTS and os.path.islink(f"{run_dir}{os.sep}{ARTIFACTS_DIR}")) \
                or os.path.islink(d)
            old = listed.get(rel_d)
            if not linked and fp and old is not None and old[0] == fp and _known_parts(
                    found, kind, d, rel_d, old[1], known, seen):
                seen_folders[rel_d] = old
                continue
            try:
                entries = os.scandir(d)
            except (FileNotFoundError, NotADirectoryError):
                continue
            names: list[str] | None = []
            with entries:
                for e in entries:
                    if not is_part_name(e.name):
                        continue
                    if e.is_symlink():
                        names = None  # judged entry by entry, every time
                    elif names is not None:
                        names.append(e.name)
                    problem = outside_store(e.path, real_root) if linked or e.is_symlink() else None
                    if problem is None:
                        problem, columns = _checked(e, head, known, seen)
                    if problem is None:
                        found.schemas[kind].add(columns)
                        found.files[kind].append(e.path)
                    else:
                        found.bad[e.path] = problem
            if fp and not linked and names is not None:
                seen_folders[rel_d] = (fp, sorted(names))
    complete = only is None
    if (seen != {k: v for k, v in known.items() if k in seen} or (complete and len(seen) != len(known))
            or seen_folders != {k: v for k, v in listed.items() if k in seen_folders}
            or (complete and len(seen_folders) != len(listed))):
        catalog.put_part_checks(seen, complete=complete, folders=seen_folders)
    catalog.save()
    catalog.close()
    return found


def _known_parts(found: StoreParts, kind: str, folder: str, rel_folder: str, names: list[str],
                 known: dict[str, tuple], seen: dict[str, tuple]) -> bool:
    """Add the parts of an unchanged kind folder from their kept checks; False (nothing added)
    if a part has none."""
    checks = []
    for name in names:
        check = known.get(f"{rel_folder}{os.sep}{name}")
        if check is None:
            return False
        checks.append(check)
    for name, check in zip(names, checks):
        seen[f"{rel_folder}{os.sep}{name}"] = check
        path = f"{folder}{os.sep}{name}"
        if check[2] is None:
            found.schemas[kind].add(check[3])
            found.files[kind].append(path)
        else:
            found.bad[path] = check[2]
    return True


def _checked(e: os.DirEntry, head: str, known: dict[str, tuple], seen: dict[str, tuple]) -> tuple[str | None, Any]:
    """``(problem, columns)`` of one part: its framing (:func:`check_part`) and its columns
    (:func:`part_schema`), or what an earlier command found while its size and mtime are the same."""
    try:
        st = e.stat()
    except OSError as exc:
        return f"cannot stat: {exc.strerror or exc}", None
    rel = e.path[len(head):] if e.path.startswith(head) else e.path
    old = known.get(rel)
    if old is not None and old[0] == st.st_size and old[1] == st.st_mtime_ns:
        seen[rel] = old
        return old[2], old[3]
    problem, columns = check_part(e.path), None
    if problem is None:
        try:
            columns = part_schema(e.path)
        except Exception as exc:
            problem = f"unreadable Parquet footer ({exc})"
    if not (problem or "").startswith("cannot stat"):
        seen[rel] = (st.st_size, st.st_mtime_ns, problem, columns)
    return problem, columns
