"""Garbage collection: delete old runs that are safely elsewhere, and never anything else.

The promises:

* **Never a live run.** A run with a live writer (pid alive on this host, fresh heartbeat from
  another) or a live claim (a resume joining it) is never deleted, whatever the flags.
* **Nothing that changed since the plan.** The plan records a fingerprint of each run it
  selects (every file and folder of the run: path, inode, size, mtime; and its sync cursor
  files). At the moment of deletion gc re-checks everything it decided on — liveness, sync
  locks, and that fingerprint, which stands for status, end time, stored rows and sync state —
  and keeps a run that changed ("changed since the plan (...); run gc again").
* **Never a run a sync is working on.** Runs named in a live ``sync-*`` lock
  (:mod:`trackstore.store.locks`) are skipped; a live sync lock that names no runs makes gc delete
  nothing at all. gc itself holds the store's ``maintenance`` lock, so it never races
  compaction, an import or another gc.
* **By default, only what was synced.** A run is eligible when it ended (finished, failed or
  crashed), its end is older than ``older_than``, and it is fully synced — every stored row
  acknowledged and its final status pushed — to *every destination it was ever synced to*.
  A run with no sync state at all is "unsynced" and kept. ``require_synced_to=["wandb", ...]``
  replaces "every destination" with "at least one fully synced destination of each named
  target". ``include_unsynced`` also allows runs never synced anywhere, except a run holding
  the only copy of an artifact version that has an alias now (``best``, ``latest``: a copy in
  the store, never synced), which ``include_aliased`` allows too; ``force`` ignores sync
  state entirely (still never live or locked runs).
* **Staged is not synced.** A destination that is a staging folder on this machine (wandb
  offline, SwanLab offline or local: :attr:`trackstore.store.cursor.Cursor.staged`) holds
  nothing that left the machine, so it never makes a run eligible: it is not among "every
  destination it was synced to", a run staged and synced nowhere else is kept ("only
  staged"), and ``require_synced_to`` a staging target is never met. ``count_staged`` counts
  staged destinations as synced destinations, for a user who uploads them some other way or
  keeps that folder as the copy.
* **Damage is never mistaken for "done".** The sync readers skip what they cannot parse, so a
  corrupt cursor would read as "never synced there" and a truncated part as "no rows pending".
  gc therefore keeps (unless ``force``) a run with a cursor file that does not parse, or with
  a part file that cannot be read, until ``trackstore doctor --fix`` has dealt with it.
* **No race with a resuming writer.** gc first announces the deletion of a run, durably, in the
  ``maintenance`` lock it holds (:func:`trackstore.store.locks.announce`, info ``deleting``), THEN
  re-checks, THEN renames. ``trackstore.init(..., resume=True)`` first writes a claim
  (:func:`trackstore.store.run_claims.claim_run`) into the run folder, THEN looks for the announcement and, if there is one, waits for gc's
  verdict (:func:`trackstore.store.run_claims.wait_for_deletion_verdict`). Each side writes before it
  checks, so one always sees the other: either gc's re-check sees the claim and keeps the run,
  or the writer waits. A claim that lands between the re-check and the rename is found
  by a second check of the moved folder, which is then renamed back: the run is kept. A writer
  that arrives after the rename finds its run gone and starts it afresh (see
  :func:`trackstore.write.run.init`); it never writes into a folder gc moved.
* **No half-deleted run is ever visible.** A run folder is first renamed, in one atomic
  ``rename(2)``, to ``<root>/_trash/<token>/project=<p>/run=<id>`` (outside every query glob),
  then removed. A crash in between leaves it in the trash, which the next gc or
  ``trackstore doctor --fix`` finishes removing (:func:`clean_trash`).
* **No lock file outlives its use.** A pass also removes the lock guard files nobody holds
  that versions before 8 December 2026 left for every lock name ever taken (one per run and
  destination synced, kept after the run was deleted), and the temporary files of lock
  creations a killed process left: :func:`trackstore.store.locks.remove_leftovers`.
* **Sync cursors are archived, not dropped.** A deleted run's cursors move to
  ``<root>/_sync/_gc/`` (invisible to sync and the ``sync_state`` view). Importing the same
  run again from a bundle restores them, so it is never uploaded twice.
* **Reasons are codes.** Each kept run carries a :class:`~trackstore.store.vocab.KeepReason`
  (:attr:`Candidate.kept_for`) that logic and the CLI branch on, and its sentence
  (:attr:`Candidate.reason`) that people read; nothing parses the sentence.

Selection, precisely: the filters (``project``, ``statuses``, ``older_than``, ``keep_last`` per
project — the newest N runs of each project are kept —, sync state, locks) define the
candidates. Without ``max_size`` every candidate is deleted; with it, candidates are deleted
oldest first only until the runs in the store total at most ``max_size`` bytes.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..errors import UsageError
from ..read.listing import RunInfo, list_runs, load_run, run_bytes, save_catalogs
from ..store import locks as _locks
from ..store import meta as _meta
from ..store import run_claims
from ..store.clock import iso, parse_iso
from ..store.layout import (
    ARCHIVE_DIR,
    DESTINATION_FILE,
    KINDS,
    PROJECT_PREFIX,
    RUN_PREFIX,
    SYNC_DIR,
    TRASH_DIR,
    RunPaths,
    is_part_name,
    resolve_root,
)
from ..store.ledger import (
    Cursor,
    fully_synced_from_pending,
    pending_counts,
    read_row_ids,
    scan_cursors,
    summarize_cursor,
)
from ..store.parts import find_unreadable
from ..store.vocab import ENDED_ORDER, TERMINAL, KeepReason, RunStatus

ELIGIBLE = "eligible"  # the reason shown for a run gc deletes
#: kept runs :func:`compactable` leaves alone: live, or not gc's to decide about now
NOT_COMPACTED = frozenset((KeepReason.LIVE, KeepReason.OTHER_PROJECT, KeepReason.BEING_SYNCED,
                           KeepReason.SYNC_UNNAMED, KeepReason.CHANGED_SINCE_PLAN, KeepReason.CHANGED_WHILE_PLANNING))


@dataclass(frozen=True)
class Verdict:
    """Why a run is kept: the code, and the details its sentence is filled with."""

    code: KeepReason
    details: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.code.say(**self.details)

    @property
    def summary(self) -> str:
        return self.code.summary.format(**self.details)


@dataclass
class Policy:
    """What gc may delete. See the module docstring for the exact rules."""

    older_than_s: float | None = None
    max_size: int | None = None
    keep_last: int | None = None
    project: str | None = None
    statuses: tuple[str, ...] = ENDED_ORDER
    require_synced_to: tuple[str, ...] = ()
    include_unsynced: bool = False
    include_aliased: bool = False
    count_staged: bool = False
    force: bool = False

    def check(self) -> None:
        if self.older_than_s is None and self.max_size is None and self.keep_last is None:
            raise UsageError("say what to delete: --older-than 30d, --max-size 200G and/or --keep-last N")
        bad = [s for s in self.statuses if s not in TERMINAL]
        if bad:
            raise UsageError(f"gc deletes only ended runs; --status must be one of {', '.join(ENDED_ORDER)} "
                             f"(got {', '.join(bad)}). Live runs are never deleted.")
        if self.keep_last is not None and self.keep_last < 0:
            raise UsageError("--keep-last must be >= 0")


@dataclass
class Candidate:
    """One run and gc's decision about it."""

    info: RunInfo
    ended_ts: float
    delete: bool = False
    reason: str = ""  # what people read: ELIGIBLE, or the sentence of ``kept_for``
    kept_for: Verdict | None = None  # why the run is kept (None: it is to be deleted, or not decided yet)
    fingerprint: frozenset | None = None  # of the runs selected for deletion, taken before deciding
    _bytes: int | None = field(default=None, repr=False)

    @property
    def bytes(self) -> int:
        """Bytes of the run's folder, counted when first asked (a plan that keeps a run shows
        them only when asked to list it)."""
        if self._bytes is None:
            self._bytes = run_bytes(self.info)
        return self._bytes

    def keep(self, verdict: Verdict) -> None:
        """Keep the run, for ``verdict``."""
        self.delete, self.kept_for, self.reason = False, verdict, verdict.text

    def kept(self, *codes: KeepReason) -> bool:
        """Is the run kept for one of ``codes``?"""
        return self.kept_for is not None and self.kept_for.code in codes

    @property
    def project(self) -> str:
        return self.info.project

    @property
    def run_id(self) -> str:
        return self.info.run_id

    def row(self, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        return {"action": "delete" if self.delete else "keep", "project": self.project, "run_id": self.run_id,
                "name": self.info.name, "status": self.info.status, "ended_at": iso(self.ended_ts),
                "age_days": round((now - self.ended_ts) / 86400, 2), "bytes": self.bytes, "reason": self.reason}


@dataclass
class Plan:
    runs: list[Candidate] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)

    @property
    def store_bytes(self) -> int:
        return sum(c.bytes for c in self.runs)

    @property
    def delete(self) -> list[Candidate]:
        return [c for c in self.runs if c.delete]

    @property
    def keep(self) -> list[Candidate]:
        return [c for c in self.runs if not c.delete]

    @property
    def freed_bytes(self) -> int:
        return sum(c.bytes for c in self.delete)


