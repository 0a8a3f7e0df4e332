"""Resuming a run: what ``init(resume=True)`` and ``init(join=True)`` do before writing again.

* :func:`joining` holds a claim on the run folder while init reads it, so a ``trackstore gc``
  deleting the run at the same moment either keeps it or is seen to have deleted it (then the
  run starts afresh with the same id, with a warning); a new run needs no claim.
* :func:`close_dead_writers` marks writers that died without ending as ``crashed`` and deletes
  only the temp files such dead writers left (never a live writer's, never a fresh one's).
* :func:`max_step_on_disk` finds where the step counter continues, from Parquet footers.
"""

from __future__ import annotations

from contextlib import contextmanager

from ..errors import UsageError
from ..store import meta as _meta
from ..store.atomic import is_temp_file
from ..store.clock import iso
from ..store.layout import PART_SUFFIX, RUN_FILE, RunPaths
from ..store.notices import warn
from ..store.vocab import KINDS, Kind, RunStatus

TEMP_GRACE_S = 60.0  # only temp files older than this are a dead writer's leftovers


@contextmanager
def joining(paths: RunPaths, resume: bool):
    """While init resumes a run, hold a claim on its folder (removed once the run's own writer
    file exists, or if init fails). A new run needs none: no gc can have planned its deletion."""
    claim = claim_existing_run(paths) if resume else None
    try:
        yield
    finally:
        if claim is not None:
            from ..store.run_claims import release_claim

            release_claim(claim)


def claim_existing_run(paths: RunPaths):
    """Make sure no ``trackstore gc`` deletes the run folder this process is about to join.

    Write first, then check: a *claim* (:func:`trackstore.store.run_claims.claim_run`, which gc counts as
    a live writer) goes into the folder, THEN gc's announcement that it is deleting this run is
    looked for and, if present, its verdict awaited (``LockHeldError`` after
    :data:`trackstore.store.run_claims.DELETION_WAIT_S`). gc
    announces before its last re-check, so either gc sees the claim and keeps the run, or this
    sees the announcement. The claim is the proof: still in place afterwards, the folder is ours
    to write; moved away with the folder, the run was deleted and None is returned (init then
    starts it afresh, warning). Nothing here creates the run folder, so a folder gc moved is
    never silently recreated. Returns the claim file, or None when there is no folder (a run id
    not in the store: one failed ``mkdir`` and one lock file read).
    """
    from ..store import run_claims

    claim = None
    waited = False
    for _attempt in range(100):  # more than a couple only if the folder keeps coming and going
        if claim is None:
            claim = run_claims.claim_run(paths)  # None: no folder (a new id, or a run gc is deleting)
        try:
            waited = run_claims.wait_for_deletion_verdict(paths.root, paths.project, paths.run_id) or waited
        except BaseException:
            if claim is not None:
                run_claims.release_claim(claim)
            raise
        if claim is not None and claim.exists():
            return claim
        if claim is None and paths.dir.exists():
            continue  # the folder is there now (gc put it back, or another process created it)
        break  # our claim left with the folder, or there is none: nothing to join
    else:
        raise UsageError(f"run {paths.project}/{paths.run_id}: its folder keeps appearing and disappearing "
                         f"({paths.dir}); check what else writes or deletes it, then resume again")
    if claim is None and not waited:
        return None  # an unknown run id: init creates it, as documented
    warn(f"run {paths.project}/{paths.run_id} was deleted by `trackstore gc` while this process was resuming "
         "it; it starts again as a new run with the same id (what gc deleted is not in this store any more)")
    return None


def close_dead_writers(paths: RunPaths, now: float) -> None:
    """On resume: mark writers that died without finishing as ``crashed`` (a superseded attempt,
    see :func:`trackstore.store.meta.ended_status`) and delete the temp files they left mid-write.
    Claims of resumes that died while joining (:func:`claim_existing_run`) are deleted.

    Temp files of live writers (other ranks writing this run now) are never touched.
    """
    writers = _meta.read_writer_files(paths)
    alive = {w.get("writer_id") for w in writers if _meta.writer_alive(w)}
    for w in writers:
        if w.get("status", RunStatus.RUNNING) == RunStatus.RUNNING and w.get("writer_id") not in alive:
            try:
                _meta.write_writer_file(paths, {**w, "status": RunStatus.CRASHED, "closed_at": iso(now)}, durable=True)
            except (OSError, ValueError):  # ValueError: a record whose writer id is not a file name
                pass
    from ..store.run_claims import dead_claims, release_claim

    for claim in dead_claims(paths):
        release_claim(claim)
    dirs = [paths.dir, paths.writers_dir, *(paths.kind_dir(k) for k in KINDS)]
    for d in dirs:
        try:
            entries = list(d.iterdir())
        except OSError:
            continue
        for p in entries:
            if not is_temp_file(p):
                continue
            try:  # a temp file lives milliseconds; a fresh one may belong to a writer starting now
                if now - p.stat().st_mtime < TEMP_GRACE_S:
                    continue
            except OSError:
                continue
            owner = _temp_owner(p.name)
            if (owner is None and not alive) or (owner is not None and owner not in alive):
                try:
                    p.unlink()
                except OSError:
                    pass




def _temp_owner(name: str) -> str | None:
    """The writer id in a temp file's name (``.part-<writer>-<seq>.parquet.<hex>.tmp`` or
    ``.<writer>.json.<hex>.tmp``); None for run.json's, which any writer may be writing."""
    base = name[1:].rsplit(".", 2)[0]  # drop the leading '.' and '.<hex>.tmp'
    if base.startswith("part-") and base.endswith(PART_SUFFIX):
        return base[len("part-"):-len(PART_SUFFIX)].rsplit("-", 1)[0]
    if base.endswith(".json") and base != RUN_FILE:
        return base[:-len(".json")]
    return None


def max_step_on_disk(paths: RunPaths, meta: dict) -> int:
    """Largest step of any metric already stored (from Parquet footers; cheap)."""
    best = meta.get("last_step")
    best = -1 if best is None else int(best)
    parts = paths.parts(Kind.METRICS)
    if parts:
        import pyarrow.parquet as pq

        for p in parts:
            try:
                md = pq.ParquetFile(p).metadata
                idx = md.schema.names.index("step")
                for rg in range(md.num_row_groups):
                    st = md.row_group(rg).column(idx).statistics
                    if st is not None and st.has_min_max:
                        best = max(best, int(st.max))
            except Exception:
                continue  # a damaged part is doctor's business; never block a resume
    return best
