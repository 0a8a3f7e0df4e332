"""Sync several runs at once (``trackstore sync --jobs N``), each run under its own lock.

The promise:

* **One sender per (run, destination).** Before a run is synced, its lock
  (:func:`trackstore.store.locks.sync_run_lock_name`) is taken; two processes, or two workers,
  never send the same run to the same destination at once. Different runs, and one run to
  two destinations, proceed side by side. A run whose lock another live process holds is put
  aside and tried again once every other selected run is done; if it is still held then, it
  is *skipped* and says so (``error_kind`` ``locked``, exit code 6 when nothing else failed),
  or, with ``wait=True`` (``--wait``), waited for (up to ``lock_timeout`` seconds from the
  start, for ever when None). While a live process holds the whole-target lock of older
  versions (``sync-<target>``), every run counts as held.
* **Exactly the sequential result.** Each worker has its own adapter (adapters keep per-run
  state and their clients are not shared across threads) and its own engine; each run is
  replayed by :meth:`Engine.sync_one` exactly as in a sequential sync, its cursor its own
  file. The report lists the runs in selection order whatever order they finished in, so the
  summary and the exit code of ``--jobs N`` are those of ``--jobs 1``. After a run reports
  the target unreachable, no further run is started (they are "not attempted", as before).
* **An adapter is closed before the lock of the last run it opened is released**: clients
  that keep a run's session open until the next run or ``close()`` (wandb, SwanLab) finish
  it while the run is still theirs. A worker therefore holds the lock of the run it opened
  last until it opens another (``open_run`` first closes the previous session) or closes,
  never more than two; a run it did not open (up to date, or stopped before the target was
  touched) is released at once.
* **gc leaves the selection alone**: the sync declares every selected run
  (:func:`trackstore.store.locks.declare`) for its whole duration.
* **Workers are threads.** Replaying to a server is waiting on the network, which threads
  share well (measured: docs/performance.md, ``benchmarks/sync_parallel.py``). Some clients
  keep one run per process in globals (``wandb.init``, ``swanlab.init``): for those targets
  the number of workers is capped at 1 and the sync says so. A target's default comes from
  the same measurement: 8 for an MLflow server, 1 for a local MLflow store (sqlite or files;
  one writer at a time, and the work is CPU in this process). All of it is the adapter's
  :class:`~.adapter.Capabilities` (``default_jobs``, ``max_jobs`` and why, ``one_writer``,
  ``preimport``): this module never looks at a target's name. A destination that takes one
  writer at a time (MLflow's file store creates experiments non-atomically) is held whole by a
  sync (a second sync exits 6 at once, or waits with ``--wait``), which syncs one run at a time.
* **Or processes, for a target whose work is CPU here** (``Capabilities.processes``: the team
  store decodes, merges and encodes parts): threads of one process share one interpreter lock,
  so the workers are spread over up to one spawned process per core (:func:`worker_processes`),
  each a scheduler of its own with ``jobs / processes`` threads. This process then only
  coordinates (:func:`_run_processes`): it hands runs out a few at a time as each process asks,
  relays their progress to the caller's, gathers their results into the one report, and keeps
  the declaration fresh. Each process talks to it over pipes of its own and the flags they
  share are lock-free bytes, so a process killed mid-message holds up no other; one that dies
  fails only the runs it was handed. A worker process whose parent dies (SIGKILL) stops at its
  next run or batch, as if the parent had stopped it.

A KeyboardInterrupt (Ctrl-C, ``--watch`` stopping) while workers run stops the sync at once:
the batches in flight are settled on the next sync by the engine's in-doubt protocol, exactly
as after a SIGKILL, and the locks of this process are stale the moment it exits.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from trackstore.errors import LockHeldError, UsageError
from trackstore.read.listing import RunInfo, list_runs
from trackstore.store import locks

from .adapter import Adapter, TargetOptions
from .engine import Engine, Progress, RunResult, SyncOptions, SyncReport, unchanged_runs, up_to_date_result

if TYPE_CHECKING:
    from concurrent.futures import Executor

SESSION_REFRESH_S = 30.0  # the declaration's heartbeat (stale only after locks.STALE_AFTER_S elsewhere)
LOCK_BEAT_S = 2.0  # a run lock's heartbeat, at most this often (at each batch once this much time passed)
PROCESSES_ENV = "TRACKSTORE_SYNC_PROCESSES"  # the most processes a sync uses (see worker_processes)
PROCESS_MIN_RUNS = 50  # runs a worker process must have to be worth starting


def run_key(info: RunInfo) -> str:
    return f"{info.project}/{info.run_id}"


def effective_jobs(adapter: Adapter, requested: int | None) -> tuple[int, str | None]:
    """The number of workers for ``adapter``'s destination (``requested``, else the target's
    default, within what it takes: :class:`~.adapter.Capabilities`), and a sentence when
    ``requested`` had to be lowered."""
    if requested is not None and (not isinstance(requested, int) or requested < 1):
        raise UsageError(f"--jobs {requested}: the number of runs synced at once must be 1 or more")
    caps = adapter.capabilities
    jobs = caps.default_jobs if requested is None else requested
    cap = 1 if caps.one_writer else caps.max_jobs
    if cap is not None and jobs > cap:
        why = caps.one_writer or caps.why_max_jobs or f"the {adapter.name} target declares at most {cap}"
        note = (f"--jobs {jobs}: syncing {cap} {'run' if cap == 1 else 'runs'} at a time to {adapter.name} ({why}); "
                "start several trackstore sync processes to sync in parallel (each run has its own lock)")
        return cap, note if requested is not None else None
    return jobs, None


class ParallelProgress(Progress):
    """Progress events of a sync that may work on several runs at once: every event names its
    run. Calls are serialised (one at a time, from any thread). Any object with these methods
    will do (it is recognised by ``run_advanced``); a plain :class:`Progress` gets ``advanced``."""

    def begin(self, runs: int, jobs: int) -> None: ...
    def run_advanced(self, key: str, n: int) -> None: ...
    def run_held(self, run: RunInfo, holder: str, waiting: bool) -> None: ...


class _Shared:
    """The caller's progress, called under one lock; a plain :class:`Progress` gets plain events."""

    def __init__(self, progress: Progress | None):
        self.progress = progress or Progress()
        # duck-typed: the CLI's progress classes do not import this module (``--help`` stays fast)
        self.parallel = callable(getattr(self.progress, "run_advanced", None))
        self.lock = threading.Lock()

    def call(self, name: str, *args) -> None:
        with self.lock:
            getattr(self.progress, name)(*args)

    def advanced(self, key: str, n: int) -> None:
        with self.lock:
            if self.parallel:
                self.progress.run_advanced(key, n)  # type: ignore[attr-defined]
            else:
                self.progress.advanced(n)

    def held(self, info: RunInfo, holder: str, waiting: bool) -> None:
        with self.lock:
            if self.parallel:
                self.progress.run_held(info, holder, waiting)  # type: ignore[attr-defined]
            elif not waiting:
                self.progress.message(f"{run_key(info)}: another sync holds this run ({holder}); trying it again last")


