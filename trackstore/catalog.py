"""Finding runs in a store: listing them with their effective status, and resolving references.

A run reference (what users type after ``trackstore show``) is a full run id, a unique prefix
of one, or ``project/name`` (``project/run_id`` works too). Ambiguity is an error that lists
the candidates, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import meta as _meta
from .errors import AmbiguousRunError, RunNotFoundError
from .layout import RunPaths, iter_run_dirs, resolve_root

RUN_COLUMNS = (
    "project", "run_id", "name", "status", "created_at", "ended_at", "updated_at", "last_step",
    "host", "user", "tags", "notes", "group", "job_type", "config", "summary", "exit_code", "error",
)


@dataclass
class RunInfo:
    """One run as readers see it: metadata from run.json plus the derived status."""

    paths: RunPaths
    meta: dict
    status: str
    writers: list[dict] = field(default_factory=list)

    @property
    def project(self) -> str:
        return self.paths.project

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def name(self) -> str:
        return self.meta.get("name") or self.run_id

    def row(self) -> dict[str, Any]:
        """The run as a flat record with the columns of the ``runs`` view."""
        m = self.meta
        return {
            "project": self.project,
            "run_id": self.run_id,
            "name": self.name,
            "status": self.status,
            "created_at": m.get("created_at"),
            "ended_at": m.get("ended_at"),
            "updated_at": m.get("updated_at") or m.get("created_at"),
            "last_step": m.get("last_step"),
            "host": m.get("host"),
            "user": m.get("user"),
            "tags": list(m.get("tags") or []),
            "notes": m.get("notes"),
            "group": m.get("group"),
            "job_type": m.get("job_type"),
            "config": m.get("config") or {},
            "summary": m.get("summary") or {},
            "exit_code": m.get("exit_code"),
            "error": m.get("error"),
            "write_errors": m.get("write_errors"),
        }


def load_run(paths: RunPaths) -> RunInfo | None:
    meta = _meta.read_run_json(paths)
    if meta is None:
        return None
    writers = _meta.read_writer_files(paths)
    return RunInfo(paths, meta, _meta.effective_status(meta, writers), writers)


def list_runs(root: str | Path | None = None, *, project: str | None = None,
              status: str | Iterable[str] | None = None) -> list[RunInfo]:
    """Every readable run under the store root, oldest first (run ids sort by creation time)."""
    root_path = resolve_root(root)
    wanted = {status} if isinstance(status, str) else (set(status) if status else None)
    out = []
    for proj, run_id, _dir in iter_run_dirs(root_path):
        if project is not None and proj != project:
            continue
        try:
            info = load_run(RunPaths(root_path, proj, run_id))
        except (OSError, ValueError):
            continue  # unreadable run.json: `trackstore doctor` reports it
        if info is None:
            continue
        if wanted and info.status not in wanted:
            continue
        out.append(info)
    out.sort(key=lambda r: (r.meta.get("created_at") or "", r.run_id))
    return out


def resolve_run(ref: str, root: str | Path | None = None) -> RunInfo:
    """Find exactly one run by id, unique id prefix, or ``project/name`` / ``project/run_id``."""
    runs = list_runs(root)
    exact = [r for r in runs if r.run_id == ref]
    if len(exact) == 1:
        return exact[0]
    candidates = exact
    if not candidates and "/" in ref:
        proj, _, rest = ref.partition("/")
        candidates = [r for r in runs if r.project == proj and (r.name == rest or r.run_id == rest)]
        if not candidates:
            candidates = [r for r in runs if r.project == proj and r.run_id.startswith(rest)]
    if not candidates:
        candidates = [r for r in runs if r.run_id.startswith(ref)]
    if not candidates:
        candidates = [r for r in runs if r.name == ref]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise RunNotFoundError(
            f"no run matches {ref!r} in {resolve_root(root)} (try `trackstore runs` to list them)"
        )
    listing = "\n".join(f"  {r.project}/{r.run_id}  {r.name}  {r.status}" for r in candidates[:20])
    more = f"\n  ... and {len(candidates) - 20} more" if len(candidates) > 20 else ""
    raise AmbiguousRunError(f"{ref!r} matches {len(candidates)} runs; use a longer id:\n{listing}{more}")


def resolve_runs(refs: Iterable[str], root: str | Path | None = None) -> list[RunInfo]:
    return [resolve_run(r, root) for r in refs]
