"""Merging a run's part files and swapping a kind folder for its new content, atomically.

The one implementation behind every rewrite of a kind folder: a live writer merging its own
parts (:mod:`trackstore.write.rolling`), ``finish()`` merging a run (:func:`compact_finished_run`),
``trackstore compact`` (:mod:`trackstore.upkeep.compact`) and a bundle import
(:mod:`trackstore.upkeep.bundle`). The promises:

* **Every row survives with its identity.** Rows are merged per writer, keep their ``writer``
  and ``seq`` columns, and the output is checked against the input (same row count, same
  ``(writer, seq)`` set) before anything becomes visible. Sync cursors, which are sets of
  ``(writer, seq)`` ranges, therefore stay exact: a half-synced run compacted in the middle
  continues with exactly the rows it had not sent.
* **A reader lists either the old files or the new files, never both and never neither.** The
  new content of a kind folder (unchanged files hard-linked, merged files written with the
  usual temp -> fsync -> rename) is built in a hidden sibling folder and swapped with the live
  folder in one ``renameat2(RENAME_EXCHANGE)`` call. A query that *listed* the old files just
  before the swap and opens them just after gets "file not found" and lists again
  (:func:`trackstore.store.layout.relist`); it never counts a row twice or misses one. On
  filesystems without ``RENAME_EXCHANGE`` (some network filesystems) the swap is two renames
  and the kind folder is absent for the instant between them (a reader then sees that kind as
  empty, for that instant only); :func:`swap_method` says which one this store gets.
* **Live writers are never touched.** :func:`compact_run` skips runs with a live writer, and a
  part file that appears during a swap (a resumed run starting meanwhile) is moved into the
  new folder after the swap, not lost.
* **Crash-safe.** A crash at any point leaves a consistent kind folder plus a hidden
  ``.compact-*`` sibling that :func:`recover` (run by the next compaction and by
  ``trackstore doctor --fix``) resolves: an unswapped new folder is discarded, a swapped-out
  old folder is removed once its stragglers are moved, a missing kind folder is restored.

Merged files are named ``part-<writer>-<first_seq>-<last_seq>.parquet``
(:func:`trackstore.store.layout.merged_part_name`). Merged metrics are *key-clustered*
(sorted by key, with key statistics and smaller row groups, see
:func:`trackstore.store.parts.write_part`), so a question about one key reads a few row groups
of each run instead of every point; other kinds keep ``seq`` order.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..errors import TrackstoreError
from . import meta as _meta
from .atomic import fsync_dir
from .layout import MERGE_MARKER, MERGE_STAGING_PREFIX, RunPaths, is_part_name, merged_part_name, parse_part_name
from .ranges import RangeSet
from .vocab import Kind, RunStatus

DEFAULT_TARGET_BYTES = 256 << 20  # inputs of one merged file, compressed bytes on disk
LIVE_SETTLE_S = 0.02  # see replace_kind_dir: merges of runs that readers may be watching right now
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


# ---------------------------------------------------------------------------- directory swap
def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two directory entries. False when the platform cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, os.strerror(err), str(a))


def swap_method(directory: Path) -> str:
    """``"exchange"`` (atomic) or ``"rename"`` (two renames) for folders under ``directory``."""
    a = directory / f"{MERGE_STAGING_PREFIX}probe-{secrets.token_hex(3)}-a"
    b = directory / f"{MERGE_STAGING_PREFIX}probe-{secrets.token_hex(3)}-b"
    a.mkdir(parents=True)
    b.mkdir()
    try:
        return "exchange" if _exchange(a, b) else "rename"
    finally:
        a.rmdir()
        b.rmdir()


def _staging_dirs(kind_dir: Path) -> list[Path]:
    prefix = f"{MERGE_STAGING_PREFIX}{kind_dir.name}-"
    try:
        return sorted(p for p in kind_dir.parent.iterdir() if p.name.startswith(prefix) and p.is_dir())
    except FileNotFoundError:
        return []


def _parts_in(d: Path) -> set[str]:
    try:
        return {p.name for p in d.iterdir() if is_part_name(p.name)}
    except FileNotFoundError:
        return set()


def _read_marker(d: Path) -> dict | None:
    try:
        return json.loads((d / MERGE_MARKER).read_text())
    except (OSError, ValueError):
        return None


def replace_kind_dir(kind_dir: Path, build: Callable[[Path], list[str]], *, settle: float = 0.0) -> str:
    """Replace ``kind_dir``'s content with what ``build(staging)`` puts in a fresh folder.

    ``build`` fills the staging folder with the complete new content and returns the names of
    current files it intends to remove (replaced by merged files); any other current file that
    is missing from the staging folder after the swap (a part written meanwhile) is moved in.
    Returns the swap method used. See the module docstring for the guarantees.

    ``settle`` seconds pass between the swap and emptying the old folder. A reader that opened
    the old folder just before the swap still lists it whole meanwhile (emptying it under a
    listing in progress would make the listing come back short); merges of live runs, which
    readers are watching, use a few milliseconds of it.
    """
    kind_dir.parent.mkdir(parents=True, exist_ok=True)
    recover_kind_dir(kind_dir)
    kind_dir.mkdir(exist_ok=True)
    staging = kind_dir.parent / f"{MERGE_STAGING_PREFIX}{kind_dir.name}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        removed = build(staging)
        marker = {"removed": sorted(removed), "created": sorted(_parts_in(staging))}
        (staging / MERGE_MARKER).write_text(json.dumps(marker))  # last: marks the staging folder complete
        fsync_dir(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if _exchange(staging, kind_dir):
        method = "exchange"
    else:
        method = "rename"
        aside = kind_dir.parent / f"{MERGE_STAGING_PREFIX}{kind_dir.name}-{secrets.token_hex(4)}"
        os.rename(kind_dir, aside)
        os.rename(staging, kind_dir)
        staging = aside
    fsync_dir(kind_dir.parent)
    if settle > 0:
        time.sleep(settle)
    _finish_swap(kind_dir, staging, marker)
    return method


def _finish_swap(kind_dir: Path, old: Path, marker: dict) -> None:
    """After a swap: move stragglers from the old folder in, remove it, drop the marker."""
    removed = set(marker.get("removed") or [])
    present = _parts_in(kind_dir)
    for name in sorted(_parts_in(old) - present - removed):
        os.replace(old / name, kind_dir / name)
    if _parts_in(old) - removed - present - _parts_in(kind_dir):
        raise OSError(f"could not move new part files out of {old}")
    shutil.rmtree(old, ignore_errors=True)
    try:
        (kind_dir / MERGE_MARKER).unlink()
    except FileNotFoundError:
        pass
    fsync_dir(kind_dir)


def recover_kind_dir(kind_dir: Path) -> list[str]:
    """Resolve what an interrupted swap left next to ``kind_dir``; returns what was done.

    A staging folder with a marker is new content that may not have been swapped in; one
    without is old content that was swapped out. Old content is preferred when the kind folder
    itself is missing (a crash between the two renames of the fallback swap).
    """
    done = []
    dirs = _staging_dirs(kind_dir)
    if dirs and not kind_dir.exists():
        old = [d for d in dirs if not (d / MERGE_MARKER).exists()]
        pick = (old or dirs)[0]
        os.rename(pick, kind_dir)
        dirs.remove(pick)
        done.append(f"restored {kind_dir} from {pick.name}")
    for d in dirs:
        if (d / MERGE_MARKER).exists():
            shutil.rmtree(d, ignore_errors=True)
            done.append(f"discarded unfinished compaction {d}")
        else:
            _finish_swap(kind_dir, d, _read_marker(kind_dir) or {"removed": []})
            done.append(f"finished interrupted compaction of {kind_dir}")
    if (kind_dir / MERGE_MARKER).exists():
        (kind_dir / MERGE_MARKER).unlink()
        done.append(f"removed compaction marker in {kind_dir}")
    return done


def recover(paths: RunPaths) -> list[str]:
    """Resolve interrupted compactions in every kind folder of a run."""
    from .schema import KINDS

    done = []
    for kind in KINDS:
        done += recover_kind_dir(paths.kind_dir(kind))
    return done


def has_leftovers(kind_dir: Path) -> bool:
    """True when an interrupted compaction left something for :func:`recover_kind_dir`."""
    return bool(work_in_progress(kind_dir))


def work_in_progress(kind_dir: Path) -> set[str]:
    """Names of what a swap of ``kind_dir`` has next to it or in it now: its staging folders and
    its marker. A merge at work holds the maintenance lock while they exist; with no live
    holder, whatever is still here was left by one that was interrupted (see
    :func:`trackstore.upkeep.doctor`)."""
    names = {d.name for d in _staging_dirs(kind_dir)}
    if (kind_dir / MERGE_MARKER).exists():
        names.add(MERGE_MARKER)
    return names


# ---------------------------------------------------------------------------- merging
@dataclass
class KindResult:
    kind: str
    files_before: int
    files_after: int
    rows: int
    bytes_before: int
    bytes_after: int


@dataclass
class CompactResult:
    project: str
    run_id: str
    kinds: list[KindResult] = field(default_factory=list)
    skipped: str | None = None
    swap: str | None = None

    @property
    def changed(self) -> bool:
        return any(k.files_before != k.files_after for k in self.kinds)


def _writer_of(path: Path, kind: str) -> str | None:
    """The single writer of a part file, or None when the file is damaged or holds several.

    Part names say their writer (``part-<writer>-<seq>...``), which saves reading a column of
    every file: a run ends with thousands of them. The name is only a hint: :func:`_merge`
    checks the rows, and refuses a group that is not one writer's.
    """
    from .parts import check_part, read_part

    if check_part(path) is not None:
        return None  # damaged: compaction leaves it where it is, for doctor
    parsed = parse_part_name(path.name)
    if parsed is not None:
        return parsed[0]
    try:
        t = read_part(path, kind, columns=["writer"])
    except Exception:
        return None
    import pyarrow.compute as pc

    ws = pc.unique(t.column("writer")).to_pylist()
    return ws[0] if len(ws) == 1 else None


def _plan_groups(parts: list[Path], kind: str, target_bytes: int) -> list[list[Path]]:
    """Groups of ≥2 files of one writer to merge (consecutive by name, bounded in size).

    Unreadable files belong to no group: compaction leaves them exactly where they are.
    """
    by_writer: dict[str, list[Path]] = {}
    for p in parts:
        w = _writer_of(p, kind)
        if w is not None:
            by_writer.setdefault(w, []).append(p)
    groups = []
    for files in by_writer.values():
        chunk: list[Path] = []
        size = 0
        for p in files:  # sorted by name = by first seq (zero-padded)
            s = _bytes([p])
            if chunk and size + s > target_bytes:
                groups.append(chunk)
                chunk, size = [], 0
            chunk.append(p)
            size += s
        groups.append(chunk)
    return [g for g in groups if len(g) >= 2]


def _merge(files: list[Path], kind: str):
    """Read and merge part files of one writer; returns (table, RangeSet of input rows)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from .parts import conform, read_part

    tables = [conform(read_part(p, kind), kind) for p in files]
    ids = RangeSet()
    for t in tables:
        ids.add_table(t)
    table = pa.concat_tables(tables)
    if len(ids) != table.num_rows:
        raise ValueError("duplicate (writer, seq) rows")
    if len(ids.writers()) != 1:
        raise ValueError(f"files named as one writer's hold rows of {len(ids.writers())} writers")
    if kind != Kind.METRICS:  # metrics are clustered by key when written (write_part(by_key=True))
        table = table.take(pc.sort_indices(table, sort_keys=[("seq", "ascending")]))
    return table, ids