@dataclass
class Result:
    deleted: list[Candidate] = field(default_factory=list)
    skipped: list[Candidate] = field(default_factory=list)  # changed between plan and deletion
    freed_bytes: int = 0


# ---------------------------------------------------------------------------- facts about runs


def end_time(info: RunInfo) -> float:
    """When the run ended: ``ended_at``, else (crashed) its last sign of life."""
    get = info.recorded  # the listing's fields: the rest of run.json is not parsed
    t = parse_iso(get("ended_at"))
    if t is not None:
        return t
    times = [parse_iso(w.get("heartbeat_at")) for w in info.writers]
    times += [parse_iso(get("heartbeat_at")), parse_iso(get("updated_at")), parse_iso(get("created_at"))]
    known = [t for t in times if t is not None]
    if known:
        return max(known)
    try:
        return info.paths.run_file.stat().st_mtime
    except OSError:
        return time.time()


def sync_verdict(root: Path, info: RunInfo, policy: Policy, seen: frozenset | None = None) -> Verdict | None:
    """None when sync state allows deleting the run, else why it must be kept.

    Damage comes first: an unreadable cursor or part file hides how much is still unsynced,
    so no policy short of ``force`` may treat it as absent.

    The cursors are always read from their files. The rows stored are the row ids of the run's
    parts: from the store's catalog when its records of the parts (name, size, mtime) are
    exactly the part files of ``seen`` (the run's :func:`fingerprint`, which deletion checks
    again), else read from the files.
    """
    if policy.force:
        return None
    cursors, unreadable = scan_cursors(root, project=info.project, run_id=info.run_id)
    if unreadable:
        return Verdict(KeepReason.SYNC_STATE_UNREADABLE, {"files": _listing(root, unreadable)})
    if not cursors:
        if policy.include_unsynced and not policy.require_synced_to:
            only = [] if policy.include_aliased else aliased_copies(info.paths)
            if only:
                return Verdict(KeepReason.ALIASED_ARTIFACTS, {"what": ", ".join(only[:3]) + (" ..." if len(only) > 3 else "")})
            return _damage_verdict(root, damaged_parts(info.paths))
        return Verdict(KeepReason.NEVER_SYNCED)
    records = _kept_records(info, seen)
    if records is not None:  # the catalog's row ids of exactly these files: none is read again
        damaged = [info.paths.kind_dir(k) / p.name for k, recs in records.items() for p in recs if p.damaged]
        if damaged:
            return _damage_verdict(root, damaged)
        pending = {id(c): summarize_cursor(c, records)["pending"] for c in cursors}
    else:
        ids, damaged = stored_row_ids(info.paths)
        if damaged:
            return _damage_verdict(root, damaged)
        pending = {id(c): pending_counts(info.paths, c, ids=ids) for c in cursors}
    complete = {id(c): fully_synced_from_pending(c, info.status, pending[id(c)], count_staged=policy.count_staged)
                for c in cursors}
    if policy.require_synced_to:
        missing = [t for t in policy.require_synced_to if not any(c.target == t and complete[id(c)] for c in cursors)]
        if missing:
            staged = " (staged only, not uploaded: --count-staged counts it)" if any(
                c.target in missing and c.staged for c in cursors) and not policy.count_staged else ""
            return Verdict(KeepReason.NOT_SYNCED_TO_REQUIRED, {"targets": ", ".join(missing), "staged": staged})
        return None
    synced_to = cursors if policy.count_staged else [c for c in cursors if not c.staged]
    if not synced_to:
        c = cursors[0]
        return Verdict(KeepReason.ONLY_STAGED, {"target": c.target, "destination": c.destination})
    for c in synced_to:
        if not complete[id(c)]:
            return Verdict(KeepReason.NOT_FULLY_SYNCED, {"target": c.target, "destination": c.destination,
                                                         "behind": _behind(info, c, pending[id(c)])})
    return None


