"""Which runs a store holds, from its folders alone: two levels of ``scandir``, no ``stat``,
no catalog (a run folder's name says its project and run id; what is in it is the catalog's
business)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from ..layout import PROJECT_PREFIX, RUN_PREFIX


def run_folders(root: str | os.PathLike) -> list[tuple[str, str]]:
    """``(project, run_id)`` of every run folder of the store, sorted: two levels of ``scandir``,
    no ``stat`` and no catalog (folders only say which runs exist)."""
    return sorted(_scan_runs(Path(root)))


def _scan_runs(root: Path) -> Iterator[tuple[str, str]]:
    """``(project, run_id)`` of every run folder (names from two levels of ``scandir``)."""
    try:
        top = os.scandir(root)
    except OSError:
        return
    with top:
        projects = [e for e in top if e.name.startswith(PROJECT_PREFIX) and e.is_dir()]
    for pe in projects:
        project = pe.name[len(PROJECT_PREFIX):]
        try:
            inner = os.scandir(pe.path)
        except OSError:
            continue
        with inner:
            for e in inner:
                if e.name.startswith(RUN_PREFIX) and e.is_dir():
                    yield project, e.name[len(RUN_PREFIX):]
