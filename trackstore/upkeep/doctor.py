"""``trackstore doctor``: find damage in a store, say what to do, and (``fix=True``) repair it.

What it looks for, and what ``--fix`` does about each (nothing is ever deleted: what cannot be
repaired is moved under ``<root>/_quarantine/<timestamp>/`` at its path relative to the root,
with ``reasons.json`` saying why):

=======================  =====================================================================
check                    --fix
=======================  =====================================================================
``temp_file``            leftover ``.<name>.<hex>.tmp`` from a crashed write: quarantined (temp
                         files younger than ``temp_age_s`` in a run with a live writer are a
                         write in progress and not reported)
``corrupt_parquet``      truncated or unreadable part file (footer, or with ``deep`` every
                         column): quarantined, so queries and sync work again
``newer_format``         part written by a newer trackstore: reported only (upgrade)
``stuck_running``        (info) run.json says ``running`` but no writer is alive: the run
                         crashed, which the store handles (readers report it ``crashed``, with
                         ``last_step`` and ``ended_at`` from its data). --fix records that in
                         run.json: status ``crashed``, ``ended_at`` = its last sign of life
                         (heartbeats, newest row), ``last_step`` = the largest step stored
``broken_run_json``      run.json unreadable (not JSON, not UTF-8, not an object) or missing:
                         the damaged file is quarantined and a minimal run.json (status
                         ``crashed``) is rebuilt from the folder
``bad_run_json``         run.json has values readers cannot use (an out-of-range step, a
                         wrong type; readers show them as missing), or lacks a required field
                         (a warning when that is all): the file is quarantined and rewritten
                         without those values, ``last_step`` recomputed from the data and
                         required fields filled from the folder (not while a writer is live)
``orphan_cursor``        sync cursor of a run no longer in the store: archived under
                         ``_sync/_gc/`` (where gc keeps cursors of deleted runs)
``unreadable_cursor``    sync cursor that cannot be read as every reader reads it (not JSON, a
                         field of the wrong type, a number out of the format's range:
                         :func:`trackstore.store.cursor.check_cursor`): quarantined
``trash``                a gc was interrupted: its deletion is finished (the run had already
                         been taken out of the store atomically)
``compaction_leftover``  an interrupted compaction: resolved (:func:`trackstore.store.merge.recover`).
                         A merge at work (a live run merging its parts, ``compact``, an import:
                         the maintenance lock's live holder names the run) is not reported
``repeated_rows``        (``deep`` only) row ids ``(writer, seq)`` held by more than one row of a
                         kind of a run (:func:`trackstore.upkeep.bundle.repeated_row_ids`): reported only
``damaged_media``        (``deep`` only) an image file under ``media/`` whose content's sha256 is
                         not its name (:func:`trackstore.store.media.check_media_file`): reported only
``import_leftover``      staging folder of an interrupted import: quarantined
``stale_lock``           lock file of a dead process: removed (reported only as a warning;
                         the next acquire takes it over anyway)
``artifact_reference``   (warning) a file of an artifact stored by reference vanished or
                         changed since it was logged (size and modification time; with
                         ``deep`` its sha256): reported only, the trainer's files are its own.
                         Sync skips such a file rather than upload something else
=======================  =====================================================================

Findings are ``error`` (damage: something is unreadable or would be lost), ``warning``
(worth a look, nothing is lost) or ``info`` (a normal state the store handles, such as a
crashed run); :attr:`Report.healthy` is True when no error remains after fixing. The CLI exits
0 when healthy and 4 when errors remain.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..store import meta as _meta
from ..store.atomic import is_temp_file, read_json, write_json_atomic
from ..store.clock import iso
from ..store.cursor import Cursor
from ..store.layout import (
    ARCHIVE_DIR,
    IMPORT_DIR,
    LOCK_SUFFIX,
    MERGE_STAGING_PREFIX,
    PROJECT_PREFIX,
    QUARANTINE_DIR,
    RUN_FILE,
    RUN_PREFIX,
    SYNC_DIR,
    RunPaths,
    is_part_name,
    iter_run_dirs,
    resolve_root,
)
from ..store.ledger import CURSOR_ERRORS
from ..store.vocab import RunStatus

TEMP_AGE_S = 600.0


@dataclass
class Finding:
    """One problem: where, what, what to do, and (after a fix) what was done."""

    check: str
    path: Path
    problem: str
    advice: str
    severity: str = "error"
    fixed: str | None = None

    def row(self, root: Path) -> dict:
        try:
            rel = str(self.path.relative_to(root))
        except ValueError:
            rel = str(self.path)
        return {"check": self.check, "severity": self.severity, "path": rel, "problem": self.problem,
                "advice": self.advice, "fixed": self.fixed}


@dataclass
class Report:
    root: Path
    findings: list[Finding] = field(default_factory=list)
    quarantine: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def remaining(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error" and not f.fixed]

    @property
    def healthy(self) -> bool:
        return not self.remaining


# ---------------------------------------------------------------------------- checks
def _maintenance_running(root: Path) -> bool:
    from ..store import locks

    st = locks.read_lock(root, "maintenance")
    return st is not None and not st.stale


def _merge_at_work(paths: RunPaths, kind_dir: Path, seen: set[str]) -> bool:
    """Whether the swap leftovers ``seen`` next to ``kind_dir`` are a merge at work, not damage.

    Every folder swap (a live run's own merge, a merge at finish, ``trackstore compact``, an
    import) holds the store's maintenance lock while its staging folder exists. So: a live
    holder that names this run (or names no runs) is at work on it; and with no live holder,
    what was seen is damage only if it is still there now (a merge that ended between the look
    and the lock read took its folders with it).
    """
    from ..store import locks
    from ..store.merge import work_in_progress

    holder = locks.read_lock(paths.root, locks.MAINTENANCE)
    if holder is not None and not holder.stale:
        runs = holder.runs
        if runs is None or locks.run_in_use(paths.project, paths.run_id, set(runs)):
            return True
    return not (seen & work_in_progress(kind_dir))


def _check_parquet(path: Path, deep: bool, kind: str | None = None) -> Finding | None:
    import pyarrow.parquet as pq

    from ..store.parts import schema_problem
    from ..store.schema import SCHEMA_VERSION, file_version

    try:
        pf = pq.ParquetFile(path)
        version = file_version(pf.schema_arrow.metadata)
        problem = schema_problem(pf.schema_arrow, kind) if kind else None  # a part not of its kind
        if problem:
            raise ValueError(f"not a {kind} part: {problem}")
        if deep:
            pf.read()
    except Exception as exc:
        detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        return Finding("corrupt_parquet", path, f"unreadable Parquet file: {detail}",
                       "run `trackstore doctor --fix` to quarantine it (its rows are lost to queries and sync; "
                       "restore it from a backup or bundle if you have one)")
    if version is not None and version > SCHEMA_VERSION:
        return Finding("newer_format", path, f"written by a newer trackstore (format version {version})",
                       "upgrade trackstore to read this file", severity="warning")
    return None


def _check_run(root: Path, project: str, run_id: str, run_dir: Path, deep: bool, temp_age_s: float,
               now: float) -> list[Finding]:
    from ..store.merge import work_in_progress
    from ..store.schema import KINDS

    out: list[Finding] = []
    try:
        paths = RunPaths(root, project, run_id)
    except Exception as exc:
        return [Finding("broken_run_json", run_dir, f"run folder name is not valid: {exc}",
                        "rename or remove the folder by hand", severity="warning")]
    writers = _meta.read_writer_files(paths)
    live = any(_meta.writer_alive(w, now) for w in writers)
    out += _check_run_json(paths, writers, live, now)
    # files
    kind_of_dir = {paths.kind_dir(kind): kind for kind in KINDS}
    for dirpath, dirs, files in os.walk(run_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(MERGE_STAGING_PREFIX))
        for name in sorted(files):
            p = Path(dirpath) / name
            if is_temp_file(p):
                try:
                    age = now - p.stat().st_mtime
                except FileNotFoundError:
                    continue
                if live and age < temp_age_s:
                    continue  # a write in progress
                out.append(Finding("temp_file", p, f"leftover temporary file ({p.stat().st_size} bytes, "
                                   f"{age / 3600:.1f} h old) from an interrupted write",
                                   "run `trackstore doctor --fix` to quarantine it (it was never visible to readers)"))
            elif is_part_name(name):
                f = _check_parquet(p, deep, kind_of_dir.get(Path(dirpath)))
                if f is not None:
                    out.append(f)
    for kind in KINDS:
        kd = paths.kind_dir(kind)
        seen = work_in_progress(kd)
        if seen and not _merge_at_work(paths, kd, seen):
            out.append(Finding("compaction_leftover", kd, "an interrupted compaction left a staging folder",
                               "run `trackstore doctor --fix` (or `trackstore compact`) to resolve it"))
    out += _check_references(paths, deep)
    if deep:
        out += _check_repeated_ids(paths)
        out += _check_media(paths)
    return out


def _check_media(paths: RunPaths) -> list[Finding]:
    """``--deep``: image files under ``media/`` whose content is not what their name (its sha256) says."""
    from ..store.media import check_media_file

    out: list[Finding] = []
    if not paths.media_dir.is_dir():
        return out
    for p in sorted(paths.media_dir.rglob("*")):
        if p.is_dir() or is_temp_file(p):
            continue
        problem = check_media_file(p, p.relative_to(paths.dir).as_posix())
        if problem is not None:
            out.append(Finding("damaged_media", p, problem,
                               "the image's bytes were changed on disk: restore the file from a bundle or a "
                               "replica of the run (sync reports images whose file is missing)"))
    return out


def _check_references(paths: RunPaths, deep: bool) -> list[Finding]:
    """Files of artifacts stored by reference that vanished or changed (``deep``: by sha256)."""
    from ..records.artifact_refs import check_reference
    from ..records.artifacts import REFERENCE, list_versions

    out = []
    for v in list_versions(paths.dir):
        if v.storage != REFERENCE:
            continue
        for f in v.files:
            problem = check_reference(f.path, f.size, f.sha256, f.mtime_ns, quick=not deep)
            if problem is not None:
                out.append(Finding("artifact_reference", Path(f.path),
                                   f"artifact {v.name} v{v.version} (by reference): the file {problem}",
                                   "sync skips it (never uploads other bytes); log the checkpoint again if it "
                                   "was rewritten, or keep checkpoints until they are synced", severity="warning"))
    return out


def _check_repeated_ids(paths: RunPaths) -> list[Finding]:
    """``--deep``: row ids ``(writer, seq)`` held by more than one row of a kind of the run."""
    from ..store.schema import KINDS
    from .bundle.row_ids import repeated_row_ids

    out = []
    for kind in KINDS:
        rep = repeated_row_ids(paths.parts(kind), kind)
        if rep:
            out.append(Finding("repeated_rows", paths.kind_dir(kind), rep.describe(),
                               "queries and sync count these rows more than once: a file was copied in twice "
                               "or the run was crafted; move the files repeating rows out of the run folder, "
                               "or import the run again from a sound bundle (--fix leaves them alone)"))
    return out


def _check_run_json(paths: RunPaths, writers: list[dict], live: bool, now: float) -> list[Finding]:
    """run.json: missing, unreadable, values readers cannot use, or a crash not yet recorded."""
    doc = _meta.load_run_json(paths)
    if doc is None:
        if live:
            return []
        return [Finding("broken_run_json", paths.run_file, "run folder has no run.json",
                        "run `trackstore doctor --fix` to rebuild a minimal run.json (status crashed)")]
    if doc.unreadable:
        return [Finding("broken_run_json", paths.run_file, f"run.json {'; '.join(doc.problems)}",
                        "run `trackstore doctor --fix`: the broken file is quarantined and a minimal "
                        "run.json (status crashed) rebuilt so the run's data stays visible")]
    out = []
    if doc.problems or doc.missing:
        what = doc.problems + ([f"missing {', '.join(doc.missing)}"] if doc.missing else [])
        fix_it = ("not while a writer is live; when it has ended, " if live else "") + (
            "run `trackstore doctor --fix`: the file is quarantined and rewritten without them, last_step "
            "recomputed from the data, missing fields filled from the folder")
        out.append(Finding("bad_run_json", paths.run_file,
                           f"run.json has values readers cannot use (shown as missing): {'; '.join(what)}"
                           if doc.problems else f"run.json lacks required fields: {', '.join(doc.missing)}",
                           fix_it, severity="error" if doc.problems else "warning"))
    meta = doc.meta
    if (meta.get("status") in (None, RunStatus.RUNNING) and not live
            and _meta.effective_status(meta, writers, now) == RunStatus.CRASHED):
        out.append(Finding("stuck_running", paths.run_file,
                           "the run crashed (recorded as running, no writer is alive); readers report it crashed "
                           "with last_step and ended_at from its data",
                           "nothing is needed; `trackstore doctor --fix` records the crash in run.json; resume it "
                           "with trackstore.init(..., run_id=..., resume=True) to continue", severity="info"))
    return out


def _check_sync(root: Path, now: float) -> list[Finding]:
    out: list[Finding] = []
    base = root / SYNC_DIR
    if not base.is_dir():
        return out
    for dest in sorted(base.iterdir()):
        if not dest.is_dir() or dest.name in (ARCHIVE_DIR,) or dest.name.startswith((".", "_")):
            continue
        for f in sorted(dest.glob(f"{PROJECT_PREFIX}*/{RUN_PREFIX}*.json")):
            try:  # read as every reader reads it: a number out of the format's range is damage too
                cursor = Cursor.from_json(read_json(f))
                project, run_id = cursor.project, cursor.run_id
            except FileNotFoundError:  # archived or replaced meanwhile
                continue
            except CURSOR_ERRORS as exc:
                out.append(Finding("unreadable_cursor", f, f"sync cursor is unreadable: {str(exc)[:160]}",
                                   "run `trackstore doctor --fix` to quarantine it; the next sync finds the "
                                   "remote run by its marker and asks the target what it holds before sending "
                                   "(MLflow; see docs/gc.md for offline wandb/SwanLab)"))
                continue
            try:
                exists = RunPaths(root, project, run_id).dir.exists()
            except Exception:
                exists = False
            if not exists:
                out.append(Finding("orphan_cursor", f, f"sync state for {project}/{run_id}, which is not in the store",
                                   "run `trackstore doctor --fix` to archive it under _sync/_gc/ "
                                   "(kept so a re-imported run is not uploaded twice)"))
        for tmp in dest.rglob("*"):
            if is_temp_file(tmp) and now - tmp.stat().st_mtime > TEMP_AGE_S:
                out.append(Finding("temp_file", tmp, "leftover temporary file from an interrupted cursor write",
                                   "run `trackstore doctor --fix` to quarantine it"))
    return out


def _check_store_level(root: Path, maintenance: bool) -> list[Finding]:
    from ..store import locks
    from .gc import trash_entries

    out = []
    if not maintenance:
        for entry in trash_entries(root):
            out.append(Finding("trash", entry, "a gc was interrupted before it finished deleting",
                               "run `trackstore doctor --fix` or the next `trackstore gc` to finish the deletion "
                               "(the run is already out of the store)"))
        imp = root / IMPORT_DIR
        if imp.is_dir():
            for entry in sorted(imp.iterdir()):
                out.append(Finding("import_leftover", entry, "staging folder of an interrupted import",
                                   "run `trackstore doctor --fix` to quarantine it, then import the bundle again"))
    d = locks.locks_dir(root)
    if d.is_dir():
        for p in sorted(d.glob(f"*{LOCK_SUFFIX}")):
            st = locks.read_lock(root, p.name[: -len(LOCK_SUFFIX)])
            if st is not None and st.stale:
                out.append(Finding("stale_lock", p, f"{st.describe()} — that process is gone",
                                   "nothing to do: the next command takes it over (--fix removes it)", "warning"))
    return out


def diagnose(root: str | Path | None, *, deep: bool = False, temp_age_s: float = TEMP_AGE_S,
             on_run: Callable[[str, str], None] | None = None) -> Report:
    """Look at the whole store and list every problem. Changes nothing. ``on_run(project,
    run_id)`` is called after each run is checked (progress)."""
    root = resolve_root(root)
    report = Report(root)
    now = time.time()
    maintenance = _maintenance_running(root)
    if maintenance:
        report.notes.append("a gc/compact/import is running: its work folders were not checked")
    for project, run_id, run_dir in iter_run_dirs(root):
        report.findings += _check_run(root, project, run_id, run_dir, deep, temp_age_s, now)
        if on_run is not None:
            on_run(project, run_id)
    report.findings += _check_sync(root, now)
    report.findings += _check_store_level(root, maintenance)
    return report


# ---------------------------------------------------------------------------- fixes
class _Quarantine:
    def __init__(self, root: Path):
        self.root = root
        self.dir = root / QUARANTINE_DIR / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.reasons: list[dict] = []

    def move(self, path: Path, why: str) -> Path:
        rel = path.relative_to(self.root)
        dest = self.dir / rel
        n = 1
        while dest.exists():
            dest = dest.with_name(f"{rel.name}.{n}")
            n += 1
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, dest)
        self.reasons.append({"from": str(rel), "to": str(dest.relative_to(self.root)), "why": why,
                             "at": iso(time.time())})
        write_json_atomic(self.dir / "reasons.json", self.reasons)
        return dest


def _rebuild_run_json(paths: RunPaths) -> dict:
    mtimes = []
    for dirpath, _d, files in os.walk(paths.dir):
        for f in files:
            try:
                mtimes.append(os.stat(os.path.join(dirpath, f)).st_mtime)
            except OSError:
                pass
    first = min(mtimes) if mtimes else time.time()
    last = max(mtimes) if mtimes else time.time()
    return {"format_version": _meta.META_VERSION, "project": paths.project, "run_id": paths.run_id,
            "name": paths.run_id, "status": RunStatus.CRASHED, "created_at": iso(first), "ended_at": iso(last),
            "updated_at": iso(last), "config": {}, "tags": [], "summary": {},
            "recovered_by": "trackstore doctor", "recovered_at": iso(time.time())}


def _mark_crashed(paths: RunPaths) -> str | None:
    """Record a crash readers already derive: status, ended_at and last_step as they show them."""
    from ..read.listing import load_run

    info = load_run(paths)
    if info is None or info.status != RunStatus.CRASHED:
        return None
    meta = dict(info.meta)
    meta.update(status=RunStatus.CRASHED, ended_at=info.ended_at or iso(time.time()),
                crash_detected_by="trackstore doctor", crash_detected_at=iso(time.time()))
    if info.last_step is not None:
        meta["last_step"] = info.last_step
    _meta.write_run_json(paths, meta)
    step = f", last_step {meta['last_step']}" if meta.get("last_step") is not None else ""
    return f"marked crashed (ended_at {meta['ended_at']}{step})"


def _repair_run_json(paths: RunPaths, f: Finding, q: _Quarantine) -> str | None:
    """Rewrite a run.json without the values readers cannot use (the original is quarantined)."""
    from ..read.listing import data_extent, load_run

    with warnings.catch_warnings():  # the values it names are what this repairs
        warnings.simplefilter("ignore", _meta.RunJsonWarning)
        info = load_run(paths)
    if info is None or _meta.any_writer_alive(paths):
        return None  # changed meanwhile, or a writer is live and owns the file
    rebuilt = _rebuild_run_json(paths)  # what the folder tells, under what could be read
    meta = {**rebuilt, **{k: v for k, v in info.meta.items() if v is not None or k not in rebuilt}}
    ended = (info.ended_at or meta.get("ended_at")) if info.status != RunStatus.RUNNING else None
    meta.update(status=info.status, ended_at=ended)
    step = max((s for s in (info.last_step, data_extent(paths).last_step) if s is not None), default=None)
    if step is not None:
        meta["last_step"] = step
    dest = q.move(f.path, f.problem)
    _meta.write_run_json(paths, meta)
    return (f"quarantined the file to {dest.relative_to(q.root)}; rewrote it without the unreadable values"
            + (f", last_step {step} from the data" if step is not None else ""))


def fix(report: Report) -> Report:
    """Repair or quarantine every finding of ``report`` (under the store's maintenance lock)."""
    from ..store import locks
    from ..store.merge import recover_kind_dir
    from .gc import archive_cursors, clean_trash

    root = report.root
    q = _Quarantine(root)
    with locks.acquire_maintenance(root, job="doctor"):
        for f in report.findings:
            try:
                f.fixed = _fix_one(root, f, q, archive_cursors, clean_trash, recover_kind_dir)
            except OSError as exc:
                f.fixed = None
                report.notes.append(f"could not fix {f.path}: {exc}")
    if q.reasons:
        report.quarantine = q.dir
    return report


def _fix_one(root, f: Finding, q: _Quarantine, archive_cursors, clean_trash, recover_kind_dir) -> str | None:
    from ..store import locks

    if f.check == "artifact_reference":
        return None  # the trainer's file: reported only
    if not f.path.exists() and f.check not in ("broken_run_json", "compaction_leftover"):
        return "already gone"
    if f.check in ("temp_file", "corrupt_parquet", "unreadable_cursor", "import_leftover"):
        dest = q.move(f.path, f.problem)
        if f.check == "import_leftover":
            try:
                f.path.parent.rmdir()
            except OSError:
                pass
        return f"quarantined to {dest.relative_to(root)}"
    if f.check == "stuck_running":
        paths = _paths_of_run_file(root, f.path)
        if _meta.any_writer_alive(paths):
            return None
        return _mark_crashed(paths)
    if f.check == "bad_run_json":
        return _repair_run_json(_paths_of_run_file(root, f.path), f, q)
    if f.check == "broken_run_json":
        paths = _paths_of_run_file(root, f.path)
        moved = ""
        if f.path.exists():
            moved = f"quarantined the broken file to {q.move(f.path, f.problem).relative_to(root)}; "
        _meta.write_run_json(paths, _rebuild_run_json(paths))
        return moved + "rebuilt a minimal run.json (status crashed)"
    if f.check == "orphan_cursor":
        data = read_json(f.path)
        archive_cursors(root, data["project"], data["run_id"])
        return "archived under _sync/_gc/"
    if f.check == "trash":
        clean_trash(root)
        return "finished the interrupted deletion"
    if f.check == "compaction_leftover":
        return "; ".join(recover_kind_dir(f.path)) or "resolved"
    if f.check == "stale_lock":
        name = f.path.name[: -len(LOCK_SUFFIX)]
        st = locks.read_lock(root, name)
        if st is None:
            return "already gone"
        if not st.stale:  # taken over meanwhile (e.g. by this doctor's own maintenance lock)
            return f"taken over by pid {st.data.get('pid')}"
        locks.acquire(root, name).release()
        return "removed"
    return None


def _paths_of_run_file(root: Path, run_file: Path) -> RunPaths:
    run_dir = run_file.parent if run_file.name == RUN_FILE else run_file
    return RunPaths(root, run_dir.parent.name[len(PROJECT_PREFIX):], run_dir.name[len(RUN_PREFIX):])


def doctor(root: str | Path | None, *, fix_problems: bool = False, deep: bool = False,
           temp_age_s: float = TEMP_AGE_S, on_run: Callable[[str, str], None] | None = None) -> Report:
    """Diagnose (and with ``fix_problems`` repair) the store; see the module docstring."""
    report = diagnose(root, deep=deep, temp_age_s=temp_age_s, on_run=on_run)
    if fix_problems and report.findings:
        fix(report)
    return report


def quarantine_listing(root: str | Path | None) -> list[dict]:
    """Everything doctor ever quarantined in this store, with the reasons."""
    root = resolve_root(root)
    out: list[dict] = []
    base = root / QUARANTINE_DIR
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        try:
            out.extend(json.loads((d / "reasons.json").read_text()))
        except (OSError, ValueError):
            continue
    return out


__all__ = ["diagnose", "fix", "doctor", "Finding", "Report", "quarantine_listing"]