def aliased_copies(paths) -> list[str]:
    """The artifact versions of a run that hold an alias now and whose files the store holds
    (copies: a reference's files are the trainer's, which deleting the run leaves alone), as
    ``name:vN (alias, ...)``."""
    from ..read.views import aliased_versions
    from ..records.artifacts import COPY, list_versions

    if not paths.artifacts_dir.is_dir():
        return []
    held = aliased_versions(paths)
    if not held:
        return []
    return [f"{v.name}:v{v.version} ({', '.join(held[(v.name, v.version)])})" for v in list_versions(paths.dir)
            if v.storage == COPY and (v.name, v.version) in held]


def _kept_records(info: RunInfo, seen: frozenset | None) -> dict | None:
    """The catalog's part records of the run (:meth:`trackstore.store.catalog.Catalog.parts`) when
    they name exactly the part files ``seen`` holds, with their sizes and mtimes; else None."""
    catalog = info.catalog
    if catalog is None or seen is None:
        return None
    records, stable = catalog.parts(info.project, info.run_id)
    if not stable:
        return None
    on_disk: dict[str, tuple[int, int]] = {rel: (size, mtime) for rel, _ino, size, mtime in seen}
    base = info.paths.dir
    for kind in KINDS:
        folder = os.path.relpath(info.paths.kind_dir(kind), base)
        files = {rel.rsplit(os.sep, 1)[1]: facts for rel, facts in on_disk.items()
                 if os.path.dirname(rel) == folder and is_part_name(rel.rsplit(os.sep, 1)[1])}
        if files != {p.name: (p.size, p.mtime_ns) for p in records.get(kind, ())}:
            return None
    return records


