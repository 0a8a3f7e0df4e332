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

A cursor (:class:`trackstore.store.cursor.Cursor`, whose methods are every change the protocol
makes to it) holds, per record kind, the :class:`~trackstore.store.ranges.RangeSet` of
``(writer, seq)`` rows the target acknowledged (plus rows it cannot hold, counted in ``skipped``
and reported); an ``in_doubt`` batch (sent, acknowledgement not yet recorded: the engine asks
the target before resending it); the remote ids the adapter needs; the run status last pushed;
and the last error. This module stores it (rewritten atomically after every acknowledged
batch), lists the stored ones, and summarises them for ``status``, gc and the ``sync_state``
view.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .atomic import read_json, write_json_atomic
from .clock import iso
from .cursor import STEPS, Cursor, check_cursor, destination_id
from .layout import DESTINATION_FILE, KINDS, PROJECT_PREFIX, RUN_PREFIX, SYNC_DIR, RunPaths, relist
from .vocab import TERMINAL

__all__ = ["STEPS", "TERMINAL", "CURSOR_ERRORS", "Cursor", "check_cursor", "destination_id", "sync_root",
           "cursor_path", "load_cursor", "save_cursor", "scan_cursors", "iter_cursors", "read_row_ids", "row_ids",
           "pending_counts", "fully_synced_from_parts", "fully_synced_from_pending", "cursor_files",
           "summarize_cursor", "damaged_cursor_summary", "cached_cursor_summary", "status_to_push", "settled",
           "cursor_settled", "unchanged_since_ack", "sync_state_cursors", "sync_state_rows"]


def sync_root(root: Path) -> Path:
    return Path(root) / SYNC_DIR


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
    write_json_atomic(path, cursor.to_json(), indent=None)  # rewritten several times a run: the fast encoder


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

    out: dict[str, int] = {}
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


def fully_synced_from_parts(paths: RunPaths, cursor: Cursor, run_status: str, *,
                            ids: Mapping[str, Any] | None = None, count_staged: bool = False) -> bool:
    """Whether the run is fully synced to this cursor's destination, counting its pending rows
    from the run folder's part files (:func:`pending_counts`; ``ids`` spares re-reading them).

    True when every stored row is acknowledged and the final status has been pushed, at a
    destination that is not a staging area (or, with ``count_staged``, at any). Rows of damaged
    parts are not counted (see :func:`read_row_ids`). The decision itself is
    :func:`fully_synced_from_pending`; when the cursor alone says no, no part is read.
    """
    if not fully_synced_from_pending(cursor, run_status, {}, count_staged=count_staged):
        return False
    pending = pending_counts(paths, cursor, ids=ids)
    return fully_synced_from_pending(cursor, run_status, pending, count_staged=count_staged)


def fully_synced_from_pending(cursor: Cursor, run_status: str, pending: Mapping[str, int], *,
                              count_staged: bool = False) -> bool:
    """Whether the run is fully synced to this cursor's destination, decided from pending row
    counts per kind the caller already has (:func:`pending_counts`, or a
    :func:`summarize_cursor` made from the catalog's part records); reads nothing.

    A staged cursor (:attr:`Cursor.staged`: its rows have not left this machine) is never fully
    synced unless ``count_staged`` says to count it."""
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
        path = f"{base}{info.project}/{RUN_PREFIX}{info.run_id}.json"
        if catalog.cursor_summary(path)[0] == "-":
            # never synced to this destination (a first sync, a new destination): its parts are
            # not looked at, which on a store the catalog has not seen costs every footer
            continue
        parts = catalog.parts_summary(info.project, info.run_id)
        if not parts.fp or parts.damaged:
            continue
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
