"""Retention on a team store: ``trackstore gc --root s3://BUCKET/PREFIX`` (or a replica's path).

A replica (docs/team-store.md) has no sync state of its own: it *is* the copy. Its gc deletes
runs by age and project, with the guards that make sense there. What it promises:

* **Selection** as the local gc's (:mod:`trackstore.upkeep.gc`): ``--older-than`` (required:
  a replica is the team's record, nothing is deleted by default) on the run's ``ended_at``,
  ``--project``, ``--status`` (terminal statuses only), ``--keep-last N`` per project. The
  reasons a run is kept are :class:`~trackstore.store.vocab.KeepReason` codes, shown as the
  local gc shows them.
* **Guards**: a run whose replica ``run.json`` says ``running`` is kept (:attr:`KeepReason.LIVE`);
  so is one replicated within :data:`REPLICATING_GRACE_S` (a sync may be writing it:
  :attr:`KeepReason.BEING_REPLICATED`). ``--dry-run`` changes nothing.
* **Deletion order**: a run's part and artifact objects first, its ``run.json`` last, so a gc
  killed half-way leaves the run listed (and the next gc finishes it), and a plain reader's
  glob meanwhile sees fewer of that run's rows, never more. S3 has no atomic folder delete: a
  query that listed a part just before gc deleted it fails on that file and must be re-run
  (docs/team-store.md says when to schedule gc).
* The replica is reached through :mod:`trackstore.store.objects` only.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..errors import UsageError
from ..store.clock import parse_iso
from ..store.layout import PROJECT_PREFIX, RUN_FILE, RUN_PREFIX, run_key
from ..store.meta import replica_field
from ..store.objects import ObjectFolder
from ..store.vocab import ENDED_ORDER, TERMINAL, KeepReason

#: a run replicated less than this long ago is kept: a sync may still be writing its parts
REPLICATING_GRACE_S = 3600.0


@dataclass
class ReplicaRun:
    """One run of a replica, as gc sees it."""

    project: str
    run_id: str
    keys: list[str] = field(default_factory=list)  # every object of the run folder
    size: int = 0
    meta: dict = field(default_factory=dict)
    delete: bool = False
    reason: str = ""
    code: KeepReason | None = None

    @property
    def ended_at(self) -> str | None:
        return self.meta.get("ended_at")

    def row(self, now: float) -> dict:
        ended = parse_iso(self.ended_at)
        return {"action": "delete" if self.delete else "keep", "project": self.project, "run_id": self.run_id,
                "name": self.meta.get("name") or self.run_id, "status": self.meta.get("status"),
                "ended_at": self.ended_at, "age_days": None if ended is None else round((now - ended) / 86400, 1),
                "bytes": self.size, "reason": self.reason}

    def keep(self, code: KeepReason, **details) -> None:
        self.delete, self.code, self.reason = False, code, code.say(**details)


@dataclass
class ReplicaPlan:
    runs: list[ReplicaRun]
    created_at: float

    @property
    def delete(self) -> list[ReplicaRun]:
        return [r for r in self.runs if r.delete]

    @property
    def freed_bytes(self) -> int:
        return sum(r.size for r in self.delete)


def replica_runs(folder: ObjectFolder) -> list[ReplicaRun]:
    """Every run folder of the replica, with its objects, sizes and run.json (read in parallel)."""
    runs: dict[tuple[str, str], ReplicaRun] = {}
    for obj in folder.listing():
        head = obj.key.split("/", 2)
        if len(head) < 3 or not head[0].startswith(PROJECT_PREFIX) or not head[1].startswith(RUN_PREFIX):
            continue
        key = (head[0][len(PROJECT_PREFIX):], head[1][len(RUN_PREFIX):])
        run = runs.setdefault(key, ReplicaRun(*key))
        run.keys.append(obj.key)
        run.size += obj.size

    def read(run: ReplicaRun) -> None:
        data = folder.get(run_key(run.project, run.run_id) + RUN_FILE)
        try:
            meta = json.loads(data) if data is not None else {}
        except ValueError:
            meta = {}
        run.meta = meta if isinstance(meta, dict) else {}

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(read, runs.values()))
    return sorted(runs.values(), key=lambda r: (r.project, r.meta.get("created_at") or "", r.run_id))


def plan(folder: ObjectFolder, *, older_than_s: float | None, project: str | None = None,
         statuses: Iterable[str] = ENDED_ORDER, keep_last: int | None = None, now: float | None = None) -> ReplicaPlan:
    """Which runs of the replica to delete, and why the others are kept (see the module docstring)."""
    if older_than_s is None:
        raise UsageError("gc on a team store needs --older-than (a replica is the team's record: "
                         "nothing is deleted by default)")
    statuses = tuple(statuses)
    bad = [s for s in statuses if s not in TERMINAL]
    if bad:
        raise UsageError(f"--status {bad[0]}: gc deletes only ended runs ({', '.join(ENDED_ORDER)})")
    now = time.time() if now is None else now
    runs = replica_runs(folder)
    newest: dict[str, list[ReplicaRun]] = {}
    for r in runs:
        newest.setdefault(r.project, []).append(r)
    protected: set[int] = set()
    if keep_last:
        for group in newest.values():
            group.sort(key=lambda r: r.meta.get("created_at") or "", reverse=True)
            protected.update(id(r) for r in group[:keep_last])
    for r in runs:
        status = r.meta.get("status")
        ended = parse_iso(r.ended_at)
        replicated = parse_iso(replica_field(r.meta, "replicated_at"))
        if project is not None and r.project != project:
            r.keep(KeepReason.OTHER_PROJECT)
        elif status not in TERMINAL:
            r.keep(KeepReason.LIVE)
        elif status not in statuses:
            r.keep(KeepReason.STATUS_NOT_SELECTED, status=status)
        elif ended is None or now - ended < older_than_s:
            r.keep(KeepReason.NEWER, days=0.0 if ended is None else (now - ended) / 86400)
        elif id(r) in protected:
            r.keep(KeepReason.KEEP_LAST, keep_last=keep_last)
        elif replicated is not None and now - replicated < REPLICATING_GRACE_S:
            r.keep(KeepReason.BEING_REPLICATED, minutes=int((now - replicated) // 60))
        else:
            r.delete, r.reason = True, f"ended {(now - ended) / 86400:.1f} days ago"
    return ReplicaPlan(runs, now)


def execute(folder: ObjectFolder, plan: ReplicaPlan, on_deleted: Callable[[ReplicaRun], None] | None = None) -> int:
    """Delete the plan's runs, parts first and run.json last; the bytes freed."""
    freed = 0
    for r in plan.delete:
        run_json = run_key(r.project, r.run_id) + RUN_FILE
        folder.delete([k for k in r.keys if k != run_json])
        folder.delete([run_json])
        freed += r.size
        if on_deleted is not None:
            on_deleted(r)
    return freed


def describe_kept(runs: Iterable[ReplicaRun]) -> dict[str, int]:
    """Kept runs counted by the short form of their reason (as the local gc's summary)."""
    counts: dict[str, int] = {}
    for r in runs:
        if not r.delete and r.code is not None:
            what = r.code.summary.format(keep_last="N", status=r.meta.get("status")) \
                if "{" in r.code.summary else r.code.summary
            counts[what] = counts.get(what, 0) + 1
    return counts