def stored_row_ids(paths: RunPaths) -> tuple[dict, list[Path]]:
    """Row ids of every kind, read once per run for all its cursors, and the unreadable parts."""
    ids, damaged = {}, []
    for kind in KINDS:
        ids[kind], bad = read_row_ids(paths, kind)
        damaged += bad
    return ids, damaged


def damaged_parts(paths: RunPaths) -> list[Path]:
    """Part files whose Parquet footer cannot be read (doctor's ``corrupt_parquet``).

    For runs with no cursor, where nothing else reads the parts: one footer read per file
    keeps the check cheap and still catches truncation, the usual damage. A file gone by now
    was replaced by a compaction swap (the merged file was verified), not damaged.
    """
    parts = [str(p) for kind in KINDS for p in paths.parts(kind)]
    return [Path(p) for p in find_unreadable(parts) if os.path.exists(p)]


def _damage_verdict(root: Path, damaged: list[Path]) -> Verdict | None:
    """Why a run with unreadable parts is kept, naming the doctor run that quarantines them:
    a plain ``doctor`` reads footers only, so pages damaged behind a good footer need ``--deep``
    (a file that vanished meanwhile counts as unreadable: the plain doctor is the first step)."""
    if not damaged:
        return None
    deep = not find_unreadable(str(p) for p in damaged)
    fix = "trackstore doctor --deep --fix" if deep else "trackstore doctor --fix"
    return Verdict(KeepReason.DAMAGED_PARTS, {"files": _listing(root, damaged), "fix": fix})


def _listing(root: Path, files: list[Path]) -> str:
    """The first file (relative to the root) and how many more, to keep a reason one line."""
    try:
        first = str(files[0].relative_to(root))
    except ValueError:
        first = str(files[0])
    return first + (f" and {len(files) - 1} more" if len(files) > 1 else "")