def _bytes(parts: list[Path]) -> int:
    """Bytes of ``parts`` on disk; a file gone meanwhile (someone else's work) counts 0."""
    total = 0
    for p in parts:
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def _build_merged(staging: Path, kind: str, parts: list[Path], groups: list[list[Path]]) -> tuple[list[str], list[str], int]:
    """Fill ``staging`` with a kind folder's new content: every part not in ``groups`` (hard
    links), and one merged, verified file per group. Returns (names replaced, names created,
    rows merged)."""
    from .parts import read_part, write_part
    from .schema import ROWS, with_metadata

    merged_inputs = {p.name for g in groups for p in g}
    for p in parts:
        if p.name not in merged_inputs:
            try:
                os.link(p, staging / p.name)
            except OSError:
                shutil.copy2(p, staging / p.name)
    created, rows = [], 0
    for g in groups:
        table, ids = _merge(g, kind)
        table = table.cast(with_metadata(ROWS[kind], kind))
        writer = ids.writers()[0]
        span = ids.to_json()[writer]
        name = merged_part_name(writer, span[0][0], span[-1][1])
        write_part(staging / name, table, kind, by_key=kind == Kind.METRICS)
        check = RangeSet()
        check.add_table(read_part(staging / name, kind, columns=["writer", "seq"]))
        if check != ids:
            raise OSError(f"merged file {name} does not hold exactly the input rows; nothing changed")
        created.append(name)
        rows += table.num_rows
    return sorted(merged_inputs), created, rows


