"""Which runs a store holds, from its folders alone: two levels of ``scandir``, no ``stat``,
no catalog (a run folder's name says its project and run id; what is in it is the catalog's
business)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Iterator

from ..layout import PROJECT_PREFIX, RUN_PREFIX, outside_store
from ..meta import RunJsonWarning


def run_folders(root: str | os.PathLike) -> list[tuple[str, str]]:
    """``(project, run_id)`` of every run folder of the store, sorted: two levels of ``scandir``,
    no ``stat`` and no catalog (folders only say which runs exist). A project or run folder that
    is a symbolic link leading outside the store is not a run of it and is left out
    (:func:`trackstore.store.layout.outside_store`)."""
    return sorted(_scan_runs(Path(root)))


def _scan_runs(root: Path) -> Iterator[tuple[str, str]]:
    """``(project, run_id)`` of every run folder (names from two levels of ``scandir``)."""
    real_root: list[str] = []  # realpath of the root, taken at the first link met

    def inside(e: os.DirEntry) -> bool:
        if not e.is_symlink():  # from the directory entry: no system call
            return True
        if not real_root:
            real_root.append(os.path.realpath(root))
        problem = outside_store(e.path, real_root[0])
        if problem is not None:
            warnings.warn(f"{e.path} is {problem}: it is not a run of this store, and its run.json is not read",
                          RunJsonWarning, stacklevel=2)
        return problem is None

    try:
        top = os.scandir(root)
    except OSError:
        return
    with top:
        projects = [e for e in top if e.name.startswith(PROJECT_PREFIX) and e.is_dir() and inside(e)]
    for pe in projects:
        project = pe.name[len(PROJECT_PREFIX):]
        try:
            inner = os.scandir(pe.path)
        except OSError:
            continue
        with inner:
            for e in inner:
                if e.name.startswith(RUN_PREFIX) and e.is_dir() and inside(e):
                    yield project, e.name[len(RUN_PREFIX):]