def _behind(info: RunInfo, c: Cursor, counts: dict[str, int]) -> str:
    if c.in_doubt:
        return "a batch is in doubt"
    pending = {k: n for k, n in counts.items() if n}
    if pending:
        return ", ".join(f"{n} {k} rows pending" for k, n in pending.items())
    return f"final status {info.status!r} not pushed yet"


def live(paths: RunPaths) -> bool:
    """A live writer, or a live process claiming the run to resume it (:mod:`trackstore.store.locks`)."""
    return _meta.any_writer_alive(paths) or run_claims.run_claimed(paths)


def cursor_files(root: Path, project: str, run_id: str) -> list[Path]:
    """The run's cursor files in every live destination folder (not the ``_gc`` archive)."""
    base = Path(root) / SYNC_DIR
    try:
        dests = sorted(d for d in base.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))
    except OSError:
        return []
    files = (d / f"{PROJECT_PREFIX}{project}" / f"{RUN_PREFIX}{run_id}.json" for d in dests)
    return [f for f in files if f.is_file()]


def fingerprint(root: Path, paths: RunPaths) -> frozenset:
    """What gc's decision about a run rests on, as cheap ``lstat`` facts: every file and folder
    under the run folder and the run's cursor files (path, inode, size, mtime).

    Files in a store are written to a temp name and renamed, never changed in place, so any
    write (a resumed writer's heartbeat file, a part, run.json, a cursor) changes it. Paths
    are relative to the run folder, so a folder moved by ``rename`` keeps its fingerprint.
    """
    entries = set()
    for dirpath, dirs, files in os.walk(paths.dir):
        for name in dirs + files:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue  # gone: missing from this fingerprint, so it differs anyway
            entries.add((os.path.relpath(full, paths.dir), st.st_ino, st.st_size, st.st_mtime_ns))
    for f in cursor_files(root, paths.project, paths.run_id):
        try:
            st = os.lstat(f)
        except OSError:
            continue
        entries.add((str(f.relative_to(root)), st.st_ino, st.st_size, st.st_mtime_ns))
    return frozenset(entries)


def _changed_while_planning(info: RunInfo) -> bool:
    """Did run.json or a writer file change between listing the run and its fingerprint?"""
    fresh = load_run(info.paths)
    return fresh is None or fresh.meta != info.meta or fresh.writers != info.writers


# ---------------------------------------------------------------------------- planning
def plan(root: str | Path | None, policy: Policy, *, now: float | None = None) -> Plan:
    """Decide, without changing anything, which runs gc deletes and why the others stay."""
    policy.check()
    root = resolve_root(root)
    now = time.time() if now is None else now
    runs = list_runs(root)
    result = Plan(created_at=now)
    named, unnamed = _locks.runs_in_use(root)
    newest_first: dict[str, list[RunInfo]] = {}
    for info in runs:
        newest_first.setdefault(info.project, []).append(info)
    protected: set[tuple[str, str]] = set()
    if policy.keep_last is not None:
        for proj, infos in newest_first.items():
            for info in sorted(infos, key=lambda r: (r.created_at or "", r.run_id), reverse=True)[:policy.keep_last]:
                protected.add((proj, info.run_id))
    for info in runs:
        c = Candidate(info, end_time(info))
        # the reasons that need no more than the listing first; a run's writer and claim files
        # are read only for a run that could otherwise be deleted
        if policy.project is not None and info.project != policy.project:
            c.keep(Verdict(KeepReason.OTHER_PROJECT))
        elif info.status == RunStatus.RUNNING:
            c.keep(Verdict(KeepReason.LIVE))
        elif info.status not in policy.statuses:
            c.keep(Verdict(KeepReason.STATUS_NOT_SELECTED, {"status": info.status}))
        elif policy.older_than_s is not None and now - c.ended_ts < policy.older_than_s:
            c.keep(Verdict(KeepReason.NEWER, {"days": (now - c.ended_ts) / 86400}))
        elif (info.project, info.run_id) in protected:
            c.keep(Verdict(KeepReason.KEEP_LAST, {"keep_last": policy.keep_last}))
        elif live(info.paths):
            c.keep(Verdict(KeepReason.LIVE))
        elif unnamed:
            c.keep(Verdict(KeepReason.SYNC_UNNAMED, {"lock": unnamed[0].describe()}))
        elif _locks.run_in_use(info.project, info.run_id, named):
            c.keep(Verdict(KeepReason.BEING_SYNCED))
        else:
            # Fingerprint first, then confirm what was listed and read the sync state: whatever
            # changes after this point shows at the re-check before deletion.
            c.fingerprint = fingerprint(root, info.paths)
            verdict = (Verdict(KeepReason.CHANGED_WHILE_PLANNING) if _changed_while_planning(info)
                       else sync_verdict(root, info, policy, c.fingerprint))
            if verdict:
                c.keep(verdict)
            else:
                c.delete = True
                c.reason = ELIGIBLE
        result.runs.append(c)
    if policy.max_size is not None:
        total = result.store_bytes
        for c in sorted(result.delete, key=lambda c: (c.ended_ts, c.run_id)):
            if total <= policy.max_size:
                c.keep(Verdict(KeepReason.WITHIN_MAX_SIZE))
            else:
                total -= c.bytes
    for c in result.delete:
        c.bytes  # noqa: B018 - counted now, with the plan: what deletion frees and reports
    save_catalogs(runs)
    return result


