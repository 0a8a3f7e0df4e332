"""What every adapter does with rows of the ``artifacts`` kind before it sends them.

The kind holds two sorts of rows (docs/format.md, section 7): a *file* of a version (copied into
the run folder, or a *reference* to a file left where the trainer wrote it) and an *alias move*
(``event = 'alias'``: the alias in ``aliases`` now belongs to that version). This module
promises:

* :func:`local_file` answers where a file row's bytes are, or why they cannot be sent: a copy
  missing from the store, or a reference whose file vanished or changed since it was logged
  (size and sha256 checked by streaming the file, :func:`trackstore.records.artifact_refs.check_reference`).
  A reference that changed is never uploaded as something else: it is skipped with its reason,
  counted like every skip.
* :func:`runs_of` cuts a batch into consecutive runs of rows of one ``(name, version)`` and one
  sort (files or alias moves), in log order, so an adapter replays alias moves in the order
  they were made (the last move wins, as in the store's ``artifact_aliases`` view).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from trackstore.records.artifact_refs import check_reference
from trackstore.records.artifacts import ALIAS_EVENT, REFERENCE

MISSING = "artifact file missing from the store"


def reference_skip(problem: str) -> str:
    """The skip reason of a reference with ``problem`` (its first word: vanished, changed, unreadable)."""
    return f"artifact reference {problem.split(':', 1)[0]}"


def local_file(run_dir: str | Path, row: dict) -> tuple[Path | None, str | None]:
    """``(path of the bytes, None)``, or ``(None, skip reason)`` for a file row."""
    if row.get("storage") == REFERENCE:
        problem = check_reference(row["path"], row["size"], row["sha256"])
        if problem is not None:
            return None, reference_skip(problem)
        return Path(row["path"]), None
    local = Path(run_dir) / row["path"]
    return (local, None) if local.is_file() else (None, MISSING)


def is_alias_move(row: dict) -> bool:
    return row.get("event") == ALIAS_EVENT


@dataclass
class Group:
    """Consecutive rows of one version: its files (``moves`` empty) or alias moves to it (``files`` empty)."""

    name: str
    version: int
    files: list[dict]
    moves: list[str]

    @property
    def first(self) -> dict:
        return self.files[0]


def runs_of(rows: Iterable[dict]) -> Iterator[Group]:
    """Consecutive groups of rows, in order (see the module docstring)."""
    for (name, version, alias), group in itertools.groupby(rows, key=lambda r: (r["name"], r["version"],
                                                                                is_alias_move(r))):
        items = list(group)
        if alias:
            moves = [a for r in items for a in (r.get("aliases") or [])]
            yield Group(name, version, [], list(dict.fromkeys(moves)))
        else:
            yield Group(name, version, items, [])
