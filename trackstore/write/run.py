"""The run lifecycle: ``trackstore.init`` -> ``Run.log`` ... -> ``Run.finish``.

What a run promises training code:

* ``log`` is cheap (it appends to memory; see :mod:`trackstore.write.writer`) and raises only for the
  caller's own mistakes (a non-numeric value, a bad key), before anything is buffered.
* The run finishes however the process ends: ``finish()``, leaving a ``with`` block (an
  exception marks it ``failed`` with the error recorded), ``atexit``, an uncaught exception, or
  SIGTERM (flushed and marked ``failed``). After ``kill -9`` readers report it ``crashed``.
* ``run.json`` holds the metadata and is rewritten atomically; the automatic summary (last value
  of each metric) is merged with whatever the user sets on ``run.summary``.
* ``resume=True`` continues an existing run as a new attempt: steps continue after the largest
  step on disk, a new writer id guarantees no file is overwritten.
* ``join=True`` makes this process a helper writer of a run another process owns (rollout or
  data workers): it is resumed as above, and at exit it records only its own end, as
  ``finished``; an uncaught exception, ``sys.exit`` or SIGTERM in the helper never fails the
  owner's run. ``Run.mark_idle`` records such a writer as ended between batches of work.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterable, Mapping, TypeVar, cast

from ..errors import InvalidValueError, UsageError, WriteError
from ..store import meta as _meta
from ..store.clock import iso, ts_now
from ..store.host import environment_info, hostname, process_start_ticks
from ..store.layout import RunPaths, new_run_id, new_writer_id, resolve_root, run_paths
from ..store.names import validate_run_id
from ..store.notices import warn
from ..store.text import escape_surrogates
from ..store.values import INT64_MAX, as_step, json_safe, normalize, stored_as_is
from ..store.vocab import Kind, RunStatus
from . import endings
from .resume import close_dead_writers, max_step_on_disk
from .resume import joining as resume_claim
from .run_dicts import Config, Summary
from .writer import DEFAULT_FLUSH_INTERVAL, Writer

T = TypeVar("T")
_ATTEMPT_FIELDS = ("writer_id", "host", "pid", "started_at", "command")
_WRITER_START_TIMEOUT_S = 60.0


class Run:
    """One run being written by this process. Create it with :func:`trackstore.init`.

    It is the record sink (:class:`trackstore.records.sink.RecordSink`) that samples, traces and
    artifacts write through: :meth:`append`, :meth:`on_finish`, :meth:`record_state` and the
    identity properties are all they use of it.
    """

    def __init__(self, paths: RunPaths, meta: dict, *, flush_interval: float, first_step: int,
                 compact: bool = True):
        self.paths = paths
        self._compact = compact
        self.writer_id = new_writer_id()
        self._meta = meta
        self._known_keys: set[str] = set()
        self._warned_none: set[str] = set()
        self._step = first_step
        self._first_step = first_step
        self._finished = False
        self._done = threading.Event()  # set when finish() has completed (in whatever thread)
        self._forked = False
        self._failed_error: str | None = None
        self._dirty = True
        self._meta_lock = threading.Lock()
        self._config_updates: list[dict] = list(meta.get("config_updates", []))
        self.config = Config(self._config_changed, meta.get("config") or {})
        self.summary = Summary(self._mark_dirty, meta.get("summary_user") or {})
        self._histogram_type = _histogram_type()
        self._finish_callbacks: list[Callable[[], Any]] = []  # see on_finish
        self._record_states: dict[str, Any] = {}  # see record_state
        self._record_states_lock = threading.Lock()
        self._writer_info = {
            "writer_id": self.writer_id,
            "host": hostname(),
            "pid": os.getpid(),
            "pid_start": process_start_ticks(os.getpid()),
            "started_at": iso(time.time()),
            "command": list(sys.argv),
            "heartbeat_at": iso(time.time()),
            "status": RunStatus.RUNNING,
        }
        _meta.write_writer_file(paths, self._writer_info, durable=True)
        self._meta_parts = -1  # writer.parts_written when run.json was last written
        self._writer = Writer(paths, self.writer_id, flush_interval=flush_interval, on_tick=self._tick,
                              tick_interval=_meta.HEARTBEAT_INTERVAL_S, merge_parts=compact)

    # ------------------------------------------------------------------ identity
    @property
    def id(self) -> str:
        return self.paths.run_id

    run_id = id

    @property
    def project(self) -> str:
        return self.paths.project

    @property
    def name(self) -> str:
        return self._meta.get("name") or self.id

    @property
    def dir(self):
        return self.paths.dir

    @property
    def root(self):
        return self.paths.root

    @property
    def step(self) -> int:
        """The step the next ``log`` without an explicit step will use."""
        return self._step

    @property
    def tags(self) -> list[str]:
        return list(self._meta.get("tags") or [])

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def flush_interval(self) -> float:
        """Seconds between two flushes of this run's writer (``init(..., flush_interval=)``)."""
        return self._writer.flush_interval

    def __repr__(self) -> str:
        return f"<trackstore.Run {self.project}/{self.id} name={self.name!r}>"

    # ------------------------------------------------------------------ logging
    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
        """Record metrics at ``step`` (default: the run's counter, like wandb).

        Values: int, float, bool, numpy scalars, 0-d tensors, :class:`trackstore.Histogram`,
        :class:`trackstore.Image` or a list of images (any other type, ``Fraction`` and ``Decimal`` included, is refused: pass ``float(v)``);
        nested dicts flatten with ``/``; ``None`` values are skipped (warned once per key).
        Values are stored as float64 and steps as int64: ``step`` goes from ``-2**63`` to
        ``2**63-1``, and the counter stops at ``2**63-1``. With ``commit=False`` the step
        counter does not advance, so the next call without a step lands on the same step.
        Raises ``ValueError`` (:class:`InvalidValueError`) for a bad key, value or step (an
        int too large for a float64, a step beyond int64), naming it, before anything of the
        call is recorded; never raises for disk trouble.
        """
        if self._finished:
            raise UsageError(self._closed_message())
        if step is None:
            step = self._step
        if type(step) is not int or not -0x8000_0000_0000_0000 <= step <= 0x7FFF_FFFF_FFFF_FFFF:
            step = _as_step(step)  # converts, or refuses a step beyond int64
        # Fast path: a plain dict, every key seen before, every value a plain number
        # (``stored_as_is``: two C loops over the values). The dict's copy (one C call) is what
        # gets buffered, so the caller may reuse and mutate its dict. Everything else goes
        # through ``normalize``, which converts or names the bad key: a value is accepted or
        # refused the same way on both paths.
        values = None
        if type(data) is dict and self._known_keys.issuperset(data.keys()) and stored_as_is(data.values()):
            values = data.copy()
        if values is None:
            values, hists = normalize(data, self._known_keys, self._warned_none, self._histogram_type)
            if hists:
                self._log_records(hists, step)
        if values:
            self._writer.log_metrics(step, time.time(), values)
        if commit:  # the counter stops at the int64 maximum: it never holds a step the store cannot
            self._step = step + 1 if step != 0x7FFF_FFFF_FFFF_FFFF else step
        elif step > self._step:
            self._step = step

    def _log_records(self, records: Mapping[str, Any], step: int) -> None:
        """Histograms and images of one ``log`` call (every list checked before anything is kept)."""
        from ..records.histogram import Histogram
        from ..records.images import as_image_list, log_images

        images = {key: as_image_list(key, v) for key, v in records.items() if not isinstance(v, Histogram)}
        ts = ts_now()
        for key, hist in records.items():
            if isinstance(hist, Histogram):
                self._writer.append(Kind.HISTOGRAMS, hist.to_row(key=key, step=step, ts=ts))
        if images:
            log_images(self, images, step, ts)

    # ------------------------------------------------------------------ the record sink
    # What the record kinds (samples, traces, artifacts) use of a run: the members of
    # trackstore.records.sink.RecordSink, all public, so records never reach into a Run.
    def append(self, kind: str, row: dict) -> None:
        """Buffer one record of a non-metric kind (``samples``, ``spans``, ``artifacts``...).

        Raises :class:`UsageError` once the run is finished; never raises for disk trouble.
        """
        if self._finished:
            raise UsageError(self._closed_message())
        self._writer.append(kind, row)

    def on_finish(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` when this run finishes, just before it stops taking records.

        Callbacks run once, in registration order, in the thread that finishes the run (also
        at exit and on SIGTERM), while :meth:`append` still works: tracing writes the spans
        still open then. One that raises is reported as a warning; finishing goes on. A
        callback registered after the run finished is never called.
        """
        self._finish_callbacks.append(callback)

    def record_state(self, key: str, factory: Callable[[], T]) -> T:
        """Per-run state of a record kind: ``factory()`` on the first call with ``key``, the
        same object on every later call (thread-safe: ``factory`` runs under a lock, so it must not
        call ``record_state`` itself). It lives as long as this Run object."""
        with self._record_states_lock:
            try:
                return self._record_states[key]
            except KeyError:
                state = self._record_states[key] = factory()
                return state

    def mark_idle(self, idle: bool = True) -> None:
        """Record this process's writer of the run as ended (``idle=True``), or as running again
        (``idle=False``), without finishing anything.

        For a helper process (``init(..., join=True)``) that writes in batches and may be
        stopped between them without its exit handlers running (Ray stops its workers that way
        at the end of a job): readers call a run whose writers all died without ending
        ``crashed``, so a helper marks itself idle once a batch is on disk (call :meth:`flush`
        first: marking does not flush), and ``mark_idle(False)`` before it writes again. An
        idle writer never counts as alive: the last other writer to finish sets the run's
        status. No-op on a finished run; raises ``OSError`` if the writer file cannot be
        written (the heartbeat rewrites it every few seconds anyway).
        """
        if self._finished:
            return
        if idle:
            self._writer_info.update(status=RunStatus.FINISHED, ended_at=iso(time.time()))
        else:
            self._writer_info.update(status=RunStatus.RUNNING, ended_at=None)
        _meta.write_writer_file(self.paths, self._writer_info, durable=idle)

    def flush(self) -> bool:
        """Write everything buffered now (blocking). True if it all reached the disk."""
        with endings.signals_deferred():
            ok = self._writer.flush()
            try:
                self._write_meta(durable=True)
            except OSError:
                ok = False
            return ok

    # ------------------------------------------------------------------ metadata
    def _mark_dirty(self) -> None:
        self._dirty = True

    def _config_changed(self, changes: Mapping[str, Any], deleted: bool = False) -> None:
        now = iso(time.time())
        for k, v in changes.items():
            entry = {"at": now, "key": k, "value": v}
            if deleted:
                entry["deleted"] = True
            self._config_updates.append(entry)
        self._dirty = True

    def _log_system(self, values: dict[str, float]) -> None:
        """A system metrics sample (trackstore.write.system): at the step logged last (the first
        step before any), the counter unmoved, so it never makes a step of its own."""
        if not self._finished:
            try:
                self.log(values, step=self._step - 1 if self._step > self._first_step else self._step, commit=False)
            except UsageError:  # finished meanwhile: the sample is not needed
                pass

    def _system_opened(self, info: dict) -> None:
        with self._meta_lock:
            self._meta["system_metrics"] = info
        self._dirty = True

    def _tick(self) -> None:
        """Called by the writer thread every heartbeat interval: the heartbeat file, and run.json
        when something changed (new parts, config or summary), so a quiet run costs one tiny write."""
        self._writer_info["heartbeat_at"] = iso(time.time())
        _meta.write_writer_file(self.paths, self._writer_info)
        if self._dirty or self._writer.parts_written != self._meta_parts:
            self._write_meta(durable=False)

    def _write_meta(self, durable: bool, writers: list[dict] | None = None) -> None:
        """Merge this writer's view into run.json (read, merge, atomic rewrite).

        Several processes may write one run. Each merges what is on disk with its own values,
        so a concurrent rewrite by another process can at worst delay that process's newest
        values until its next rewrite. The last writer to finish passes every ``writers`` file
        (each holds that writer's final summary and step), so the final run.json has them all.
        """
        with self._meta_lock:
            on_disk = _meta.read_run_json(self.paths) or {}
            meta = dict(self._meta)
            if self._finished and meta.get("status") == RunStatus.RUNNING and on_disk.get("status") not in (None, RunStatus.RUNNING):
                meta.update(status=on_disk["status"], ended_at=on_disk.get("ended_at"))
            auto = dict(on_disk.get("summary_auto") or {})
            user = dict(on_disk.get("summary_user") or {})
            steps = [on_disk.get("last_step"), meta.get("last_step"), self._writer.max_step]
            for w in sorted(writers or [], key=lambda w: w.get("ended_at") or ""):
                if w.get("writer_id") != self.writer_id:
                    auto.update(w.get("summary_auto") or {})
                    user.update(w.get("summary_user") or {})
                    steps.append(w.get("last_step"))
            auto.update(self._writer.last_values)
            user.update(self.summary)
            # Several processes may write one run (ranks, resumed attempts): keep every
            # attempt any of them recorded, and the largest step any of them reached.
            attempts = {a.get("writer_id"): a for a in on_disk.get("attempts") or []}
            for w in writers if writers is not None else _meta.read_writer_files(self.paths):
                if w.get("writer_id") not in attempts:  # a writer whose own run.json update was raced
                    attempts[w.get("writer_id")] = {k: w.get(k) for k in _ATTEMPT_FIELDS}
            attempts.update({a.get("writer_id"): a for a in meta.get("attempts") or []})
            meta["attempts"] = sorted(attempts.values(), key=lambda a: a.get("started_at") or "")
            meta.update(
                config=dict(self.config),
                config_updates=self._config_updates,
                summary_auto=auto,
                summary_user=user,
                summary={**auto, **user},
                updated_at=iso(time.time()),
                heartbeat_at=iso(time.time()),
            )
            known = [s for s in steps if s is not None]
            if known:
                meta["last_step"] = max(known)
            parts = self._writer.parts_written
            _meta.write_run_json(self.paths, meta, durable=durable)
            self._meta = meta
            self._meta_parts = parts
            self._dirty = False

    # ------------------------------------------------------------------ finishing
    def finish(self, exit_code: int | None = None, *, status: str | None = None, error: str | None = None,
               compact: bool | None = None) -> None:
        """Flush everything and mark the run ended. Idempotent.

        ``status`` defaults to ``finished`` (``failed`` when ``exit_code`` is non-zero or an
        error was recorded). Raises :class:`WriteError` if data could not be written to disk
        even after retries (the message says how much); the run is ended either way.

        When other processes are still writing the same run, only this writer's end is
        recorded; the last writer to finish sets the run's status (see :mod:`trackstore.store.meta`).

        The last writer then merges the run's part files into one per kind, which is what keeps
        queries over many finished runs fast; ``compact`` (default: the ``compact`` given to
        :func:`init`) turns that off for this call. It is skipped when a sync, gc or other
        writer is busy with the run, and never raises (see
        :func:`trackstore.store.merge.compact_finished_run`).

        A run some of whose rows could not be stored (the disk failed until the end, a value
        that could not be converted) ends ``failed`` with ``write_errors`` saying what was lost.
        """
        with endings.signals_deferred():
            if self._finished:
                if threading.current_thread() is threading.main_thread():
                    self._done.wait(60)  # another thread is finishing it: let that complete first
                return
            error = error or self._failed_error
            if status is None:
                status = RunStatus.FAILED if (error or (exit_code not in (None, 0))) else RunStatus.FINISHED
            if status not in _meta.STATUSES:
                raise UsageError(f"status must be one of {', '.join(_meta.STATUSES)}, got {status!r}")
            self._run_finish_callbacks()  # e.g. spans still open now are kept, as 'unfinished'
            self._finished = True
            try:
                report = self._end(status, exit_code, error, self._compact if compact is None else bool(compact))
            finally:
                self._done.set()
                endings.live_runs.discard(self)
                endings.joined_runs.discard(self)
                if endings.current is self:
                    endings.current = None
        if not report.ok:
            raise WriteError(f"run {self.id}: {report.describe()}")

    def _run_finish_callbacks(self) -> None:
        callbacks, self._finish_callbacks = self._finish_callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:  # finishing must go on whatever happens here
                warn(f"run {self.id}: a finish callback failed ({exc!r}); the run is finished anyway")

    def _end(self, status: str, exit_code: int | None, error: str | None, compact: bool = True):
        report = self._writer.close()
        if not report.ok:  # a run missing rows never looks complete
            if status == RunStatus.FINISHED:
                status = RunStatus.FAILED
            error = error or f"some data could not be stored: {report.describe()}"
        now = time.time()
        self._writer_info.update(status=status, ended_at=iso(now), heartbeat_at=iso(now))
        if error:
            self._writer_info["error"] = error
        if exit_code is not None:
            self._writer_info["exit_code"] = int(exit_code)
        if not report.ok:
            self._writer_info["write_errors"] = report.describe()
        self._writer_info.update(summary_auto=dict(self._writer.last_values), summary_user=dict(self.summary),
                                 last_step=self._writer.max_step)
        try:
            # Our end goes on disk before we look at the others: of two writers finishing at
            # the same moment, at least one then sees the other ended and sets the run status.
            _meta.write_writer_file(self.paths, self._writer_info, durable=True)
            writers = _meta.read_writer_files(self.paths)
            last = not any(w.get("writer_id") != self.writer_id and _meta.writer_alive(w) for w in writers)
            if last:
                final = _meta.ended_status(writers) or status
                self._meta.update(status=final, ended_at=iso(now))
                errors = [w["error"] for w in writers if w.get("error") and w.get("status") == RunStatus.FAILED]
                if error or errors:
                    self._meta["error"] = error or errors[-1]
                if exit_code is not None:
                    self._meta["exit_code"] = int(exit_code)
                if not report.ok:
                    self._meta["write_errors"] = report.describe()
                self._write_meta(durable=True, writers=writers)
            # Otherwise run.json is left to the writers still running: a rewrite now could race
            # the last one's final merge. Our end, summary and errors are in our writer file.
        except OSError as exc:
            report.last_error = report.last_error or str(exc)
            if report.ok:
                report.unwritten_rows["run.json"] = 1
            last = False
        if last and compact and report.ok:
            self._merge_parts_at_end()
        return report

    def _merge_parts_at_end(self) -> None:
        """Merge the finished run's part files; a failure only costs query speed, so it warns."""
        from ..store.merge import compact_finished_run

        try:
            compact_finished_run(self.paths)
        except Exception as exc:  # the run is complete on disk either way: never fail finish()
            warn(f"run {self.id} is finished and complete, but merging its part files failed ({exc}); "
                 "queries still see every row. `trackstore compact` retries it.")

    def _closed_message(self) -> str:
        if self._forked:
            return (f"run {self.id} belongs to process {self._writer_info['pid']}; this process is a fork of it "
                    f"and cannot write to it (call trackstore.init({self.project!r}, run_id={self.id!r}, "
                    "resume=True) here to write as another writer of the same run)")
        return f"run {self.id} is finished; start a new run or resume it to log more"

    def _forked_copy(self) -> None:
        """In a forked child: this object is a copy of the parent's run, whose writer thread did
        not survive the fork. It must never flush (it would rewrite the parent's part files
        with the parent's writer id) nor end the run (the parent is still writing it)."""
        self._forked = True
        self._finished = True
        self._done.set()

    def _fail(self, error: str) -> None:
        self._failed_error = error

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()
        else:
            err = "".join(traceback.format_exception_only(exc_type, exc)).strip()
            self.finish(status=RunStatus.FAILED, error=err, exit_code=1)

    # ------------------------------------------------------------------ other record kinds
    # Each kind lives in its own module, imported on first use so `import trackstore` stays cheap.
    def log_samples(self, rows: Iterable[Any], step: int | None = None, split: str = "val", **kw: Any) -> int:
        """Record text generations (dicts with input/output/score, or (input, output, score) tuples)."""
        from ..records.samples import log_samples

        return log_samples(self, rows, step=step, split=split, **kw)

    def trace(self, step: int | None = None, sample_index: int | None = None, rollout_n: int | None = None,
              name: str = "episode", **attrs: Any):
        """Open one trajectory (a span tree); use as a context manager. See :mod:`trackstore.records.trace`."""
        from ..records.trace import Trace

        return Trace(self, step=step, sample_index=sample_index, rollout_n=rollout_n, name=name, **attrs)

    def log_artifact(self, path: str | os.PathLike, name: str | None = None, type: str = "model",
                     aliases: Iterable[str] | None = None, metadata: Mapping[str, Any] | None = None, **kw: Any):
        """Snapshot a file or folder into the run's artifacts (content-addressed versions)."""
        from ..records.artifacts import log_artifact

        return log_artifact(self, path, name=name, type=type, aliases=aliases, metadata=metadata, **kw)

    def log_checkpoint(self, path: str | os.PathLike, step: int | None = None, **kw: Any):
        """A checkpoint as the next version of ``model-<run id>``, by reference, aliases ``latest``
        and ``step-N``, ``metrics=`` as metadata (:func:`trackstore.records.artifacts.log_checkpoint`)."""
        from ..records.artifacts import log_checkpoint

        return log_checkpoint(self, path, step, **kw)

    def alias_artifact(self, name: str, version: Any, alias: str):
        """Move ``alias`` (``"best"``...) to ``version`` of artifact ``name`` (one version holds it)."""
        from ..records.artifacts import alias_artifact

        return alias_artifact(self, name, version, alias)


def _histogram_type() -> tuple[type, ...]:
    """The record types ``log`` takes as values besides numbers (histograms, images)."""
    from ..records.histogram import Histogram
    from ..records.images import Image

    return (Histogram, Image)


def _as_step(step: Any) -> int:
    """A step given by the caller as an int64, or :class:`InvalidValueError` (see :func:`values.as_step`)."""
    return as_step(step)


# ---------------------------------------------------------------------- init and module API
def init(
    project: str,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    tags: Iterable[str] | None = None,
    notes: str | None = None,
    *,
    root: str | os.PathLike | None = None,
    run_id: str | None = None,
    resume: bool = False,
    join: bool = False,
    flush_interval: float = DEFAULT_FLUSH_INTERVAL,
    group: str | None = None,
    job_type: str | None = None,
    compact: bool | None = None,
    system_metrics: bool | None = None,
    system_metrics_interval: float | None = None,
) -> Run:
    """Start (or with ``resume=True`` continue) a run and make it the current run.

    ``run_id`` defaults to a new time-sortable id. With ``resume=True`` and an existing
    ``run_id`` the run continues as a new attempt (config keys given here are merged in); with
    ``resume=True`` and an unknown id a new run with that id is created. Without ``resume``, an
    existing ``run_id`` is an error (nothing is overwritten). Names are validated before
    anything touches the disk; free text holding lone surrogates (a non-UTF-8 ``sys.argv``
    or working directory) is stored escaped (docs/format.md, "Text that is not valid
    Unicode"). If init fails after creating the run folder, it removes the folder again: a
    run folder never lacks run.json.

    Resuming is safe against a ``trackstore gc`` deleting the run at the same moment: the run
    is either kept by gc and continued here, or (deleted before this process got to it) started
    afresh as a new run with the same id, with a warning. Only when gc is deleting this very
    run does init wait, for gc's verdict (milliseconds; :class:`LockHeldError` after 60 s). A
    new run pays nothing for this. See :mod:`trackstore.upkeep.gc`.

    ``join=True`` (needs ``run_id``) joins the run as a *helper* writer, for processes that
    add records to a run another process owns (rollout workers writing traces, data workers):
    the run is resumed as with ``resume=True`` (a new writer id; an unknown id creates the
    run), and this process's ending never decides how the run ended. At exit the joined run is
    finished with status ``finished`` (its data flushed, its writer recorded as ended); an
    uncaught exception, ``sys.exit(n)`` or SIGTERM in this process does not mark it ``failed``
    (SIGTERM leaves it to the owner: what was not flushed is lost, so flush after each batch).
    The run's status is set by the last of its writers to finish, as always, so the owner's
    ``failed`` is never overwritten. :meth:`Run.mark_idle` records a helper as ended between
    batches, for helpers stopped without running their exit handlers.

    ``compact`` (default on, off with ``TRACKSTORE_COMPACT=0``): keep the run's part files
    few. The writer merges its own files as it goes (:mod:`trackstore.write.rolling`) and the last
    writer merges what is left when the run finishes (see :meth:`Run.finish`). Off, every
    flush stays its own file until ``trackstore compact`` (say, for rsync-friendly stores).

    ``system_metrics`` (default on, off with ``TRACKSTORE_SYSTEM_METRICS=0``; never for a
    ``join``): sample CPU, memory, disk, network and GPUs every ``system_metrics_interval``
    seconds (default 15, or ``TRACKSTORE_SYSTEM_METRICS_INTERVAL``) into metrics under
    ``system/`` (:mod:`trackstore.write.system`).
    """
    if join:
        if run_id is None:
            raise UsageError("init(join=True) needs the run_id of the run to join")
        resume = True
    if run_id is not None:
        validate_run_id(run_id)
    paths = run_paths(resolve_root(root), project, run_id or new_run_id())
    if name is not None and not isinstance(name, str):
        raise InvalidValueError(f"run name must be a string, got {type(name).__name__}")
    if isinstance(flush_interval, bool) or not isinstance(flush_interval, (int, float)) or not flush_interval > 0:
        raise InvalidValueError(f"flush_interval must be a number of seconds > 0, got {flush_interval!r}")
    if system_metrics_interval is not None and (isinstance(system_metrics_interval, bool) or not isinstance(
            system_metrics_interval, (int, float)) or not system_metrics_interval > 0):
        raise InvalidValueError(f"system_metrics_interval must be a number of seconds > 0, got {system_metrics_interval!r}")
    tag_list = _tags(tags)
    # Free text is stored escaped (trackstore.store.text); the run's names that are paths were
    # validated above. Escaped here, the Run holds exactly what run.json holds.
    name, notes, group, job_type = (None if t is None else escape_surrogates(t) if isinstance(t, str) else t
                                    for t in (name, notes, group, job_type))
    # A resume claims the run folder before it reads it: see resume.claim_existing_run.
    with resume_claim(paths, resume):
        now = time.time()
        existing = _meta.read_run_json(paths) if paths.run_file.exists() else None
        if paths.dir.exists() and existing is None and any(paths.dir.iterdir()):
            if not resume:
                raise UsageError(f"{paths.dir} exists but has no readable run.json; run `trackstore doctor`")
        if existing is not None and not resume:
            raise UsageError(
                f"run {paths.run_id} already exists in project {paths.project!r}; pass resume=True to "
                "continue it, or choose another run_id"
            )
        env = environment_info()
        if existing is not None:
            meta = dict(existing)
            attempts = list(meta.get("attempts") or [])
            cfg = dict(meta.get("config") or {})
            cfg.update(json_safe(dict(config or {})))
            meta.update(status=RunStatus.RUNNING, ended_at=None, config=cfg, resumed_at=iso(now))
            meta.pop("error", None)
            meta.pop("exit_code", None)
            if name is not None:
                meta["name"] = name
            if tags is not None:
                old_tags = list(meta.get("tags") or [])
                meta["tags"] = old_tags + [t for t in tag_list if t not in old_tags]
            if notes is not None:
                meta["notes"] = notes
            close_dead_writers(paths, now)
            first_step = min(max_step_on_disk(paths, meta) + 1, INT64_MAX)  # the counter stops at int64's top
        else:
            attempts = []
            meta = {
                "format_version": _meta.META_VERSION,
                "project": paths.project,
                "run_id": paths.run_id,
                "name": name or paths.run_id,
                "status": RunStatus.RUNNING,
                "created_at": iso(now),
                "ended_at": None,
                **env,
                "config": json_safe(dict(config or {})),
                "tags": tag_list,
                "notes": notes,
                "group": group,
                "job_type": job_type,
                "summary": {},
            }
            first_step = 0
        if group is not None:
            meta["group"] = group
        if job_type is not None:
            meta["job_type"] = job_type
        if compact is None:
            from .rolling import compact_default

            compact = compact_default()
        created = not paths.dir.exists()
        paths.dir.mkdir(parents=True, exist_ok=True)
        run = None
        try:
            run = Run(paths, meta, flush_interval=flush_interval, first_step=first_step, compact=bool(compact))
            attempts.append({k: run._writer_info.get(k) for k in _ATTEMPT_FIELDS})
            run._meta["attempts"] = attempts
            run._write_meta(durable=True)
        except BaseException:
            _undo_new_run(paths, run, created)
            raise
    (endings.joined_runs if join else endings.live_runs).add(run)
    endings.install_process_hooks()
    endings.current = run
    from . import system

    if not join and (system.enabled_default() if system_metrics is None else system_metrics):
        interval = system.interval_default() if system_metrics_interval is None else float(system_metrics_interval)
        sampler = system.SystemSampler(run._log_system, interval=interval, disk_path=str(paths.dir),
                                       on_open=run._system_opened)
        run.on_finish(sampler.stop)  # before the run stops taking rows, at every ending
        sampler.start()
    # The writer thread has been loading pyarrow meanwhile; wait for it (about 0.3 s, once), so
    # that the first flush comes flush_interval from now and nothing is imported at exit.
    run._writer.ready.wait(_WRITER_START_TIMEOUT_S)
    return run


def _undo_new_run(paths: RunPaths, run: Run | None, created: bool) -> None:
    """init failed before run.json existed: stop the writer thread and, if this init created the
    run folder, remove it, so that no run folder is ever left without run.json."""
    if run is not None:
        run._finished = True
        run._done.set()
        try:
            run._writer.close(retries=0, timeout=5.0)
        except Exception:
            pass
    if created and not paths.run_file.exists():
        import shutil

        shutil.rmtree(paths.dir, ignore_errors=True)


def _tags(tags: Iterable[str] | None) -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = [tags]
    out = []
    for t in tags:
        if not isinstance(t, str) or not t:
            raise InvalidValueError(f"tags must be non-empty strings, got {t!r}")
        t = escape_surrogates(t)
        if t not in out:
            out.append(t)
    return out


def current_run() -> Run | None:
    """The run started last by :func:`init` in this process and not yet finished."""
    return cast("Run | None", endings.current)


def log(data: Mapping[str, Any], step: int | None = None, commit: bool = True) -> None:
    """``trackstore.log(...)``: log to the current run (like ``wandb.log``)."""
    run = current_run()
    if run is None:
        raise UsageError("no active run: call trackstore.init(project=...) first")
    run.log(data, step=step, commit=commit)


def finish(exit_code: int | None = None, **kw: Any) -> None:
    """``trackstore.finish()``: finish the current run (no-op without one)."""
    run = current_run()
    if run is not None:
        run.finish(exit_code, **kw)