def compact_run(paths: RunPaths, *, kinds: Iterable[str] | None = None, target_bytes: int = DEFAULT_TARGET_BYTES,
                dry_run: bool = False, settle: float = 0.0) -> CompactResult:
    """Compact one run (every kind, or ``kinds``). Skips runs with a live writer.

    ``settle``: see :func:`replace_kind_dir` (used for runs that just finished)."""
    from .schema import KINDS

    result = CompactResult(paths.project, paths.run_id)
    if _meta.any_writer_alive(paths) or _meta.run_status(paths) == RunStatus.RUNNING:
        result.skipped = "a writer is alive"
        return result
    if not dry_run:
        recover(paths)
    for kind in (kinds or KINDS):
        kind_dir = paths.kind_dir(kind)
        parts = paths.parts(kind)
        groups = _plan_groups(parts, kind, target_bytes)
        if not groups:
            continue
        before = _bytes(parts)
        if dry_run:
            merged = sum(len(g) for g in groups)
            result.kinds.append(KindResult(kind, len(parts), len(parts) - merged + len(groups), 0, before, before))
            continue
        rows = 0

        def build(staging: Path, kind=kind, parts=parts, groups=groups) -> list[str]:
            nonlocal rows
            removed, _created, rows = _build_merged(staging, kind, parts, groups)
            return removed

        try:
            result.swap = replace_kind_dir(kind_dir, build, settle=settle)
        except (ValueError, TrackstoreError, FileNotFoundError) as exc:  # a part vanished: someone else's work
            result.skipped = f"{kind}: {exc}; left unchanged (run `trackstore doctor`)"
            continue
        after_parts = paths.parts(kind)
        result.kinds.append(KindResult(kind, len(parts), len(after_parts), rows, before,
                                       _bytes(after_parts)))
    return result