class _WorkerProgress(Progress):
    """One worker's engine reports here; events are tagged with the run the worker is on."""

    def __init__(self, shared: _Shared):
        self.shared = shared
        self.key = ""
        self.lock: locks.Lock | None = None   # the run being synced
        self.held: locks.Lock | None = None   # the run synced before it (its session may still be open)
        self.opened = False                   # the engine went on to open the current run at the target

    def run_started(self, run: RunInfo, total: int) -> None:
        self.opened = True  # the engine calls adapter.open_run right after this
        self.shared.call("run_started", run, total)

    def advanced(self, n: int) -> None:
        self.shared.advanced(self.key, n)

    def run_ended(self, result: RunResult) -> None:
        self.shared.call("run_ended", result)

    def message(self, text: str) -> None:
        self.shared.call("message", text)


@dataclass
class _Item:
    index: int
    info: RunInfo
    tries: int = 0
    holder: str = ""


class _Stopped(Exception):
    pass


class _Flag(Protocol):
    """A threading.Event, or a flag every process of a sync sees (_SharedFlag)."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...


class _Scheduler:
    def __init__(self, root: Path, target: str, destination: str, options: TargetOptions, opts: SyncOptions,
                 runs: list[RunInfo], shared: _Shared, *, wait: bool, lock_timeout: float | None,
                 make_adapter: Callable[[], Adapter], first_adapter: Adapter, declaration: locks.Lock | None,
                 sends: Executor | None = None, check_unchanged: bool = True, stop: _Flag | None = None,
                 unreachable: _Flag | None = None, refill: Callable[[], list[_Item]] | None = None):
        self.root, self.target, self.destination = root, target, destination
        self.options, self.opts, self.shared = options, opts, shared
        self.wait, self.make_adapter = wait, make_adapter
        self.sends = sends  # the sending threads the workers' engines share (Capabilities.concurrent_sends)
        self.deadline = None if lock_timeout is None else time.monotonic() + lock_timeout
        self.runs = runs
        self.results: list[RunResult | None] = [None] * len(runs)
        # runs whose parts did not change since everything was acknowledged: no lock, no worker
        # (a worker process is handed runs its parent found changed)
        unchanged = unchanged_runs(root, target, destination, opts, runs) if check_unchanged else set()
        for i, info in enumerate(runs):
            if (info.project, info.run_id) in unchanged:
                self.results[i] = up_to_date_result(info)
        # a worker process is handed its runs a few at a time (``refill``), as its workers need them
        self.refill = refill
        self.queue: deque[_Item] = deque(_Item(i, info) for i, info in enumerate(runs)
                                         if self.results[i] is None and refill is None)
        self.deferred: deque[_Item] = deque()
        self.mutex = threading.Lock()
        # both shared with the other processes of a sync in processes (multiprocessing events)
        self.unreachable: _Flag = unreachable or threading.Event()
        self.stop: _Flag = stop or threading.Event()
        self.errors: list[BaseException] = []
        self._adapters = [first_adapter]
        self.declaration = declaration
        self._declared_at = time.monotonic()

    # ------------------------------------------------------------------ what to do next
    def _next(self) -> _Item | None:
        """The next run to try; None when nothing is left. Runs held by another process wait
        in ``deferred`` until every other run was taken."""
        while True:
            with self.mutex:
                if self.stop.is_set() or self.unreachable.is_set():
                    return None
                if self.queue:
                    return self.queue.popleft()
                if self.refill is not None:
                    self.queue.extend(self.refill())
                    if self.queue:
                        continue
                    self.refill = None  # nothing left to hand out
                if not self.deferred:
                    return None
                item = self.deferred.popleft()
                if item.tries == 1 or self._may_wait():
                    return item
                # still held after the retry (no --wait), or --wait timed out: skipped
                self.results[item.index] = self._held_result(item)
                continue

    def _may_wait(self) -> bool:
        return self.wait and (self.deadline is None or time.monotonic() < self.deadline)

    def _defer(self, item: _Item, holder: str) -> None:
        item.tries += 1
        item.holder = holder
        waiting = self._may_wait()
        if item.tries == 1 or waiting and item.tries % 25 == 0:  # say it once, then every ~5 s while waiting
            self.shared.held(item.info, holder, waiting)
        with self.mutex:
            self.deferred.append(item)
            only_held_left = not self.queue
        if only_held_left and item.tries > 1:
            time.sleep(locks.POLL_S)  # every run left is held elsewhere: poll, do not spin

    def _held_result(self, item: _Item) -> RunResult:
        info = item.info
        waited = " (--wait timed out)" if self.wait else "; --wait waits for it"
        res = RunResult(info.project, info.run_id, info.name, info.status,
                        error=f"skipped: another sync is sending this run to {self.destination} ({item.holder}){waited}",
                        error_kind="locked")
        self.shared.call("run_ended", res)
        return res

    # ------------------------------------------------------------------ one worker
    def work(self, adapter: Adapter | None = None) -> None:
        try:
            self._work(adapter)
        except _Stopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            with self.mutex:
                self.errors.append(exc)
            self.stop.set()
            if threading.current_thread() is threading.main_thread():
                raise

    def _work(self, adapter: Adapter | None) -> None:
        progress = _WorkerProgress(self.shared)
        engine: Engine | None = None
        held: locks.Lock | None = None  # the lock of the run this worker's adapter opened last
        current: locks.Lock | None = None
        try:
            while (item := self._next()) is not None:
                current = self._lock(item)
                if current is None:
                    continue
                if engine is None:
                    if adapter is None:
                        adapter = self.make_adapter()
                        with self.mutex:
                            self._adapters.append(adapter)
                    engine = Engine(self.root, adapter, self.opts, progress, on_batch=self._beat(progress),
                                    sends=self.sends)
                progress.key, progress.lock, progress.held = run_key(item.info), current, held
                progress.opened = False
                res = engine.sync_one(item.info)
                with self.mutex:
                    self.results[item.index] = res
                    if res.error_kind == "unreachable":
                        self.unreachable.set()  # the network is down: start no further run
                if progress.opened:
                    # opening this run closed the previous one's session (adapter.open_run does
                    # that first): the previous run is no longer this adapter's business
                    if held is not None:
                        held.release()
                    held = current
                else:
                    current.release()  # up to date, or stopped before the target was touched
                current = progress.lock = progress.held = None
        finally:
            try:
                if adapter is not None:
                    adapter.close()  # inside the run's lock: closing may still write the target
            finally:
                for lk in (current, held):
                    if lk is not None:
                        lk.release()

    def _lock(self, item: _Item) -> locks.Lock | None:
        legacy = locks.read_lock(self.root, locks.sync_target_lock_name(self.target))
        if legacy is not None and not legacy.stale:
            self._defer(item, legacy.describe())
            return None
        name = locks.sync_run_lock_name(self.target, self.destination, item.info.project, item.info.run_id)
        try:
            return locks.acquire(self.root, name, info={"runs": [run_key(item.info)], "destination": self.destination,
                                                        "target": self.target})
        except LockHeldError:
            state = locks.read_lock(self.root, name)
            self._defer(item, state.describe() if state is not None else "released just now")
            return None

    def _beat(self, progress: _WorkerProgress) -> Callable[[], None]:
        beaten: dict[int, float] = {}  # id(lock) -> when this worker last refreshed it

        def beat() -> None:
            now = time.monotonic()
            for lock in (progress.lock, progress.held):
                # a batch can take a millisecond (the team store): a heartbeat every few seconds
                # is what staleness (locks.STALE_AFTER_S) needs, and a worker frozen longer than
                # that still finds out at its next batch that its lock was taken over
                # a lock first seen here was taken just now (its heartbeat is its creation): its
                # first refresh is due LOCK_BEAT_S later, not at the run's first batch
                if lock is not None and now - beaten.setdefault(id(lock), now) >= LOCK_BEAT_S:
                    lock.refresh()
                    beaten[id(lock)] = now
            if self.declaration is not None and time.monotonic() - self._declared_at >= SESSION_REFRESH_S:
                with self.mutex:
                    if time.monotonic() - self._declared_at >= SESSION_REFRESH_S:
                        self._declared_at = time.monotonic()
                        self.declaration.refresh()
            if self.stop.is_set():
                raise _Stopped()  # an interrupt: leave this run's batch in doubt, as a kill would
        return beat

    # ------------------------------------------------------------------ the whole sync
    def report(self) -> SyncReport:
        report = SyncReport(self.target, self.destination, dry_run=False, unreachable=self.unreachable.is_set())
        for i, res in enumerate(self.results):
            if res is None:  # not started: the target went unreachable first
                info = self.runs[i]
                res = RunResult(info.project, info.run_id, info.name, info.status,
                                error="not attempted: target unreachable", error_kind="unreachable")
            report.runs.append(res)
        return report


def sync_runs(root: Path, opts: SyncOptions, runs: list[RunInfo], first: Adapter, *, jobs: int | None = None,
              progress: Progress | None = None, wait: bool = False, lock_timeout: float | None = None,
              processes: bool = False) -> SyncReport:
    """Sync ``runs`` with up to ``jobs`` workers (None: the target's default); see the module
    docstring. ``first`` is the first worker's adapter; the others are made like it
    (``type(first)(first.options)``). Every adapter is closed before this returns. With
    ``processes`` the workers may be spread over processes (:func:`worker_processes`)."""
    shared = _Shared(progress)
    target = first.name
    exclusive: locks.Lock | None = None
    try:
        destination = first.destination()
        n, note = effective_jobs(first, jobs)
        n = max(1, min(n, len(runs)))
        if note:
            shared.call("message", note)
        if first.capabilities.one_writer:  # one sync of this destination at a time
            exclusive = locks.acquire(root, locks.sync_run_lock_name(target, destination, "*", "*"), wait=wait,
                                      timeout=lock_timeout, info={"runs": [run_key(r) for r in runs],
                                                                  "destination": destination, "target": target})
        locks.remove_stale_declarations(root, f"{locks.sync_target_lock_name(target)}-session-")
        declaration = locks.declare(root, locks.sync_session_lock_name(target),
                                    {"runs": [run_key(r) for r in runs], "destination": destination,
                                     "target": target, "jobs": n})
    except BaseException:
        first.close()
        if exclusive is not None:
            exclusive.release()
        raise
    sends = None
    if first.capabilities.concurrent_sends > 1:  # one pool of sending threads for every worker
        from concurrent.futures import ThreadPoolExecutor

        sends = ThreadPoolExecutor(first.capabilities.concurrent_sends, thread_name_prefix="trackstore-send")
    try:
        sched = _Scheduler(root, target, destination, first.options, opts, runs, shared, wait=wait,
                           lock_timeout=lock_timeout, make_adapter=lambda: type(first)(first.options),
                           first_adapter=first, declaration=declaration, sends=sends)
        procs = worker_processes(first, n, len(sched.queue)) if processes else 1
        if shared.parallel:
            shared.call("begin", len(runs), n)
        if procs > 1:
            first.close()  # each process makes its own
            _run_processes(sched, type(first), n, procs)
        elif n == 1:
            sched.work(first)  # in this thread: an interrupt stops the run where it is, as always
        else:
            _run_threads(sched, first, n)
        if sched.errors:
            raise sched.errors[0]
        report = sched.report()
        report.processes = procs
        return report
    finally:
        if sends is not None:
            sends.shutdown(wait=False, cancel_futures=True)  # each engine waited for its own sends
        declaration.release()
        if exclusive is not None:
            exclusive.release()


def _run_threads(sched: _Scheduler, first: Adapter, n: int) -> None:
    import importlib

    for module in first.capabilities.preimport:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # the adapter says what is missing, in its own words
    threads = [threading.Thread(target=sched.work, args=(first if i == 0 else None,), daemon=True,
                                name=f"trackstore-sync-{i}") for i in range(n)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short joins: Ctrl-C and SIGTERM reach this thread at once
    except BaseException:
        sched.stop.set()  # workers stop at their next batch; their runs' batches stay in doubt
        raise


# ----------------------------------------------------------------------------- processes
def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_processes(adapter: Adapter, jobs: int, pending: int) -> int:
    """How many processes share ``jobs`` workers over ``pending`` runs: one per core, for a
    target that declares :attr:`~.adapter.Capabilities.processes`, when each has at least
    :data:`PROCESS_MIN_RUNS` runs (a process costs about 0.4 s of CPU to start: an interpreter,
    pyarrow, the target's client); else 1. ``$TRACKSTORE_SYNC_PROCESSES`` sets the most (1:
    threads only), whatever the runs."""
    if not adapter.capabilities.processes or jobs < 2 or pending < 2:
        return 1
    text = os.environ.get(PROCESSES_ENV, "").strip()
    if text:
        try:
            most = int(text)
        except ValueError:
            most = 0
        if most < 1:
            raise UsageError(f"{PROCESSES_ENV}={text}: the most processes a sync uses must be a whole number, 1 or more")
    else:
        most = min(cores(), pending // PROCESS_MIN_RUNS)
    return max(1, min(most, jobs, pending))


@dataclass(frozen=True)
class _RunRef:
    """A run named in a progress event from a worker process (its RunInfo stays there)."""

    key: str


class _Forward(_Shared):
    """A worker process's progress: every event goes to the parent, which calls the caller's."""

    def __init__(self, events, orphaned: _Orphaned):
        super().__init__(None)
        self.parallel = True
        self.events = events  # this process's end of its pipe to the parent
        self.orphaned = orphaned  # the parent is gone: nobody reads

    def put(self, event: tuple) -> None:
        if not self.orphaned.is_set():
            with self.lock, suppress(OSError):  # one message at a time on the pipe; a gone parent reads none
                self.events.send(event)

    def call(self, name: str, *args) -> None:
        self.put(("call", name, tuple(_RunRef(run_key(a)) if isinstance(a, RunInfo) else a for a in args)))

    def advanced(self, key: str, n: int) -> None:
        self.put(("advanced", key, n))

    def held(self, info: RunInfo, holder: str, waiting: bool) -> None:
        self.put(("held", run_key(info), holder, waiting))


def _portable(exc: BaseException | None) -> BaseException | None:
    """``exc`` as it can cross to the parent (pickled), or a RuntimeError saying what it was."""
    import pickle

    if exc is None:
        return None
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any exception that does not pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class _Orphaned:
    """Whether a worker process's parent is gone (killed): the process is then another's child."""

    def __init__(self) -> None:
        from multiprocessing import parent_process

        parent = parent_process()
        self.parent = parent.pid if parent is not None else os.getppid()

    def is_set(self) -> bool:
        return os.getppid() != self.parent  # a system call, no lock: asked at every run and batch


class _StopUnlessOrphaned:
    """A worker process's stop flag: the sync's, and set too once the parent is gone, so that
    the process stops at its next batch as if the parent had stopped it."""

    def __init__(self, stop: _Flag, orphaned: _Orphaned):
        self.stop, self.orphaned = stop, orphaned

    def is_set(self) -> bool:
        return self.stop.is_set() or self.orphaned.is_set()

    def set(self) -> None:
        self.stop.set()


def _process_main(root: Path, adapter_class: type[Adapter], options: TargetOptions, opts: SyncOptions,
                  target: str, destination: str, threads: int, events, orders, stop: _Flag, unreachable: _Flag,
                  wait: bool, lock_timeout: float | None) -> None:
    """One worker process of a sync (spawned by :func:`_run_processes`): syncs the runs the
    parent hands it (``orders``: lists of selection index and run key, asked for with
    ``("more",)`` as its ``threads`` workers need them; an empty list: no more) and sends the
    parent its progress and results through ``events``. Both are its ends of two pipes."""
    import signal

    # Ctrl-C reaches the parent, which stops this one (``stop``). The process began with SIGINT
    # ignored already (``_sigint_ignored``); this says so for a parent that could not do that.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    orphaned = _Orphaned()  # the parent is gone: nobody reads, and the runs stop
    stop = _StopUnlessOrphaned(stop, orphaned)
    forward = _Forward(events, orphaned)
    results: list[tuple[int, RunResult]] = []
    error: BaseException | None = None
    try:
        # the store's runs, not the selection made again: a filter such as --since could
        # answer differently a moment later; the parent's choice is the run keys it hands out
        runs = list_runs(root, project=opts.project)
        local = {run_key(info): i for i, info in enumerate(runs)}
        handed: dict[int, int] = {}  # index here -> index in the parent's selection

        def refill() -> list[_Item]:
            forward.put(("more",))
            try:
                order = orders.recv()
            except (EOFError, OSError):  # the parent is gone
                return []
            items = []
            for i, key in order:
                if key in local:
                    handed[local[key]] = i
                    items.append(_Item(local[key], runs[local[key]]))
                else:  # deleted between the parent's selection and this process's
                    project, _, run_id = key.partition("/")
                    results.append((i, RunResult(project, run_id, "", "", error="no longer in the store",
                                                 error_kind="error")))
            return items

        first = adapter_class(options)
        sends = None
        if first.capabilities.concurrent_sends > 1:
            from concurrent.futures import ThreadPoolExecutor

            sends = ThreadPoolExecutor(first.capabilities.concurrent_sends, thread_name_prefix="trackstore-send")
        try:
            sched = _Scheduler(root, target, destination, options, opts, runs, forward, wait=wait,
                               lock_timeout=lock_timeout, make_adapter=lambda: adapter_class(options),
                               first_adapter=first, declaration=None, sends=sends, check_unchanged=False,
                               stop=stop, unreachable=unreachable, refill=refill)
            if threads == 1:
                sched.work(first)
            else:
                _run_threads(sched, first, threads)
        finally:
            if sends is not None:
                sends.shutdown(wait=False, cancel_futures=True)
        if sched.errors:
            error = sched.errors[0]
        results += [(i, sched.results[here]) for here, i in handed.items()  # type: ignore[misc]
                    if sched.results[here] is not None]
    except BaseException as exc:  # noqa: BLE001 - the parent raises it
        error = exc
    forward.put(("done", results, _portable(error)))


class _SharedFlag:
    """A flag every process of a sync sees: one byte of shared memory, read and written without a
    lock (a process killed while holding a lock shared across processes, as
    ``multiprocessing.Event``'s, would stop the others for good)."""

    def __init__(self, ctx):
        self._value = ctx.RawValue("b", 0)

    def is_set(self) -> bool:
        return bool(self._value.value)

    def set(self) -> None:
        self._value.value = 1


@contextmanager
def _sigint_ignored():
    """SIGINT ignored while this process starts another, which inherits that across its exec:
    a Ctrl-C to the foreground group then cannot raise KeyboardInterrupt in the new interpreter
    while it is still starting (a traceback from its imports, even a fatal error from its
    initialisation), before :func:`_process_main` runs. A handler is not inherited, and the
    signal mask is not either (multiprocessing's spawn clears it), so ignoring is the one way.
    A Ctrl-C in those few milliseconds is lost to this process too: the user presses it again.
    Only the main thread can change a handler; elsewhere this does nothing."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or previous == signal.SIG_IGN:  # a handler not set from Python; or ignored already
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_processes(sched: _Scheduler, adapter_class: type[Adapter], jobs: int, procs: int) -> None:
    """Share ``sched``'s runs out to ``procs`` spawned processes of ``jobs / procs`` workers
    each, relay their progress, and gather their results into ``sched``. This process only
    coordinates: it hands the runs out a few at a time as each process asks (so none sits idle
    while another has many left), keeps the sync's declaration fresh, and stops the others
    when it is interrupted (they stop at their next batch, as threads do; then they are
    terminated). Each process has pipes of its own to this one, so none killed half-way through
    a message can hold up another; its end of the pipe closing tells that it ended."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")  # not fork: the target's client runs threads of its own
    pending = deque((it.index, run_key(it.info)) for it in sched.queue)
    sched.queue.clear()
    threads = -(-jobs // procs)
    stop, unreachable = _SharedFlag(ctx), _SharedFlag(ctx)
    sched.stop, sched.unreachable = stop, unreachable
    by_key = {run_key(info): info for info in sched.runs}
    children: list = []
    readers: dict = {}  # a process's events pipe -> its number
    orders: list = []   # the pipe each process's runs are handed out on
    handed: list[list[tuple[int, str]]] = [[] for _ in range(procs)]
    try:
        for k in range(procs):
            reader, writer = ctx.Pipe(duplex=False)
            their_orders, my_orders = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_process_main, name=f"trackstore-sync-process-{k}", daemon=True,
                                args=(sched.root, adapter_class, sched.options, sched.opts, sched.target,
                                      sched.destination, threads, writer, their_orders, stop, unreachable, sched.wait,
                                      None if sched.deadline is None else max(0.0, sched.deadline - time.monotonic())))
            children.append(child)
            readers[reader] = k
            orders.append(my_orders)
            with _sigint_ignored():
                child.start()
            writer.close()  # the child's copies are the only ones: its end closes when the child ends
            their_orders.close()
        reported: set[int] = set()
        while readers:
            for reader in wait(list(readers), timeout=0.2):
                k = readers[reader]
                try:
                    event = reader.recv()
                except (EOFError, OSError):  # the process ended: everything it sent was read before this
                    del readers[reader]
                    reader.close()
                    if k not in reported:
                        children[k].join()
                        _lost(sched, handed[k], children[k].exitcode)
                    continue
                if event[0] == "more":
                    n = 0 if stop.is_set() else max(1, min(2 * threads, len(pending) // (2 * procs)))
                    chunk = [pending.popleft() for _ in range(min(n, len(pending)))]
                    handed[k] += chunk
                    with suppress(OSError):  # it died meanwhile: its events pipe says so next
                        orders[k].send(chunk)
                elif event[0] == "call":
                    _, name, args = event
                    sched.shared.call(name, *(by_key[a.key] if isinstance(a, _RunRef) else a for a in args))
                elif event[0] == "advanced":
                    _, key, n = event
                    sched.shared.advanced(key, n)  # the caller's progress as it takes it (_Shared)
                elif event[0] == "held":
                    _, key, holder, waiting = event
                    sched.shared.held(by_key[key], holder, waiting)
                else:
                    _, results, error = event
                    reported.add(k)
                    for i, res in results:
                        sched.results[i] = res
                    if error is not None:
                        sched.errors.append(error)
                        stop.set()  # the others stop at their next batch, as a thread's error stops the rest
            _beat_declaration(sched)
    except BaseException:
        stop.set()  # the others stop at their next batch; their runs' batches stay in doubt
        raise
    finally:
        deadline = time.monotonic() + 2.0
        for child in children:
            child.join(max(0.0, deadline - time.monotonic()))
            if child.is_alive():
                child.terminate()  # as a kill: the engine's in-doubt protocol settles it next time
                child.join()
        for conn in [*readers, *orders]:
            conn.close()


def _beat_declaration(sched: _Scheduler) -> None:
    if sched.declaration is not None and time.monotonic() - sched._declared_at >= SESSION_REFRESH_S:
        sched._declared_at = time.monotonic()
        sched.declaration.refresh()


def _lost(sched: _Scheduler, shard: list[tuple[int, str]], exitcode: int | None) -> None:
    """The runs of a worker process that ended without its report (killed: the OOM killer, a
    signal): each is an error; the batches it had in flight are settled by the next sync."""
    for i, _ in shard:
        if sched.results[i] is None:
            info = sched.runs[i]
            res = RunResult(info.project, info.run_id, info.name, info.status,
                            error=f"the sync process sending this run ended unexpectedly (exit code {exitcode}); "
                                  "the next sync settles what it had in flight",
                            error_kind="error")
            sched.results[i] = res
            sched.shared.call("run_ended", res)


__all__ = ["ParallelProgress", "cores", "effective_jobs", "run_key", "sync_runs", "worker_processes"]
