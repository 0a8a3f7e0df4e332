"""The plan of one run's sync: what a sync will do for it, decided in one place.

:func:`decide` makes a :class:`RunPlan` from the run's status, its cursor and its pending rows:
which rows are pending per kind (and which of them the sync holds back), whether the remote run
is opened (the one the cursor knows) or found-or-created (the cursor knows none), whether
metadata and which status are pushed, which batch in doubt is reconciled first and how many
rows are rechecked before they are sent, or why nothing is done (up to date; a damaged store).

``trackstore sync --dry-run`` prints the plan; the sync executes it
(:meth:`trackstore.sync.engine.Engine.sync_one`): the dry run says what the sync does because
both are the same plan. "Up to date" is :func:`trackstore.store.ledger.settled`, the rule the
engine's no-change check over the catalog asks too. What only the target can tell is not in the
plan: whether a remote run the cursor does not know exists already (a lost cursor; the sync
then reconciles every batch before sending it), whether the one it knows was deleted (the sync
then replays the whole run into a new one), and what rows the target holds of a batch in doubt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from trackstore.store.cursor import RUN, Cursor
from trackstore.store.ledger import cursor_settled, status_to_push
from trackstore.store.vocab import TERMINAL

#: :attr:`RunPlan.remote`: the remote run the cursor knows is opened
OPEN = "open"
#: :attr:`RunPlan.remote`: the cursor knows no remote run: it is found by its marker (a lost
#: cursor, a new spelling of the destination) or created
FIND_OR_CREATE = "find or create"

#: :attr:`RunPlan.skip`: every row acknowledged, nothing in doubt, the remote run known, the
#: status the target holds is the run's
UP_TO_DATE = "up to date"
#: :attr:`RunPlan.skip`: the sync state or a part file with unsent rows cannot be read
DAMAGED = "damaged"


@dataclass(frozen=True)
class InDoubt:
    """A batch a previous sync sent without recording the answer: reconciled first."""

    kind: str   # a record kind, or ``steps`` (a step-merged batch of several kinds)
    rows: int


@dataclass(frozen=True)
class RunPlan:
    """What a sync does for one run (see the module docstring)."""

    project: str
    run_id: str
    run_status: str
    #: rows per kind not acknowledged by the target (in replay order, sent in batches)
    pending: Mapping[str, int] = field(default_factory=dict)
    #: of ``pending``, the rows this sync holds back: a live run's newest step, for a target that
    #: takes one row per step (it may still grow)
    held: Mapping[str, int] = field(default_factory=dict)
    #: the step from which rows are held back (the live run's newest), or None
    held_step: int | None = None
    #: :data:`OPEN`, :data:`FIND_OR_CREATE`, or None (the target is not contacted)
    remote: str | None = None
    #: config, tags, notes and name are pushed (``Adapter.sync_metadata``; idempotent)
    metadata: bool = False
    #: the status pushed with the summary (``Adapter.finish_run``), or None
    status: str | None = None
    #: the batch reconciled before anything else is sent
    in_doubt: InDoubt | None = None
    #: pending rows whose presence at the target is unknown (a session that never confirmed):
    #: reconciled before they are sent
    recheck: int = 0
    #: read back what the target holds and compare (``--verify``)
    verify: bool = False
    #: :data:`UP_TO_DATE`, :data:`DAMAGED`, or None (the plan is executed)
    skip: str | None = None
    #: why the run is skipped, in words (a damaged run's message)
    reason: str | None = None

    @property
    def up_to_date(self) -> bool:
        return self.skip == UP_TO_DATE

    @property
    def to_send(self) -> dict[str, int]:
        """Rows per kind this sync hands to the target (reconciled rows included)."""
        return {k: n - self.held.get(k, 0) for k, n in self.pending.items()}

    def steps(self, target: str) -> list[str]:
        """The plan in words, in the order the sync does it (empty when the run is skipped)."""
        if self.skip:
            return []
        out = [f"create the {target} run (or find it)" if self.remote == FIND_OR_CREATE else f"open the {target} run"]
        if self.in_doubt:
            what = "rows of the last pass" if self.in_doubt.kind == RUN else f"{self.in_doubt.kind} batch"
            out.append(f"reconcile the {what} in doubt ({_rows(self.in_doubt.rows)})")
        if self.metadata:
            out.append("send config and tags")
        if self.recheck:
            out.append(f"recheck {_rows(self.recheck)} before sending")
        held = sum(self.held.values())
        if held:
            out.append(f"hold back the newest step ({_rows(held)})")
        if self.status:
            out.append(f"push status {self.status}")
        if self.verify:
            out.append("verify")
        return out

    def to_json(self) -> dict:
        return {"pending": dict(self.pending), "held": dict(self.held), "held_step": self.held_step,
                "remote": self.remote,
                "metadata": self.metadata, "status": self.status,
                "in_doubt": {"kind": self.in_doubt.kind, "rows": self.in_doubt.rows} if self.in_doubt else None,
                "recheck": self.recheck, "verify": self.verify, "skip": self.skip, "reason": self.reason}


def decide(project: str, run_id: str, run_status: str, cursor: Cursor, pending: Mapping[str, int], *,
           held: Mapping[str, int] | None = None, held_step: int | None = None, recheck: int = 0, blocked: str | None = None,
           everything: bool = False, verify: bool = False) -> RunPlan:
    """The plan of a run: ``cursor`` as the sync will use it (a session that never confirmed
    already rolled back), ``pending`` its unacknowledged rows per kind, ``held`` those the sync
    holds back, ``recheck`` those reconciled before they are sent, ``blocked`` the message of
    a damaged part hiding unsent rows. ``everything`` (``--all``, ``--verify``): look at the
    run even when it is up to date, and push an ended run's status again."""
    base = {"project": project, "run_id": run_id, "run_status": run_status, "pending": dict(pending)}
    if blocked:
        return RunPlan(**base, skip=DAMAGED, reason=blocked)
    if not everything and cursor_settled(cursor, run_status, pending):
        return RunPlan(**base, skip=UP_TO_DATE)
    status = status_to_push(run_status, cursor.synced_status)
    if status is None and everything and run_status in TERMINAL:
        status = run_status
    doubt = cursor.in_doubt_rows()
    held = {k: n for k, n in (held or {}).items() if n}
    return RunPlan(**base, held=held, held_step=held_step if held else None,
                   remote=OPEN if cursor.remote_id else FIND_OR_CREATE, metadata=True, status=status,
                   in_doubt=InDoubt(str(cursor.in_doubt.get("kind")), sum(len(r) for r in doubt.values()))
                   if cursor.in_doubt else None, recheck=recheck, verify=verify)


def skipped(project: str, run_id: str, run_status: str, why: str, reason: str | None = None, *,
            pending: Mapping[str, int] | None = None) -> RunPlan:
    """The plan of a run the engine skips before it reads its rows: up to date by the
    no-change check (``pending`` then holds every kind at 0, as :func:`decide` would say), or a
    cursor that cannot be read."""
    return RunPlan(project, run_id, run_status, pending=dict(pending or {}), skip=why, reason=reason)


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
