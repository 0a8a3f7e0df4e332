"""What the two verl modules share: which run a verl process writes to, and the patch marks.

:mod:`trackstore.integrations.verl` (the logger, validation generations) and
:mod:`trackstore.integrations.verl_trace` (the rollout trace backend) both import this module,
which imports neither of them (nor verl). What it keeps, per process:

* **Which run.** The process that builds verl's ``Tracking`` owns its run and registers it here
  (:func:`register_run`); samples and traces of the same project and experiment name go to that
  run. Any other process (an ``AgentLoopWorker``) joins, with the public
  ``trackstore.init(project, run_id=..., join=True)``, the run given by ``$TRACKSTORE_RUN_ID``,
  else the newest *running* run of that project and name, as an extra writer; it makes a run of
  its own only when there is none (:func:`run_for`). A joined run's status is the owner's to
  set: this process's ending never fails it.
* **Activity.** :data:`activity` counts the trajectories and sample batches being written. When
  the count falls to zero (a worker's batch is done) the buffered records go to disk now, and
  a worker's writer is recorded as ended (``Run.mark_idle``) until its next batch: Ray ends
  worker processes without running their exit handlers, so nothing may wait in memory for the
  end of the job, and the end of the job must not make the run look crashed.
* **Marks.** :func:`mark` tags a replacement of a verl function with its original, so patching
  is idempotent (:func:`marked`).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any

from ..store.vocab import RunStatus

BACKEND = "trackstore"
ENV_RUN_ID = "TRACKSTORE_RUN_ID"
MARK = "__trackstore_patched__"

log = logging.getLogger("trackstore.verl")

_lock = threading.RLock()
# Runs opened in this process, by (project, experiment name): the driver's own run, or the run a
# worker joined for its traces. Samples and traces of the same names go to the same run.
_runs: dict[tuple[str, str], Any] = {}
# The runs of _runs this process joined or made for traces (never the run Tracking owns).
_worker_runs: weakref.WeakSet[Any] = weakref.WeakSet()


# ---------------------------------------------------------------------- patch marks
def marked(fn: Any) -> bool:
    """Is ``fn`` a replacement made by :func:`mark` (so patching again is a no-op)?"""
    return bool(getattr(fn, MARK, False))


def mark(fn: Any, original: Any) -> Any:
    """Tag ``fn`` as trackstore's replacement of ``original`` (kept as ``__trackstore_original__``)."""
    setattr(fn, MARK, True)
    fn.__trackstore_original__ = original
    return fn


# ---------------------------------------------------------------------- which run
def register_run(project: str, experiment: str, run: Any) -> None:
    """Record ``run`` (opened by verl's ``Tracking`` in this process) as the run of (project, experiment)."""
    with _lock:
        _runs[(project, experiment)] = run


def run_for(project: str | None, experiment: str | None) -> Any:
    """The run samples or traces of (project, experiment) go to in this process (opened once)."""
    key = (project or "verl", experiment or "")
    with _lock:
        run = _runs.get(key)
        if run is not None and not run.finished:
            return run
        run = _join_or_create(*key)
        _runs[key] = run
        return run


def _join_or_create(project: str, experiment: str) -> Any:
    """Join the run the driver opened (by ``$TRACKSTORE_RUN_ID``, else the newest running run of
    that project and name) as an extra writer; create a run when there is none.

    Joining is ``trackstore.init(..., join=True)``: at exit this process finishes the run with
    status ``finished``, which never overrides the status the owning process records, and its
    SIGTERM (Ray stops its workers that way at the end of every job) does not fail the run.
    Between batches this writer is recorded as ended (see :data:`activity`), so a worker that
    Ray stops without running its exit handlers does not make the run look crashed.
    """
    import trackstore
    from trackstore.read import listing

    run_id = os.environ.get(ENV_RUN_ID) or None
    if run_id is None:
        running = [r for r in listing.list_runs(project=project, status=RunStatus.RUNNING) if not experiment or r.name == experiment]
        if running:
            run_id = running[-1].run_id
    if run_id is None:
        run = trackstore.init(project=project, name=experiment or None, tags=["verl"])
    else:
        run = trackstore.init(project=project, run_id=run_id, join=True)
    _worker_runs.add(run)
    return run


# ---------------------------------------------------------------------- activity
class Activity:
    """Counts the trajectories (and sample batches) being written in this process.

    When the count falls to zero (a worker's batch is done) the buffered records go to disk now:
    Ray ends worker processes without running their exit handlers, so whatever is still buffered
    when the job ends would otherwise be lost; this happens once per batch. A worker's writer is
    then recorded as ended until the next batch (``Run.mark_idle``): readers call a run whose
    writers all died without ending ``crashed``, and the worker's data is on disk at that point,
    so "ended" is the truth.
    """

    def __init__(self) -> None:
        self._n = 0
        self._lock = threading.Lock()

    def begin(self, run: Any) -> None:
        with self._lock:
            if self._n == 0 and run in _worker_runs:
                try:
                    run.mark_idle(False)
                except OSError as exc:  # the heartbeat rewrites the writer file anyway
                    log.warning("trackstore: writer file: %s", exc)
            self._n += 1

    def end(self, run: Any, flush: bool) -> None:
        with self._lock:
            self._n -= 1
            if self._n:
                return
            try:
                if flush:
                    run.flush()
                if run in _worker_runs and not run.finished:
                    run.mark_idle(True)
            except Exception as exc:
                log.warning("trackstore: flushing rollout traces: %s", exc)


activity = Activity()
