"""The sync ledger under ``<root>/_sync/``: what each destination has acknowledged, per run.

The core owns this format (so ``gc``, ``status`` and the ``sync_state`` SQL view can read it
without importing the sync engine); :mod:`trackstore.sync` is its only writer.

::

    <root>/_sync/<dest_id>/destination.json              {"target", "destination", "dest_id"}
    <root>/_sync/<dest_id>/project=<p>/run=<id>.json     one cursor per run

A *destination* is a target plus where it points (an MLflow tracking URI, a wandb
entity/project, a SwanLab host), so one run synced to two MLflow servers has two cursors.
Credentials are stripped from destinations before they are stored
(:func:`trackstore.store.redact.redact_url`).

A cursor holds, per record kind, the :class:`~trackstore.store.ranges.RangeSet` of ``(writer, seq)``
rows the target acknowledged (plus rows it cannot hold, counted in ``skipped`` and reported);
an ``in_doubt`` batch (sent, acknowledgement not yet recorded: the engine asks the target
before resending it); the remote ids the adapter needs; the run status last pushed; and the
last error. It is rewritten atomically after every acknowledged batch.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .atomic import read_json, write_json_atomic
from .clock import iso
from .layout import DESTINATION_FILE, KINDS, PROJECT_PREFIX, RUN_PREFIX, SYNC_DIR, RunPaths, relist
from .ranges import RangeSet, RangeValueError, check_count

#: the kind of a batch in doubt that holds whole steps of several kinds (a target that takes one
#: row per step: ``trackstore.sync.adapter.Adapter.merge_steps``); its ``rows`` map kinds to row ids
STEPS = "steps"
CURSOR_VERSION = 1
TERMINAL = ("finished", "failed", "crashed")


def destination_id(target: str, destination: str) -> str:
    """A path-safe, stable folder name for one destination."""
    digest = hashlib.sha256(f"{target}\0{destination}".encode()).hexdigest()[:12]
    safe_target = re.sub(r"[^A-Za-z0-9_-]", "_", target)
    return f"{safe_target}-{digest}"


def sync_root(root: Path) -> Path:
    return Path(root) / SYNC_DIR


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
        """The rows of the batch in doubt, per kind (a step-merged batch, kind :data:`STEPS`,
        holds several kinds); empty when no batch is in doubt."""
        doubt = self.in_doubt
        if not doubt:
            return {}
        rows = doubt.get("rows") if doubt.get("kind") == STEPS else {doubt.get("kind"): doubt.get("rows")}
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

    def sets(value: Any, field: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise RangeValueError(field, f"must be an object of kind -> row-id set, not {type(value).__name__}")
        for kind, ids in value.items():
            RangeSet.from_json(ids, f"{field}.{kind}")

    def counts(value: Any, field: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise RangeValueError(field, f"must be an object of kind -> count, not {type(value).__name__}")
        for kind, n in value.items():
            check_count(n, f"{field}.{kind}")

    sets(data.get("acked"), "acked")
    sets(data.get("recheck"), "recheck")
    counts(data.get("skipped"), "skipped")
    doubt = data.get("in_doubt")
    if doubt is not None:
        if not isinstance(doubt, dict):
            raise RangeValueError("in_doubt", f"must be an object or null, not {type(doubt).__name__}")
        if doubt.get("kind") == STEPS:
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


def cursor_path(root: Path, target: str, destination: str, project: str, run_id: str) -> Path:
    return (sync_root(root) / destination_id(target, destination) / f"{PROJECT_PREFIX}{project}"
            / f"{RUN_PREFIX}{run_id}.json")


def load_cursor(root: Path, target: str, destination: str, project: str, run_id: str) -> Cursor:
    """The stored cursor, or a fresh empty one (nothing acknowledged yet)."""
    path = cursor_path(root, target, destination, project, run_id)
    try:
        return Cursor.from_json(read_json(path))
    except FileNotFoundError:
        return Cursor(target=target, destination=destination, project=project, run_id=run_id)


def save_cursor(root: Path, cursor: Cursor) -> None:
    """Atomically persist a cursor (and the destination's description, once)."""
    path = cursor_path(root, cursor.target, cursor.destination, cursor.project, cursor.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    desc = path.parent.parent / DESTINATION_FILE
    if not desc.exists():
        write_json_atomic(desc, {"target": cursor.target, "destination": cursor.destination,
                                 "dest_id": cursor.dest_id, "created_at": iso(time.time())})
    write_json_atomic(path, cursor.to_json())


# What a damaged cursor file raises while being parsed: I/O errors, invalid JSON or UTF-8
# (ValueError), a missing field (KeyError), the wrong JSON shape (TypeError, AttributeError).
CURSOR_ERRORS = (OSError, ValueError, KeyError, TypeError, AttributeError)


def _cursor_files(root: Path, project: str | None, run_id: str | None) -> Iterator[Path]:
    """Cursor files of live destinations (``_``/``.`` folders such as ``_gc`` are not live)."""
    base = sync_root(root)
    if not base.is_dir():
        return
    for dest in sorted(base.iterdir()):
        if not dest.is_dir() or dest.name.startswith((".", "_")):
            continue
        if project is not None and run_id is not None:  # one run: its file, without listing the others
            f = dest / f"{PROJECT_PREFIX}{project}" / f"{RUN_PREFIX}{run_id}.json"
            if f.is_file():
                yield f
            continue
        for pdir in sorted(dest.glob(f"{PROJECT_PREFIX}*")):
            if project is not None and pdir.name != f"{PROJECT_PREFIX}{project}":
                continue
            try:  # one listing of the folder, no stat per file (a glob costs ~10x more)
                with os.scandir(pdir) as entries:
                    names = sorted(e.name for e in entries if e.name.startswith(RUN_PREFIX) and e.name.endswith(".json"))
            except OSError:
                continue
            for name in names:
                if run_id is not None and name != f"{RUN_PREFIX}{run_id}.json":
                    continue
                yield pdir / name


def scan_cursors(root: Path, *, project: str | None = None,
                 run_id: str | None = None) -> tuple[list[Cursor], list[Path]]:
    """The stored cursors (optionally filtered), and the cursor files that exist but cannot be
    parsed, each file read once.

    An unreadable file's target cannot be known for sure, so it matches any target. A file that
    disappears while being read (archived, or replaced atomically) is neither.
    """
    cursors, unreadable = [], []
    for f in _cursor_files(root, project, run_id):
        try:
            cursors.append(Cursor.from_json(read_json(f)))
        except FileNotFoundError:
            continue
        except CURSOR_ERRORS:
            unreadable.append(f)
    return cursors, unreadable


def iter_cursors(root: Path, *, project: str | None = None, run_id: str | None = None,
                 target: str | None = None) -> Iterator[Cursor]:
    """Every stored cursor (optionally filtered). Unreadable cursor files are skipped.

    Skipping suits readers that only report progress (``status``, the ``sync_state`` view);
    anything that decides from the *absence* of a cursor (gc) must use :func:`scan_cursors`,
    or a damaged file reads as "never synced there".
    """
    for c in scan_cursors(root, project=project, run_id=run_id)[0]:
        if target is None or c.target == target:
            yield c


def read_row_ids(paths: RunPaths, kind: str):
    """The ``writer``/``seq`` columns of every readable row of one kind, and the parts that
    could not be read: ``(pyarrow Table, [Path, ...])``.

    A damaged part's rows can neither be counted nor synced; callers that must not mistake
    them for "nothing pending" (gc) look at the second element. A part that vanishes while
    being read was replaced by a compaction swap, so the kind is listed and read again
    (:func:`trackstore.store.layout.relist`; undercounting would make pending rows look
    acknowledged); parts still vanishing at the last attempt count as unreadable, since
    the rows read are not known to be complete.
    """
    import pyarrow as pa

    from .parts import read_columns

    def ids(part: Path):
        try:
            return read_columns(part, ["writer", "seq"])
        except FileNotFoundError:
            raise  # a swap: relist reads the folder again
        except Exception:
            return part  # damaged: doctor reports it; it cannot be synced either

    found, vanished = relist(paths.kind_dir(kind), ids)
    tables = [t for t in found if not isinstance(t, Path)]
    damaged = [p for p in found if isinstance(p, Path)] + vanished
    if not tables:
        return pa.table({"writer": pa.array([], pa.string()), "seq": pa.array([], pa.int64())}), damaged
    return pa.concat_tables(tables), damaged


def row_ids(paths: RunPaths, kind: str):
    """The ``writer``/``seq`` columns of every stored row of one kind (a pyarrow Table).

    Damaged parts are skipped; :func:`read_row_ids` also says which they were.
    """
    return read_row_ids(paths, kind)[0]


def pending_counts(paths: RunPaths, cursor: Cursor | None, *, ids: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Rows per kind that are stored but not acknowledged (nor reported as skipped).

    ``ids`` (kind -> :func:`row_ids` table) lets a caller that checks several cursors of one run
    read its part files once.
    """
    import pyarrow.compute as pc

    out = {}
    for kind in KINDS:
        kind_ids = ids[kind] if ids is not None and kind in ids else row_ids(paths, kind)
        if kind_ids.num_rows == 0:
            out[kind] = 0
            continue
        acked = cursor.acked.get(kind) if cursor else None
        done = 0
        if acked:
            done = pc.sum(acked.mask(kind_ids).cast("int64")).as_py() or 0
        out[kind] = kind_ids.num_rows - done
    return out


def is_fully_synced(paths: RunPaths, cursor: Cursor, run_status: str, *,
                    ids: Mapping[str, Any] | None = None, count_staged: bool = False) -> bool:
    """True when every stored row is acknowledged and the final status has been pushed, at a
    destination that is not a staging area (or, with ``count_staged``, at any).

    Rows of damaged parts are not counted (see :func:`read_row_ids`).
    """
    if not fully_synced(cursor, run_status, {}, count_staged=count_staged):  # the cursor alone says no
        return False
    return fully_synced(cursor, run_status, pending_counts(paths, cursor, ids=ids), count_staged=count_staged)


def fully_synced(cursor: Cursor, run_status: str, pending: Mapping[str, int], *, count_staged: bool = False) -> bool:
    """:func:`is_fully_synced` from the run's pending rows per kind (:func:`pending_counts`, or
    a :func:`summarize_cursor` made from the catalog's part records). A staged cursor
    (:attr:`Cursor.staged`: its rows have not left this machine) is never fully synced unless
    ``count_staged`` says to count it."""
    return ((count_staged or not cursor.staged) and not cursor.in_doubt and cursor.session is None
            and run_status in TERMINAL and cursor.synced_status == run_status and not any(pending.values()))


# ---------------------------------------------------------------------------- from the catalog


def cursor_files(root: Path, *, project: str | None = None, run_id: str | None = None) -> Iterator[Path]:
    """The cursor files of live destinations (folder listings only, nothing read)."""
    return _cursor_files(Path(root), project, run_id)


def summarize_cursor(cursor: Cursor, parts: Mapping[str, list]) -> dict:
    """What ``status`` and the no-change check need of a cursor, with its pending rows per kind
    counted against the run's part records (:class:`trackstore.store.catalog.PartRecord`) by
    row-id arithmetic: each readable part's rows minus those of its ids in ``acked``."""
    pending = {}
    for kind in KINDS:
        acked = cursor.acked.get(kind)
        n = 0
        for p in parts.get(kind, ()):
            if p.damaged:
                continue
            n += p.rows - (p.range_set().overlap(acked) if acked else 0)
        pending[kind] = n
    return {"target": cursor.target, "destination": cursor.destination, "project": cursor.project,
            "run_id": cursor.run_id, "synced_status": cursor.synced_status, "in_doubt": bool(cursor.in_doubt),
            "remote": bool(cursor.remote_id or cursor.remote), "last_sync_at": cursor.last_sync_at,
            "last_error": cursor.last_error, "unsettled": cursor.session is not None, "pending": pending,
            "acked": {k: len(cursor.acked[k]) if cursor.acked.get(k) else 0 for k in KINDS},
            "skipped": {k: cursor.skipped.get(k, 0) for k in KINDS}, "remote_id": cursor.remote_id,
            "staged": cursor.staged}


def damaged_cursor_summary(path: Path | str, error: BaseException) -> dict:
    """What ``status`` and the ``sync_state`` view say of a cursor file that cannot be read
    (one of :data:`CURSOR_ERRORS`, a number out of range included): the shape of
    :func:`summarize_cursor` with ``damaged`` True, the destination from its folder's
    ``destination.json`` (else the folder's name), the run from the file's path, no counts
    (unknown: empty ``acked``/``pending``/``skipped``) and the problem as ``last_error``."""
    path = Path(path)
    target = destination = path.parent.parent.name
    try:
        desc = read_json(path.parent.parent / DESTINATION_FILE)
        if isinstance(desc.get("target"), str) and isinstance(desc.get("destination"), str):
            target, destination = desc["target"], desc["destination"]
    except (OSError, ValueError, AttributeError):
        target = target.rpartition("-")[0] or target
    detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    return {"target": target, "destination": destination, "project": path.parent.name.partition("=")[2],
            "run_id": path.name.partition("=")[2].removesuffix(".json"), "synced_status": None,
            "in_doubt": False, "remote": False, "last_sync_at": None, "unsettled": False, "remote_id": None,
            "last_error": f"sync state unreadable ({detail}); `trackstore doctor --fix` quarantines it",
            "pending": {}, "acked": {}, "skipped": {}, "damaged": True, "staged": False}


def cached_cursor_summary(catalog, path: Path | str, project: str, run_id: str, parts: Any) -> dict:
    """:func:`summarize_cursor` of the cursor file at ``path``, from the catalog while neither the
    file (its ``stat`` fingerprint, or its folder's) nor the run's parts (``parts``, the run's
    :class:`trackstore.store.catalog.PartsSummary`, whose ``fp`` is
    :func:`trackstore.store.catalog.parts_digest`) changed; else read and counted again.

    Raises FileNotFoundError when there is no such file and one of :data:`CURSOR_ERRORS` when
    it cannot be parsed.
    """
    fp, cached = catalog.cursor_summary(path)
    if cached is not None and parts.fp and cached.get("parts_fp") == parts.fp:
        return cached
    if fp == "-":
        raise FileNotFoundError(path)
    records, parts_fp = parts.records, parts.fp
    if records is None:  # the summary's part list was not needed so far: list it now
        from .catalog import parts_digest

        records, stable = catalog.parts(project, run_id)
        parts_fp = parts_digest(records) if stable else None
    summary = summarize_cursor(Cursor.from_json(read_json(Path(path))), records)
    summary["parts_fp"] = parts_fp
    if parts_fp:
        catalog.put_cursor_summary(path, fp, summary)
    return summary


def status_to_push(run_status: str, synced_status: str | None) -> str | None:
    """The status a sync must push to the target: the run's, when the target holds another one
    and the run has ended (or the target holds an end the run left again: a resumed run goes
    back to ``running``); None when there is none to push."""
    if run_status == synced_status or not (run_status in TERMINAL or synced_status):
        return None
    return run_status


def settled(summary: dict, run_status: str) -> bool:
    """Nothing for a sync to do: every stored row acknowledged, no batch in doubt, the remote run
    known, and the status the target holds is the run's. The one rule of "up to date": the
    engine's plan of a run (``trackstore.sync.plan``) and its no-change check
    (:func:`unchanged_since_ack`) both ask it."""
    if summary["in_doubt"] or summary["unsettled"] or not summary["remote"] or any(summary["pending"].values()):
        return False
    return status_to_push(run_status, summary["synced_status"]) is None


def cursor_settled(cursor: Cursor, run_status: str, pending: Mapping[str, int]) -> bool:
    """:func:`settled` of a cursor in hand and the run's pending rows per kind."""
    return settled({"in_doubt": bool(cursor.in_doubt), "unsettled": cursor.session is not None,
                    "remote": bool(cursor.remote_id or cursor.remote), "pending": pending,
                    "synced_status": cursor.synced_status}, run_status)


def unchanged_since_ack(root: Path, target: str, destination: str, runs: Iterable[Any]) -> set[tuple[str, str]]:
    """The runs (``(project, run_id)``) whose parts did not change since the destination
    acknowledged every row of them, and whose status it holds: a sync has nothing to do for
    them. Decided with ``stat`` calls only when nothing changed: the catalog keeps, per cursor,
    the fingerprint of the run's parts (names, sizes, mtimes) its count of pending rows was
    made against, valid while the cursor file keeps its ``stat`` fingerprint.

    A run with a damaged part, an unreadable cursor, or parts that changed within the last
    seconds (:data:`trackstore.store.catalog.RACY_S`) is never in the set: the engine looks at it.
    """
    from .catalog import open_catalog

    catalogs: dict[int, Any] = {}
    own = None
    out = set()
    base = f"{sync_root(root)}/{destination_id(target, destination)}/{PROJECT_PREFIX}"
    for info in runs:
        catalog = getattr(info, "catalog", None)
        if catalog is None:
            own = own or open_catalog(root)
            catalog = own
        if id(catalog) not in catalogs:
            catalogs[id(catalog)] = catalog
            catalog.prefetch_cursors()
        # an unchanged ended run in one loop of stat calls (its writers' losses, reported for an
        # up-to-date run, come with it); else its parts alone
        catalog.unchanged_row(info.project, info.run_id)
        parts = catalog.parts_summary(info.project, info.run_id)
        if not parts.fp or parts.damaged:
            continue
        path = f"{base}{info.project}/{RUN_PREFIX}{info.run_id}.json"
        try:
            summary = cached_cursor_summary(catalog, path, info.project, info.run_id, parts)
        except CURSOR_ERRORS:  # no cursor (FileNotFoundError is an OSError), or a damaged one
            continue
        if settled(summary, info.status):
            out.add((info.project, info.run_id))
            # what the engine reports of an up-to-date run: its writers' losses, kept in the
            # catalog now (saved below) so the next sync does not read its writer files again
            catalog.writer_losses(info.project, info.run_id)
    for catalog in catalogs.values():
        catalog.save()
    return out


def sync_state_cursors(root: Path, only: set[tuple[str, str]] | None = None) -> list[dict]:
    """Every readable cursor of the store (of the runs in ``only``, ``(project, run_id)``
    pairs, when given), summarized (:func:`summarize_cursor`: target, destination, project,
    run_id, acked/pending/skipped per kind, ...): the data behind the ``sync_state`` SQL view,
    one entry per (destination, run).

    Pending rows are counted against the run's parts through the catalog
    (:func:`cached_cursor_summary`): nothing is read of a run whose parts and cursor did not
    change. A cursor file that cannot be parsed is left out."""
    from .catalog import open_catalog

    root = Path(root)
    catalog = open_catalog(root)
    if only is None:
        catalog.prefetch()
        catalog.prefetch_cursors()
        present = set(catalog.run_keys())
        files: Iterable[Path] = cursor_files(root)
    else:  # straight to these runs' cursor files: the store is not listed
        present = {k for k in only if catalog.has_run_dir(*k)}
        files = [p for k in sorted(only) for p in cursor_files(root, project=k[0], run_id=k[1])]
    out = []
    try:
        for path in files:
            key = (path.parent.name.partition("=")[2], path.name.partition("=")[2].removesuffix(".json"))
            if only is not None and key not in only:
                continue
            try:
                if key in present:
                    c = cached_cursor_summary(catalog, path, key[0], key[1], catalog.parts_summary(*key))
                else:
                    c = summarize_cursor(Cursor.from_json(read_json(path)), {})
                if (c["project"], c["run_id"]) != key:  # a cursor in another run's place: counted against its own run
                    cursor = Cursor.from_json(read_json(path))
                    paths = RunPaths(root, cursor.project, cursor.run_id)
                    c = summarize_cursor(cursor, {})
                    c["pending"] = pending_counts(paths, cursor) if paths.dir.exists() else {}
            except FileNotFoundError:  # archived or replaced meanwhile
                continue
            except CURSOR_ERRORS as exc:  # reported, with unknown counts: one bad file spoils no other row
                c = damaged_cursor_summary(path, exc)
            out.append(c)
    finally:
        catalog.save()
    return out


def sync_state_rows(root: Path, only: set[tuple[str, str]] | None = None) -> list[dict]:
    """One row per (destination, run, kind): the rows of the ``sync_state`` SQL view
    (:func:`sync_state_cursors`, one row per record kind), of the runs in ``only`` when given."""
    return [{"target": c["target"], "destination": c["destination"], "project": c["project"], "run_id": c["run_id"],
             "kind": kind, **{f"{n}_rows": c[n].get(kind, None if c.get("damaged") else 0)
                              for n in ("acked", "pending", "skipped")}, "remote_id": c["remote_id"],
             "synced_status": c["synced_status"], "last_sync_at": c["last_sync_at"], "last_error": c["last_error"],
             "staged": c.get("staged", False)}
            for c in sync_state_cursors(root, only) for kind in KINDS]