def merge_own_parts(paths: RunPaths, kind: str, files: list[Path]) -> Path:
    """Merge some part files of one live writer into one, in place (:mod:`trackstore.write.rolling`).

    The same build, checks and folder swap as :func:`compact_run`; the caller (the writer
    itself) guarantees that nobody else writes or merges these files meanwhile.
    """
    created: list[str] = []

    def build(staging: Path) -> list[str]:
        removed, made, _rows = _build_merged(staging, kind, paths.parts(kind), [files])
        created.extend(made)
        return removed

    replace_kind_dir(paths.kind_dir(kind), build, settle=LIVE_SETTLE_S)
    return paths.kind_dir(kind) / created[0]


# ---------------------------------------------------------------------------- at finish
# Runs with more part bytes than this are left to `trackstore compact` (merging costs about
# 1 s per 10 MB of metrics parts here, and finish() should not hold a job's exit for long).
FINISH_MAX_BYTES = 64 << 20
_FINISH_NOTE_BYTES = 8 << 20  # above this, say on stderr why finish() takes a moment


def compact_finished_run(paths: RunPaths, *, max_bytes: int | None = None) -> CompactResult:
    """Merge a run's part files right after its last writer finished (what ``finish()`` calls).

    A run flushes a part every few seconds, so a day of training leaves thousands of small
    files per kind, and every later question pays DuckDB's fixed cost per file (about 0.1 ms
    each for ``latest``). Merging them once, while the run is fresh in the page cache, makes
    the store as written as fast as a compacted one. It never competes with anyone: it is
    skipped (``result.skipped`` says why) when another writer of the run is alive, when a gc,
    compaction, import or doctor holds the maintenance lock, when a sync is working on the run,
    or when the run holds more than ``max_bytes`` (default :data:`FINISH_MAX_BYTES`) of parts:
    seconds of work at exit, which cron's ``trackstore compact`` does instead. Otherwise it is
    :func:`compact_run`, with its guarantees: every row keeps its (writer, seq), readers see
    old or new files, never both. It holds the maintenance lock while it works, so a gc or
    import starting in those moments exits 6 ("lock held") and runs at its next turn.
    """
    from ..errors import LockHeldError
    from . import locks
    from .schema import KINDS

    result = CompactResult(paths.project, paths.run_id)
    parts = {kind: paths.parts(kind) for kind in KINDS}
    if not any(len(p) > 1 for p in parts.values()):
        return result  # nothing to merge: no lock, no listing of other processes
    size = sum(_bytes(p) for p in parts.values())
    if size > (FINISH_MAX_BYTES if max_bytes is None else max_bytes):
        result.skipped = f"{size / 1e6:.0f} MB of parts is more than compaction at finish does; run `trackstore compact`"
        return result
    try:
        held = locks.acquire(paths.root, locks.MAINTENANCE,
                             info={"job": locks.BRIEF_JOB, "runs": [f"{paths.project}/{paths.run_id}"]})
    except LockHeldError as exc:
        result.skipped = f"maintenance running ({exc})"
        return result
    try:
        named, unnamed = locks.runs_in_use(paths.root)
        if unnamed or locks.run_in_use(paths.project, paths.run_id, named):
            result.skipped = "being synced"
            return result
        if size > _FINISH_NOTE_BYTES:
            from .notices import warn_note

            warn_note(f"merging the part files of run {paths.run_id} ({size / 1e6:.0f} MB) so queries read "
                      "few files; this takes a few seconds")
        return compact_run(paths, settle=LIVE_SETTLE_S)
    finally:
        held.release()
