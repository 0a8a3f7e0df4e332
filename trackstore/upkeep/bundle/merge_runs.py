"""Moving a staged bundle's runs into the store, merging runs that exist by row identity.

Promises (:func:`import_runs`): every run is checked first (it must carry the run.json the
manifest lists, name its own folder, hold readable parts of its kinds and no repeated row id),
and every conflict with an existing run is found before anything moves. A new run appears with
one ``rename(2)``, its gc'd sync cursors restored. An existing run gains only the parts whose
``(writer, seq)`` rows it lacks; an incoming compacted file replaces the local parts it covers
(atomic folder swap of :mod:`trackstore.store.merge`). A file with the same name and other
bytes, a partial overlap of rows, or another run under the same name (another ``created_at``)
is a :class:`~trackstore.errors.BundleError`. run.json and writer heartbeats: the newer wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import BundleError
from ...store import meta as _meta
from ...store.atomic import read_json, write_bytes_atomic
from ...store.clock import parse_iso
from ...store.files import sha256_file
from ...store.layout import (
    PROJECT_PREFIX,
    RUN_FILE,
    RUN_PREFIX,
    WRITERS_DIR,
    RunPaths,
    is_part_name,
)
from ...store.ranges import RangeSet
from .checks import refuse_bad_media, refuse_foreign_or_broken_run, refuse_repeated_ids
from .manifest import run_entries
from .results import ImportResult, RunImport
from .staging import Staged


def _coverage(path: Path, kind: str) -> RangeSet:
    from ...store.parts import read_part

    rs = RangeSet()
    rs.add_table(read_part(path, kind, columns=["writer", "seq"]))
    return rs


def _relation(a: RangeSet, covered: RangeSet) -> str:
    """``subset``, ``disjoint`` or ``overlap`` of ``a`` against ``covered``."""
    cov = covered.to_json()
    inside = outside = False
    for w, ranges in a.to_json().items():
        theirs = cov.get(w, [])
        for lo, hi in ranges:
            if any(clo <= lo and hi <= chi for clo, chi in theirs):
                inside = True
            elif any(not (hi < clo or lo > chi) for clo, chi in theirs):
                return "overlap"
            else:
                outside = True
    if inside and outside:
        return "overlap"
    return "subset" if inside else "disjoint"


@dataclass
class _KindPlan:
    kind: str
    add: list[Path] = field(default_factory=list)     # staged files to move in
    remove: list[str] = field(default_factory=list)   # local names superseded by added files
    rows: int = 0


def _plan_kind(local: RunPaths, staged_dir: Path, kind: str, files: dict[str, tuple[int, str]], base: str) -> _KindPlan:
    kp = _KindPlan(kind)
    rel_kind = local.kind_dir(kind).relative_to(local.dir)
    incoming_dir = staged_dir / rel_kind
    incoming = sorted(p for p in incoming_dir.glob("*.parquet")) if incoming_dir.is_dir() else []
    if not incoming:
        return kp
    local_parts = {p.name: p for p in local.parts(kind)}
    candidates = []  # (coverage, is_local, name, path)
    for p in incoming:
        if p.name in local_parts:
            if sha256_file(local_parts[p.name])[1] != files[f"{base}/{rel_kind.as_posix()}/{p.name}"][1]:
                raise BundleError(f"{local.project}/{local.run_id}: {rel_kind}/{p.name} exists with different "
                                  "content; refusing to overwrite (nothing was imported)")
            continue
        candidates.append((_coverage(p, kind), False, p.name, p))
    if not candidates:
        return kp
    for name, p in local_parts.items():
        try:
            candidates.append((_coverage(p, kind), True, name, p))
        except Exception:
            continue  # an unreadable local part stays as it is; doctor reports it
    candidates.sort(key=lambda c: (-len(c[0]), not c[1], c[2]))
    covered = RangeSet()
    chosen_local = set()
    for cov, is_local, name, p in candidates:
        rel = _relation(cov, covered)
        if rel == "subset":
            continue
        if rel == "overlap":
            raise BundleError(f"{local.project}/{local.run_id}: {rel_kind}/{name} partly overlaps rows already "
                              "present; refusing to merge (nothing was imported)")
        covered.update(cov)
        if is_local:
            chosen_local.add(name)
        else:
            kp.add.append(p)
            kp.rows += len(cov)
    kp.remove = sorted(set(n for _c, is_l, n, _p in candidates if is_l) - chosen_local)
    return kp


def _newer(a: dict | None, b: dict | None, key: str) -> bool:
    """Is ``a`` newer than ``b`` by the ISO timestamp ``key``?"""
    ta = parse_iso((a or {}).get(key))
    tb = parse_iso((b or {}).get(key))
    return ta is not None and (tb is None or ta > tb)


def _merge_run(root: Path, staged_run: Path, local: RunPaths, files: dict, base: str, apply: bool) -> RunImport:
    """Plan (``apply=False``: only raise on conflicts) or apply the merge of one staged run."""
    from ...store.merge import replace_kind_dir
    from ...store.schema import KINDS

    ri = RunImport(local.project, local.run_id)
    try:
        incoming_meta = read_json(staged_run / RUN_FILE)
    except (OSError, ValueError) as exc:
        raise BundleError(f"{local.project}/{local.run_id}: run.json in the bundle is unreadable: {exc}") from exc
    local_meta = _meta.read_run_json(local)
    if local_meta is None:
        raise BundleError(f"{local.project}/{local.run_id} exists here with an unreadable run.json; run "
                          "`trackstore doctor --fix` first")
    if (incoming_meta.get("created_at") and local_meta.get("created_at")
            and incoming_meta["created_at"] != local_meta["created_at"]):
        raise BundleError(f"{local.project}/{local.run_id} exists here but is a different run (created "
                          f"{local_meta['created_at']} here, {incoming_meta['created_at']} in the bundle); "
                          "refusing to overwrite it")
    kind_dirs = {local.kind_dir(k).relative_to(local.dir).as_posix() for k in KINDS}
    plans = [_plan_kind(local, staged_run, k, files, base) for k in KINDS]
    other = []  # (rel, staged path, action)
    for p in sorted(staged_run.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(staged_run).as_posix()
        if rel == RUN_FILE or rel.rsplit("/", 1)[0] in kind_dirs:
            continue
        target = local.dir / rel
        if not target.exists():
            other.append((rel, p, "add"))
        elif sha256_file(target)[1] != files[f"{base}/{rel}"][1]:
            if rel.startswith(f"{WRITERS_DIR}/"):
                try:
                    if _newer(read_json(p), read_json(target), "heartbeat_at"):
                        other.append((rel, p, "replace"))
                except (OSError, ValueError):
                    other.append((rel, p, "replace"))
            else:
                raise BundleError(f"{local.project}/{local.run_id}: {rel} exists with different content; "
                                  "refusing to overwrite (nothing was imported)")
    newer_meta = _newer(incoming_meta, local_meta, "updated_at")
    if not apply:
        return ri
    for kp in plans:
        kind_dir = local.kind_dir(kp.kind)
        if not kp.add:
            continue
        if kp.remove:
            def build(staging: Path, kp=kp, kind_dir=kind_dir) -> list[str]:
                for f in kind_dir.iterdir():
                    if is_part_name(f.name) and f.name not in kp.remove:
                        os.link(f, staging / f.name)
                for f in kp.add:
                    os.rename(f, staging / f.name)
                return kp.remove
            replace_kind_dir(kind_dir, build)
            ri.files_replaced += len(kp.remove)
        else:
            kind_dir.mkdir(parents=True, exist_ok=True)
            for f in kp.add:
                os.rename(f, kind_dir / f.name)
        ri.files_added += len(kp.add)
        ri.rows_added[kp.kind] = kp.rows
    for rel, p, _action in other:
        target = local.dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, target)
        ri.files_added += 1
    if newer_meta:
        write_bytes_atomic(local.run_file, (staged_run / RUN_FILE).read_bytes())
    if ri.files_added or newer_meta:
        ri.action = "updated"
    return ri


def import_runs(root: Path, st: Staged) -> ImportResult:
    """Add or merge every run of the staged bundle ``st`` (see the module docstring)."""
    from ..gc import restore_cursors

    res = ImportResult("runs", source_host=st.manifest.get("source_host"))
    entries = run_entries(st.manifest.get("runs"))
    named = {f"{PROJECT_PREFIX}{e['project']}/{RUN_PREFIX}{e['run_id']}" for e in entries}
    carried = {f"{p.parent.name}/{p.name}" for p in (st.dir / "runs").glob(f"{PROJECT_PREFIX}*/{RUN_PREFIX}*")}
    if carried - named:
        raise BundleError(f"refusing bundle: it carries files of runs its manifest does not list "
                          f"({', '.join(sorted(carried - named)[:3])}); nothing was imported")
    todo = []
    for e in entries:
        project, run_id = e["project"], e["run_id"]
        base = f"runs/{PROJECT_PREFIX}{project}/{RUN_PREFIX}{run_id}"
        staged_run = st.dir / base
        if not (staged_run / RUN_FILE).is_file():
            raise BundleError(f"bundle lists run {project}/{run_id} but carries no run.json for it")
        staged_paths = RunPaths(st.dir / "runs", project, run_id)
        refuse_foreign_or_broken_run(staged_paths)
        refuse_repeated_ids(staged_paths)
        refuse_bad_media(staged_paths)
        local = RunPaths(root, project, run_id)
        if local.dir.exists():
            _merge_run(root, staged_run, local, st.files, base, apply=False)  # conflicts first
        todo.append((local, staged_run, base))
    rows_of = {(e["project"], e["run_id"]): {k: n for k, n in (e.get("rows") or {}).items() if n} for e in entries}
    for local, staged_run, base in todo:
        if not local.dir.exists():
            local.dir.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staged_run, local.dir)  # the whole run appears at once
            restore_cursors(root, local.project, local.run_id)
            res.runs.append(RunImport(local.project, local.run_id, "added",
                                      files_added=sum(1 for p in local.dir.rglob("*") if p.is_file()),
                                      rows_added=rows_of.get((local.project, local.run_id), {})))
        else:
            res.runs.append(_merge_run(root, staged_run, local, st.files, base, apply=True))
    return res