# ---------------------------------------------------------------------------- deleting
def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        shutil.rmtree(path)  # report what could not be removed


def archive_cursors(root: Path, project: str, run_id: str) -> int:
    """Move a run's cursor files to ``_sync/_gc/`` (idempotent); returns how many moved."""
    base = Path(root) / SYNC_DIR
    moved = 0
    for src in cursor_files(root, project, run_id):
        dest = src.parent.parent
        _move_cursor(src, base / ARCHIVE_DIR / dest.name / src.parent.name / src.name)
        moved += 1
    return moved


def restore_cursors(root: Path, project: str, run_id: str) -> int:
    """Bring back archived cursors of a run that reappears (e.g. re-imported); never overwrites."""
    base = Path(root) / SYNC_DIR / ARCHIVE_DIR
    restored = 0
    if not base.is_dir():
        return 0
    for dest in sorted(base.iterdir()):
        src = dest / f"{PROJECT_PREFIX}{project}" / f"{RUN_PREFIX}{run_id}.json"
        if not src.is_file():
            continue
        dst = Path(root) / SYNC_DIR / dest.name / src.parent.name / src.name
        if dst.exists():
            continue
        _move_cursor(src, dst)
        restored += 1
    return restored


def _move_cursor(src: Path, dst: Path) -> None:
    """Move one cursor file (``<dest>/project=<p>/run=<id>.json``) to the same place under another
    destination folder, bringing the destination's description along when that folder lacks it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    desc, dst_desc = src.parent.parent / DESTINATION_FILE, dst.parent.parent / DESTINATION_FILE
    if desc.exists() and not dst_desc.exists():
        shutil.copy2(desc, dst_desc)
    os.replace(src, dst)


def trash_entries(root: Path) -> list[Path]:
    try:
        return sorted(p for p in (Path(root) / TRASH_DIR).iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


def clean_trash(root: str | Path | None) -> int:
    """Finish deletions a crash interrupted: archive cursors of trashed runs, remove the trash."""
    root = resolve_root(root)
    n = 0
    for entry in trash_entries(root):
        for pdir in entry.glob(f"{PROJECT_PREFIX}*"):
            for rdir in pdir.glob(f"{RUN_PREFIX}*"):
                project, run_id = pdir.name[len(PROJECT_PREFIX):], rdir.name[len(RUN_PREFIX):]
                if not RunPaths(root, project, run_id).dir.exists():
                    archive_cursors(root, project, run_id)
        _remove_tree(entry)
        n += 1
    return n


def move_to_trash(root: Path, paths: RunPaths) -> Path:
    """Atomically take a run folder out of the store (one rename into ``_trash``)."""
    token = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    dest = Path(root) / TRASH_DIR / token / f"{PROJECT_PREFIX}{paths.project}"
    dest.mkdir(parents=True)
    target = dest / f"{RUN_PREFIX}{paths.run_id}"
    os.rename(paths.dir, target)
    from ..store.atomic import fsync_dir

    fsync_dir(paths.dir.parent)
    return dest.parent


def changed_since_plan(root: Path, c: Candidate, paths: RunPaths | None = None) -> str | None:
    """Why the planned deletion of ``c`` no longer holds, or None: liveness, sync locks, and
    the fingerprint (everything else the plan decided on). ``paths``: where the run folder is
    now (the store, or its place in ``_trash`` after the rename)."""
    paths = c.info.paths if paths is None else paths
    fresh = load_run(paths)
    if fresh is None:
        return "its run.json is gone"
    if fresh.status not in TERMINAL or live(paths):
        return "a writer is live"
    named, unnamed = _locks.runs_in_use(root)
    if unnamed or _locks.run_in_use(c.project, c.run_id, named):
        return "a sync is working on it"
    if fingerprint(root, paths) != c.fingerprint:
        return "new data, metadata or sync state"
    return None


def _put_back(moved: RunPaths, paths: RunPaths) -> bool:
    """Rename a trashed run folder back into the store (its trash entry left empty)."""
    from ..store.atomic import fsync_dir

    try:
        os.rename(moved.dir, paths.dir)
    except OSError:  # the path was taken meanwhile by a new run of the same id
        return False
    fsync_dir(paths.dir.parent)
    return True


def take_out(root: Path, lock: _locks.Lock, c: Candidate) -> Path | None:
    """Move one planned run into ``_trash`` unless it changed since the plan (the protocol is in
    the module docstring). Returns the trash entry, or None with ``c.reason`` saying why the
    run stays."""
    _locks.announce(lock, **{run_claims.DELETING: f"{c.project}/{c.run_id}"})
    try:
        why = changed_since_plan(root, c)
        if why is None:
            entry = move_to_trash(root, c.info.paths)
            moved = RunPaths(entry, c.project, c.run_id)
            why = changed_since_plan(root, c, moved)  # a writer that arrived just before the rename
            if why is None or not _put_back(moved, c.info.paths):
                archive_cursors(root, c.project, c.run_id)
                return entry
            _remove_tree(entry)
    finally:
        lock.set_info(**{run_claims.DELETING: None})
    c.keep(Verdict(KeepReason.CHANGED_SINCE_PLAN, {"why": why}))
    return None


def execute(root: str | Path | None, the_plan: Plan, *, on_deleted: Callable[[Candidate], None] | None = None) -> Result:
    """Delete the runs the plan selected, each re-checked at the moment of deletion."""
    root = resolve_root(root)
    result = Result()
    with _locks.acquire_maintenance(root, job="gc") as lock:
        clean_trash(root)
        _locks.remove_leftovers(root)  # idle lock guards older versions left; killed creations' temp files
        for c in the_plan.delete:
            entry = take_out(root, lock, c)
            if entry is None:
                c.delete = False
                result.skipped.append(c)
                continue
            _remove_tree(entry)
            try:
                c.info.paths.dir.parent.rmdir()  # the project folder, when it became empty
            except OSError:
                pass
            result.deleted.append(c)
            result.freed_bytes += c.bytes
            lock.refresh()
            if on_deleted is not None:
                on_deleted(c)
    return result


def compactable(the_plan: Plan, policy: Policy) -> list[RunPaths]:
    """Runs gc keeps that ended longer ago than ``older_than`` (any age without it): the runs
    ``trackstore gc --compact`` merges, so old runs cost few files even when they stay."""
    out = []
    for c in the_plan.keep:
        if c.info.status not in TERMINAL or c.kept(*NOT_COMPACTED):
            continue
        if policy.older_than_s is not None and the_plan.created_at - c.ended_ts < policy.older_than_s:
            continue
        out.append(c.info.paths)
    return out


def gc(root: str | Path | None, policy: Policy, *, dry_run: bool = False) -> tuple[Plan, Result | None]:
    """Plan and (unless ``dry_run``) execute in one call, for scripts."""
    p = plan(root, policy)
    return p, (None if dry_run else execute(root, p))


def describe_kept(candidates: Iterable[Candidate]) -> dict[str, int]:
    """How many runs were kept for each kind of reason (:attr:`KeepReason.summary`)."""
    out: dict[str, int] = {}
    for c in candidates:
        if c.kept_for is not None:
            key = c.kept_for.summary
            out[key] = out.get(key, 0) + 1
    return out
