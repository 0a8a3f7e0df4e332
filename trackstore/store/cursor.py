"""The sync cursor: what one destination acknowledged of one run, and how it changes.

The cursor is the state of the exactly-once protocol (docs/format.md section 8,
docs/architecture.md "Exactly once"). Every change the protocol makes is a method here, so a new
field touches this file alone:

* :meth:`Cursor.begin_session` / :meth:`Cursor.confirm_session` / :meth:`Cursor.roll_back_session`:
  a target that makes rows durable only when its session closes (SwanLab) keeps the cursor as it
  was when the session began until the target confirms; a session that never confirmed goes back
  to that state and its rows are rechecked.
* :meth:`Cursor.mark_in_doubt` before a batch is sent; :meth:`Cursor.acknowledge` once the target
  answered (rows acknowledged or reported as skipped, the doubt and the batch's rechecks end).
* :meth:`Cursor.mark_recheck` for rows whose presence at the target is unknown;
  :meth:`Cursor.forget` when the remote run is gone and the whole run is replayed;
* :meth:`Cursor.merge` of a cursor carried back in a receipt;
* :func:`check_cursor`, the one check of a stored cursor's fields and numbers, and the readers of
  the legacy layouts older versions wrote.

Where cursors are stored, listed and summarised is :mod:`trackstore.store.ledger`.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .ranges import RangeSet, RangeValueError, check_count

#: the kind of a batch in doubt that holds whole steps of several kinds (a target that takes one
#: row per step: ``trackstore.sync.adapter.Adapter.merge_steps``); its ``rows`` map kinds to row ids
STEPS = "steps"
#: the kind of a doubt that holds every row one pass of a sync hands to the target for a run, of
#: several kinds and batches at once (a target whose reconcile reads what it holds per kind:
#: ``trackstore.sync.adapter.Capabilities.doubt_per_run``); its ``rows`` map kinds to row ids,
#: and each batch the target acknowledges leaves it (:meth:`Cursor.acknowledge`)
RUN = "run"
#: 2: an ``in_doubt`` of kind :data:`RUN` may be stored (version 1 never holds one)
CURSOR_VERSION = 2
#: the doubts whose ``rows`` map kinds to row-id sets (any other holds one kind's set)
PER_KIND_DOUBTS = (STEPS, RUN)


def destination_id(target: str, destination: str) -> str:
    """A path-safe, stable folder name for one destination."""
    digest = hashlib.sha256(f"{target}\0{destination}".encode()).hexdigest()[:12]
    safe_target = re.sub(r"[^A-Za-z0-9_-]", "_", target)
    return f"{safe_target}-{digest}"



@dataclass
class Cursor:
    """Sync progress of one run to one destination. See the module docstring."""

    target: str
    destination: str
    project: str
    run_id: str
    acked: dict[str, RangeSet] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    in_doubt: dict | None = None
    #: the id of the remote run (the adapter sets it in ``open_run``; ``status`` shows it)
    remote_id: str | None = None
    #: adapter state the engine persists on the adapter's behalf (opaque to the core)
    remote: dict[str, Any] = field(default_factory=dict)
    #: a target that makes rows durable only when its session closes (SwanLab,
    #: ``Adapter.confirms_on_close``): ``acked``, ``skipped`` and ``remote`` as they were when the
    #: open session began; None once the target confirmed the session's rows
    session: dict | None = None
    #: rows whose presence at the target is unknown (handed to a session that ended unconfirmed,
    #: or pending when a cursor that knew no remote run met one): the engine reconciles them
    #: with the target before it sends them
    recheck: dict[str, RangeSet] = field(default_factory=dict)
    #: when the engine last handed a batch to the target
    last_send_at: str | None = None
    synced_status: str | None = None
    last_sync_at: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the destination is a staging area on this machine (an offline or local client folder
    #: that a later upload sends on): what it acknowledged has not left the machine. The engine
    #: sets it from ``trackstore.sync.adapter.Adapter.staging``
    staged: bool = False

    @property
    def dest_id(self) -> str:
        return destination_id(self.target, self.destination)

    def acked_set(self, kind: str) -> RangeSet:
        return self.acked.setdefault(kind, RangeSet())

    def in_doubt_rows(self) -> dict[str, RangeSet]:
        """The rows of the batch in doubt, per kind (a step-merged batch, kind :data:`STEPS`, and
        a run's pass, kind :data:`RUN`, hold several kinds); empty when no batch is in doubt."""
        doubt = self.in_doubt
        if not doubt:
            return {}
        rows = doubt.get("rows") if doubt.get("kind") in PER_KIND_DOUBTS else {doubt.get("kind"): doubt.get("rows")}
        return {k: RangeSet.from_json(v) for k, v in (rows or {}).items() if k}

    def roll_back_session(self) -> bool:
        """Close a session that never confirmed its rows (a target that makes rows durable only
        when its session closes; the sync died or the target could not confirm): ``acked``,
        ``skipped`` and ``remote`` go back to what they were when the session began, and every
        row handed over since, the batch in doubt included, joins :attr:`recheck`, to be
        reconciled with the target before it is sent again. False when no session was open."""
        snap = self.session
        if snap is None:
            return False
        before = {k: RangeSet.from_json(v) for k, v in (snap.get("acked") or {}).items()}
        handed = {k: ids - before.get(k, RangeSet()) for k, ids in self.acked.items()}
        for k, ids in self.in_doubt_rows().items():
            handed.setdefault(k, RangeSet()).update(ids)
        for k, ids in handed.items():
            if ids:
                self.recheck.setdefault(k, RangeSet()).update(ids)
        self.acked = before
        self.skipped = {k: int(v) for k, v in (snap.get("skipped") or {}).items()}
        self.remote = dict(snap.get("remote") or {})
        self.in_doubt = self.session = None
        return True

    def begin_session(self) -> None:
        """A session of a target that confirms on close opens: remember ``acked``, ``skipped``
        and ``remote`` as they are now (:meth:`roll_back_session` returns to them)."""
        self.session = {"acked": {k: v.to_json() for k, v in self.acked.items()},
                        "skipped": dict(self.skipped), "remote": copy.deepcopy(self.remote)}

    def confirm_session(self) -> None:
        """The target confirmed what the session was handed: it is acknowledged for good, and a
        row acknowledged needs no recheck."""
        self.session = None
        self._drop_acknowledged_rechecks()

    def _drop_acknowledged_rechecks(self) -> None:
        """A row acknowledged needs no recheck: keep only the rechecks of rows not in ``acked``."""
        self.recheck = {k: left for k, ids in self.recheck.items()
                        if (left := ids - self.acked.get(k, RangeSet()))}

    def mark_in_doubt(self, kind: str, rows: Mapping[str, RangeSet], batch_id: str, at: str) -> None:
        """A batch of ``rows`` (kind -> row ids; several kinds only for :data:`STEPS`) is about to
        be sent: until :meth:`acknowledge`, its outcome is unknown."""
        self.last_send_at = at
        self.in_doubt = {"kind": kind, "batch_id": batch_id, "since": at,
                         "rows": {k: v.to_json() for k, v in rows.items()} if kind == STEPS else rows[kind].to_json()}

    def mark_run_in_doubt(self, rows: Mapping[str, RangeSet], batch_id: str, at: str) -> None:
        """Every row of ``rows`` (kind -> row ids) is about to be sent, batch after batch, with no
        durable write between them: until each batch is acknowledged, its rows' outcome is
        unknown. One doubt of kind :data:`RUN`; :meth:`acknowledge` takes each batch's rows out
        of it and ends it with the last."""
        self.last_send_at = at
        self.in_doubt = {"kind": RUN, "batch_id": batch_id, "since": at,
                         "rows": {k: v.to_json() for k, v in rows.items() if v}}

    def rechecked_kinds(self, rows: Mapping[str, RangeSet]) -> list[str]:
        """The kinds of which some of ``rows`` are to be rechecked with the target before sending."""
        return [k for k, ids in rows.items() if self.recheck.get(k) and self.recheck[k].overlap(ids)]

    def mark_recheck(self, kind: str, ids: RangeSet) -> None:
        """The target may hold ``ids`` already (nobody knows): reconcile before sending them."""
        self.recheck.setdefault(kind, RangeSet()).update(ids)

    def acknowledge(self, handed: Mapping[str, RangeSet], acked: Mapping[str, RangeSet],
                    skipped: Mapping[str, int]) -> None:
        """The target answered for the batch in doubt, whose rows were ``handed``: ``acked`` rows
        are held (or cannot be held, counted per kind in ``skipped``); the rest stay pending. The
        doubt ends, and no row of the batch needs a recheck any more. A doubt of kind :data:`RUN`
        ends for the batch's rows only: it ends when no row is left in it."""
        for k, ids in acked.items():
            self.acked_set(k).update(ids)
        for k, n in skipped.items():
            if n:
                self.skipped[k] = self.skipped.get(k, 0) + n
        for k, ids in handed.items():
            if k in self.recheck:
                self.recheck[k] = self.recheck[k] - ids
        if self.in_doubt and self.in_doubt.get("kind") == RUN:
            left = {k: rest for k, ids in self.in_doubt_rows().items() if (rest := ids - handed.get(k, RangeSet()))}
            if left:
                self.in_doubt = {**self.in_doubt, "rows": {k: v.to_json() for k, v in left.items()}}
                return
        self.in_doubt = None

    def forget(self) -> None:
        """The remote run is gone for good and a new one was made: nothing is held there."""
        self.acked.clear()
        self.recheck.clear()
        self.skipped.clear()
        self.in_doubt = None
        self.synced_status = None

    def merge(self, other: Cursor, other_is_newer: bool) -> Cursor:
        """This cursor and ``other`` (the same run and destination, e.g. carried back in a
        receipt) as one: the union of acknowledged rows; the status, errors and batch in doubt of
        the more recent sync (``other_is_newer``). A cursor whose session never confirmed is
        first rolled back to the session's start, its unconfirmed rows to be rechecked: merged as
        they stood, those rows would count as delivered although the target may never have kept
        them. Neither input changes."""
        out = Cursor.from_json(self.to_json())
        incoming = Cursor.from_json(other.to_json())
        out.roll_back_session()
        incoming.roll_back_session()
        for kind, rs in incoming.acked.items():
            out.acked_set(kind).update(rs)
        for kind, rs in incoming.recheck.items():
            out.mark_recheck(kind, rs)
        out._drop_acknowledged_rechecks()  # a row one side confirmed needs no recheck
        for kind, n in incoming.skipped.items():
            out.skipped[kind] = max(out.skipped.get(kind, 0), n)
        for k, v in incoming.remote.items():
            out.remote.setdefault(k, v)
        if other_is_newer:
            out.synced_status = incoming.synced_status
            out.last_sync_at = incoming.last_sync_at
            out.in_doubt = incoming.in_doubt
            out.last_error, out.last_error_at = incoming.last_error, incoming.last_error_at
        out.notes = list(dict.fromkeys(self.notes + other.notes))
        return out

    def to_json(self) -> dict:
        return {
            "version": CURSOR_VERSION,
            "target": self.target,
            "destination": self.destination,
            "project": self.project,
            "run_id": self.run_id,
            "acked": {k: v.to_json() for k, v in self.acked.items()},
            "skipped": dict(self.skipped),
            "in_doubt": self.in_doubt,
            "remote_id": self.remote_id,
            "remote": self.remote,
            "session": self.session,
            "recheck": {k: v.to_json() for k, v in self.recheck.items() if v},
            "last_send_at": self.last_send_at,
            "synced_status": self.synced_status,
            "last_sync_at": self.last_sync_at,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "notes": self.notes[-50:],
            "staged": self.staged,
        }

    @classmethod
    def from_json(cls, data: dict) -> Cursor:
        """The cursor stored as ``data``, checked first (:func:`check_cursor`: a ValueError names
        the field that is out of the format's ranges)."""
        data = _legacy_journal(_legacy_carried(check_cursor(data)))
        return cls(
            target=data["target"],
            destination=data["destination"],
            project=data["project"],
            run_id=data["run_id"],
            acked={k: RangeSet.from_json(v) for k, v in (data.get("acked") or {}).items()},
            skipped={k: int(v) for k, v in (data.get("skipped") or {}).items()},
            in_doubt=data.get("in_doubt"),
            remote_id=data.get("remote_id") or _legacy_remote_id(data.get("remote") or {}),
            remote=dict(data.get("remote") or {}),
            session=data.get("session"),
            recheck={k: RangeSet.from_json(v) for k, v in (data.get("recheck") or {}).items()},
            last_send_at=data.get("last_send_at"),
            synced_status=data.get("synced_status"),
            last_sync_at=data.get("last_sync_at"),
            last_error=data.get("last_error"),
            last_error_at=data.get("last_error_at"),
            notes=list(data.get("notes") or []),
            staged=bool(data["staged"]) if "staged" in data else _legacy_staged(data.get("remote") or {}),
        )


def check_cursor(data: Any) -> dict:
    """``data`` (a cursor as stored) when its fields have the format's types and its numbers the
    format's ranges (docs/format.md section 8): row-id sets of int64 seqs with ``lo <= hi``
    (:meth:`RangeSet.from_json`), skip counts from 0 (:func:`~trackstore.store.ranges.check_count`),
    in ``acked``, ``recheck``, ``skipped``, the batch ``in_doubt`` and the ``session``. Else a
    :class:`~trackstore.store.ranges.RangeValueError` (a ValueError) naming the field.

    The one check of a cursor's numbers: every read of a cursor (:meth:`Cursor.from_json`: sync,
    ``status``, the ``sync_state`` view, gc, doctor) and every receipt import goes through it, so
    a number no reader can use is refused where it is read."""
    if not isinstance(data, dict):
        raise RangeValueError("cursor", f"a cursor is a JSON object, not {type(data).__name__}")
    for key in ("target", "destination", "project", "run_id"):
        if not isinstance(data.get(key), str):
            raise RangeValueError(key, f"{data.get(key)!r} is not a string")

    def per_kind(value: Any, field: str, what: str, check: Callable[[Any, str], Any]) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise RangeValueError(field, f"must be an object of kind -> {what}, not {type(value).__name__}")
        for kind, item in value.items():
            check(item, f"{field}.{kind}")

    def sets(value: Any, field: str) -> None:
        per_kind(value, field, "row-id set", RangeSet.from_json)

    def counts(value: Any, field: str) -> None:
        per_kind(value, field, "count", check_count)

    sets(data.get("acked"), "acked")
    sets(data.get("recheck"), "recheck")
    counts(data.get("skipped"), "skipped")
    doubt = data.get("in_doubt")
    if doubt is not None:
        if not isinstance(doubt, dict):
            raise RangeValueError("in_doubt", f"must be an object or null, not {type(doubt).__name__}")
        if doubt.get("kind") in PER_KIND_DOUBTS:
            sets(doubt.get("rows"), "in_doubt.rows")
        else:
            RangeSet.from_json(doubt.get("rows"), "in_doubt.rows")
    session = data.get("session")
    if session is not None:
        if not isinstance(session, dict):
            raise RangeValueError("session", f"must be an object or null, not {type(session).__name__}")
        sets(session.get("acked"), "session.acked")
        counts(session.get("skipped"), "session.skipped")
    for key in ("remote", "notes"):
        if data.get(key) is not None and not isinstance(data[key], dict if key == "remote" else list):
            raise RangeValueError(key, f"has the wrong type ({type(data[key]).__name__})")
    return data


def _legacy_carried(data: dict) -> dict:
    """Cursors of wandb written before the engine sent step-merged batches kept the rows a batch
    of another kind had delivered in ``remote["carried"]`` (and their skip reasons in
    ``remote["carried_skipped"]``): those rows are acknowledged, so they join ``acked`` (and
    ``skipped``) here, once, and the keys go."""
    remote = data.get("remote") or {}
    if not (remote.get("carried") or remote.get("carried_skipped")):
        return data
    data, remote = dict(data), dict(remote)
    acked = {k: RangeSet.from_json(v) for k, v in (data.get("acked") or {}).items()}
    skipped = dict(data.get("skipped") or {})
    for key, ids in (remote.pop("carried_skipped", None) or {}).items():
        kind = key.partition("\0")[0]  # rows already acknowledged by their own kind were counted then
        skipped[kind] = int(skipped.get(kind, 0)) + len(RangeSet.from_json(ids) - acked.get(kind, RangeSet()))
    for kind, ids in (remote.pop("carried", None) or {}).items():
        acked.setdefault(kind, RangeSet()).update(RangeSet.from_json(ids))
    data.update(acked={k: v.to_json() for k, v in acked.items()}, skipped=skipped, remote=remote)
    return data


def _legacy_journal(data: dict) -> dict:
    """SwanLab cursors written before the engine owned sessions kept the rows of the open
    session in ``remote["journal"]`` and the rows to check again in ``remote["resend"]``: they
    become the :attr:`Cursor.session` (the cursor without the journal's rows) and
    :attr:`Cursor.recheck`."""
    remote = data.get("remote") or {}
    if "journal" not in remote and "resend" not in remote:
        return data
    data, remote = dict(data), dict(remote)
    journal = remote.pop("journal", None) or {}
    recheck = {k: RangeSet.from_json(v) for k, v in (data.get("recheck") or {}).items()}
    for kind, ids in (remote.pop("resend", None) or {}).items():
        recheck.setdefault(kind, RangeSet()).update(RangeSet.from_json(ids))
    if any(RangeSet.from_json(v) for v in journal.values()):
        acked = {k: RangeSet.from_json(v) for k, v in (data.get("acked") or {}).items()}
        before = {k: (v - RangeSet.from_json(journal.get(k))).to_json() for k, v in acked.items()}
        data["session"] = {"acked": before, "skipped": dict(data.get("skipped") or {}), "remote": dict(remote)}
    data.update(remote=remote, recheck={k: v.to_json() for k, v in recheck.items() if v})
    return data


def _legacy_remote_id(remote: dict) -> str | None:
    """Cursors written before ``remote_id`` existed kept it among the adapter's keys (MLflow:
    ``run_id``; wandb, SwanLab: ``id``): read once here, written back as ``remote_id``."""
    rid = remote.get("run_id") or remote.get("id")
    return str(rid) if rid else None


def _legacy_staged(remote: dict) -> bool:
    """Cursors written before ``staged`` existed: the wandb and SwanLab adapters keep the
    client's mode in ``remote["mode"]``, and ``offline``/``local`` wrote a folder for a later
    upload (read once here, written back as ``staged``)."""
    return remote.get("mode") in ("offline", "local")


