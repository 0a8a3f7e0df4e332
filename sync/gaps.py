"""Rows a run is missing: sync says so, and never lets a gap at the target look complete.

Two kinds of gaps reach sync:

**Part files it cannot read** (truncated, no footer, not its kind's schema, no read
permission). Such a part hides rows; sending the rest and pushing the final status would leave
the target short while it looks complete, and ``--verify`` would compare against the same
short count. So, per run and destination:

* a damaged part holding rows this destination has not acknowledged *blocks* the run: nothing
  of it is sent in this sync (the target keeps what it had, and a run that ended stays
  unfinished there), and the error names each file and what to do: restore it, make it
  readable, or quarantine it with ``trackstore doctor --fix`` (its rows are then given up),
  after which the next sync continues where it stopped. Stopping before the first row, rather
  than sending around the hole, keeps a restored file sendable: wandb and SwanLab cannot take
  a point for a step they have already moved past;
* a damaged part every row of which this destination has already acknowledged (known from its
  ``writer``/``seq`` columns, or from its name: :func:`trackstore.store.parts.part_row_ids`) is at
  the target already: the run syncs on, the file is reported, and ``--verify`` counts its rows
  as stored.

Once ``doctor --fix`` has quarantined a part, its rows are given up: the run syncs to the end
and gets its final status, and the summary notes the quarantined files with the run.

**Rows the writer could not write** (``write_errors`` in ``run.json`` or in a writer's
heartbeat file: a full disk, a dropped buffer). They never reached the store, so sync sends
what exists and reports what was lost whenever it sends anything of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trackstore.errors import CorruptFileError
from trackstore.errors import GapError as GapError  # raised by the engine as gaps.GapError
from trackstore.read.listing import lost_rows
from trackstore.store.layout import PROJECT_PREFIX, RUN_PREFIX, RunPaths, is_part_name
from trackstore.store.parts import part_row_ids
from trackstore.store.ranges import RangeSet


@dataclass
class UnreadablePart:
    """One part file sync could not read, and the rows it holds when that is known."""

    path: Path
    kind: str
    error: CorruptFileError
    rows: RangeSet | None

    def acknowledged(self, acked: RangeSet | None) -> bool:
        """True when every row of this part is known to be in ``acked``."""
        return self.rows is not None and acked is not None and _covers(acked, self.rows)

    @property
    def permission_denied(self) -> bool:
        return isinstance(self.error.__cause__, PermissionError)

    def describe(self) -> str:
        detail = (self.error.detail or "unreadable").splitlines()[0][:200]
        return f"{self.path} ({detail})"


def unreadable_parts(paths: RunPaths, kind: str, damaged: dict[Path, CorruptFileError]) -> list[UnreadablePart]:
    """The damaged parts ``read_kind(..., damaged=...)`` recorded for one kind, with their rows."""
    if not damaged:
        return []
    siblings = paths.parts(kind)
    return [UnreadablePart(Path(p), kind, err, part_row_ids(Path(p), siblings)) for p, err in sorted(damaged.items())]


def split(parts: list[UnreadablePart], acked: dict[str, RangeSet]) -> tuple[list[UnreadablePart], list[UnreadablePart]]:
    """``(blocking, already_synced)``: parts hiding rows the destination lacks, and the rest."""
    blocking = [p for p in parts if not p.acknowledged(acked.get(p.kind))]
    return blocking, [p for p in parts if p not in blocking]


def blocking_message(parts: list[UnreadablePart]) -> str:
    """Why the run was not synced, naming every file, and what to do."""
    files = "; ".join(p.describe() for p in parts)
    noun = "1 part file" if len(parts) == 1 else f"{len(parts)} part files"
    msg = (f"not synced: {noun} of this run cannot be read and may hold rows the target does not have: {files}. "
           "Nothing was sent for this run and its final status was not pushed. Restore the file from a backup "
           "or bundle if you have one, or run `trackstore doctor --fix` to quarantine it (its rows are then given "
           "up for good); the next sync continues where this one stopped")
    if any(p.permission_denied for p in parts):
        msg += ". A file this user may not read (permission denied) needs read access (chmod/chown), not quarantine"
    return msg


def already_synced_note(parts: list[UnreadablePart]) -> str:
    files = "; ".join(p.describe() for p in parts)
    return (f"unreadable part file(s), whose rows the target already holds: {files}; run `trackstore doctor "
            "--fix` to quarantine them (restore them from a backup to keep a local copy)")


def unreadable_rows(parts: list[UnreadablePart], kind: str) -> int:
    """Rows of ``kind`` held by acknowledged unreadable parts (stored, at the target, not readable here)."""
    return sum(len(p.rows) for p in parts if p.kind == kind and p.rows is not None)


def quarantined_parts(root: Path) -> dict[tuple[str, str], int]:
    """How many part files ``trackstore doctor`` quarantined, per ``(project, run_id)``."""
    from trackstore.upkeep.doctor import quarantine_listing

    counts: dict[tuple[str, str], int] = {}
    for entry in quarantine_listing(root):
        parts = Path(str(entry.get("from", ""))).parts
        if (len(parts) >= 4 and parts[0].startswith(PROJECT_PREFIX) and parts[1].startswith(RUN_PREFIX)
                and is_part_name(parts[-1])):
            key = (parts[0][len(PROJECT_PREFIX):], parts[1][len(RUN_PREFIX):])
            counts[key] = counts.get(key, 0) + 1
    return counts


def quarantined_note(n: int) -> str:
    return (f"{n} part file(s) of this run were quarantined by `trackstore doctor` (see `<root>/_quarantine/*/"
            "reasons.json`): their rows are no longer in the store, and are at the target only if a sync sent them "
            "before")


def write_errors(meta: dict, writers: list[dict]) -> str | None:
    """What the run's writers could not write, from ``run.json`` and each writer's file; None if nothing."""
    return lost_rows(meta.get("write_errors"), writers)


def _covers(outer: RangeSet, inner: RangeSet) -> bool:
    have = outer.to_json()
    for writer, ranges in inner.to_json().items():
        for lo, hi in ranges:
            if not any(a <= lo and hi <= b for a, b in have.get(writer, ())):
                return False
    return True
