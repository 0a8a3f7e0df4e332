"""``--verify``: does the target hold what the store says it should?

The adapter reads back counts per record kind (plus ``traces``, distinct trajectories, as it
chooses to report them); :func:`counts_agree` compares them with the store, minus the rows the
target acknowledged as skipped. A count the store cannot tell (an unreadable part the target
never acknowledged) never agrees: a verify never passes over a gap. Reads the store; writes
nothing; says why through ``say``.
"""

from __future__ import annotations

from typing import Callable

from trackstore.read.listing import RunInfo
from trackstore.read.reader import read_kind
from trackstore.store.cursor import Cursor

from . import gaps


def counts_agree(info: RunInfo, cursor: Cursor, remote: dict[str, int] | None, say: Callable[[str], None]) -> bool:
    """Compare the adapter's read-back counts with the store. Keys are record kinds, plus
    ``traces`` (distinct trajectories), as the adapter chooses to report them."""
    if remote is None:
        return False
    for what, count in remote.items():
        local = local_count(info, cursor, what, say)
        if local is None:
            return False
        if count != local:
            say(f"{info.project}/{info.run_id}: verify: {what} at target {count}, expected {local}")
            return False
    return True


def local_count(info: RunInfo, cursor: Cursor, what: str, say: Callable[[str], None]) -> int | None:
    """What the target should hold of ``what``; None (said why) when the store cannot tell.

    Rows of unreadable parts the target acknowledged count as stored; any other unreadable
    part means the count is unknown, and a verify never agrees with an unknown count.
    """
    kind = "spans" if what == "traces" else what
    damaged: dict = {}
    columns = ["trace_id"] if what == "traces" else []
    table = read_kind(info.paths, kind, columns=columns, damaged=damaged)
    unreadable = gaps.unreadable_parts(info.paths, kind, damaged)
    blocking, synced = gaps.split(unreadable, cursor.acked)
    if blocking or (what == "traces" and synced):
        say(f"{info.project}/{info.run_id}: verify: cannot count {what}: "
            f"{'; '.join(p.describe() for p in blocking + synced)}")
        return None
    if what == "traces":
        return len(set(table.column("trace_id").to_pylist()))
    return table.num_rows + gaps.unreadable_rows(synced, kind) - cursor.skipped.get(kind, 0)
