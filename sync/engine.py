"""The replay engine: the same exactly-once protocol for every target.

For each run, in order:

1. ``adapter.open_run`` finds or creates the remote run (deterministic identity).
2. If the cursor holds an *in-doubt* batch (sent, acknowledgement not recorded: the previous
   sync was killed or its connection cut mid-request), ``adapter.reconcile`` asks the target
   which of its rows it already holds, and only the rest is sent.
3. ``adapter.sync_metadata`` pushes config, tags and notes (idempotent).
4. For each record kind, the rows not yet acknowledged are read in replay order
   (:func:`trackstore.read.reader.read_kind`) and sent in batches. Before each batch the cursor
   records it as in doubt, durably; after the target acknowledges it the rows join the
   cursor's acknowledged set in memory, and that acknowledgement is written with the next
   batch's in-doubt mark (or the run's last save): one durable write per batch. Every write is
   atomic, so at every instant the stored cursor has at most one batch in doubt, the one sent
   last or being sent: a crash anywhere is repaired by step 2 on the next run (a batch whose
   acknowledgement was not written yet is reconciled, found at the target, and not sent again).
   A target whose reconcile reads what it holds of a kind at once, whatever the batch
   (:attr:`~.adapter.Capabilities.doubt_per_run`: the team store) has every pending row of the
   run marked in doubt in one durable write before its first batch, each acknowledgement taking
   its batch's rows out of that doubt, and the run's last save storing them all: two durable
   writes a run, whatever its batches (a crash is repaired the same way, every kind of the
   doubt reconciled). Such a target may take the run's batches at once
   (:attr:`~.adapter.Capabilities.concurrent_sends`): they are sent on threads the sync's
   workers share, and each answer is recorded in the engine's thread, in order; the first error
   stops the batches not started and is raised when the started ones have ended.
5. When the run has ended, ``adapter.finish_run`` pushes summary and final status.

Nothing is skipped silently: a part file that cannot be read and holds rows the target lacks
stops that run before anything of it is sent (:mod:`.gaps`), so the target never looks complete
over a gap and ``--verify`` never agrees with one; rows the writer could not write
(``write_errors``) are reported with the run.

Transient errors are retried with exponential backoff and full jitter; permanent errors stop
that run with a precise message while the other runs continue. The engine never deletes or
changes anything a writer owns: syncing a live run from a login node is safe.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from trackstore.errors import TargetRefusedError, TargetUnreachableError, TrackstoreError, UsageError
from trackstore.read.listing import RunInfo, list_runs, resolve_runs
from trackstore.read.reader import WholePart, read_kind, read_kind_parts
from trackstore.store.clock import iso
from trackstore.store.cursor import RUN, Cursor
from trackstore.store.layout import resolve_root
from trackstore.store.ledger import CURSOR_ERRORS, cursor_path, load_cursor, save_cursor, unchanged_since_ack
from trackstore.store.ranges import RangeSet
from trackstore.store.redact import redact_text
from trackstore.store.vocab import REPLAY_ORDER, TERMINAL, Kind, RunStatus

from . import gaps, plan, verify
from .adapter import (
    STEPS,
    Adapter,
    MetricKeys,
    Opened,
    PermanentError,
    RetryableError,
    SendResult,
    StepBatch,
)
from .batches import batch_id_of, batch_ids, concat_rows, not_acked, row_batches, row_ranges, step_batches
from .plan import RunPlan
from .trajectories import NO_ROOT_SPAN, rootless_rows

if TYPE_CHECKING:
    from concurrent.futures import Executor


@dataclass
class SyncOptions:
    runs: list[str] = field(default_factory=list)
    project: str | None = None
    since_s: float | None = None          # only runs created within this many seconds
    finished_only: bool = False
    include_synced: bool = False          # --all: re-check runs that look up to date
    dry_run: bool = False
    max_retries: int = 5
    batch_size: int | None = None
    verify: bool = False
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    seed: int | None = None               # jitter seed (tests)


@dataclass
class _Outcome:
    """What the target answered for one batch: the rows it was finally handed (the batch less
    what reconcile found there), its result, and the rows reconcile found held."""

    pending: object
    result: SendResult
    held: int


@dataclass
class RunResult:
    project: str
    run_id: str
    name: str
    status: str
    sent: dict[str, int] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    reconciled: int = 0
    error: str | None = None
    error_kind: str | None = None         # "permanent" | "unreachable" | "damaged" | "error" | "locked" (skipped:
                                          # another sync was sending it, see sync/parallel.py)
    notes: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # part files that could not be read
    write_errors: str | None = None       # what the writer could not write (never in the store)
    verified: dict[str, int] | None = None
    verify_ok: bool | None = None
    up_to_date: bool = False
    upload: str | None = None             # a staging target: the command that uploads what this sync staged
    view: list[str] = field(default_factory=list)  # where to see the run in the target's UI (Adapter.view)
    plan: RunPlan | None = None           # what the sync does (did) for the run: what --dry-run prints

    @property
    def ok(self) -> bool:
        return self.error is None and self.verify_ok is not False

    def row(self) -> dict:
        return {
            "project": self.project, "run_id": self.run_id, "name": self.name, "status": self.status,
            "metrics": self.sent.get("metrics", 0), "samples": self.sent.get("samples", 0),
            "spans": self.sent.get("spans", 0), "histograms": self.sent.get("histograms", 0),
            "artifacts": self.sent.get("artifacts", 0), "retries": self.retries,
            "skipped": sum(self.skipped.values()),
            **({"verified": "yes" if self.verify_ok else "MISMATCH"} if self.verify_ok is not None else {}),
            "result": "up to date" if self.up_to_date and self.ok else ("ok" if self.ok else self.error
                                                                          if self.error_kind == "locked" else f"FAILED: {self.error}"),
        }


@dataclass
class SyncReport:
    target: str
    destination: str
    runs: list[RunResult] = field(default_factory=list)
    dry_run: bool = False
    unreachable: bool = False
    processes: int = 1                    # the processes that shared the runs (sync/parallel.py)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs) and not self.unreachable


class Progress:
    """Events the engine emits; the CLI renders them (rich bars on a TTY, plain lines otherwise)."""

    def run_started(self, run: RunInfo, total: int) -> None: ...
    def advanced(self, n: int) -> None: ...
    def run_ended(self, result: RunResult) -> None: ...
    def message(self, text: str) -> None: ...


def select_runs(root: Path, opts: SyncOptions) -> list[RunInfo]:
    if opts.runs:
        runs = resolve_runs(opts.runs, root)
    else:
        runs = list_runs(root, project=opts.project)
    if opts.project:
        runs = [r for r in runs if r.project == opts.project]
    if opts.finished_only:
        runs = [r for r in runs if r.status in TERMINAL]
    if opts.since_s is not None:
        from trackstore.store.clock import parse_iso

        cutoff = time.time() - opts.since_s
        runs = [r for r in runs if (parse_iso(r.created_at) or 0) >= cutoff]  # the listing's field: no run.json parsed
    return runs


def unchanged_runs(root: Path, target: str, destination: str, opts: SyncOptions,
                   runs: list[RunInfo]) -> set[tuple[str, str]]:
    """The runs whose parts did not change since ``destination`` acknowledged everything
    (``stat`` calls only, from the catalog): a sync skips them without a lock or a worker. None
    under ``--all`` or ``--verify``, which look again."""
    if opts.include_synced or opts.verify:
        return set()
    return unchanged_since_ack(root, target, destination, runs)


def up_to_date_result(info: RunInfo) -> RunResult:
    """The result of a run :func:`unchanged_runs` found: nothing to send, nothing opened (the plan
    :meth:`Engine.plan` would make: both ask :func:`trackstore.store.ledger.settled`)."""
    nothing = dict.fromkeys(REPLAY_ORDER, 0)
    return RunResult(info.project, info.run_id, info.name, info.status, up_to_date=True,
                     pending=nothing, write_errors=info.write_errors(),
                     plan=plan.skipped(info.project, info.run_id, info.status, plan.UP_TO_DATE, pending=nothing))


class Engine:
    """Replays runs of one store to one adapter. One instance per ``trackstore sync`` call."""

    def __init__(self, root, adapter: Adapter, opts: SyncOptions, progress: Progress | None = None,
                 on_batch: Callable[[], None] | None = None, sends: Executor | None = None):
        self.root = resolve_root(root)
        # the threads that send a run's batches at once (Capabilities.concurrent_sends), shared by
        # the workers of one sync (sync/parallel.py); None: one batch after the other
        self.sends = sends if adapter.capabilities.concurrent_sends > 1 else None
        self._tally = threading.Lock()  # res.retries, counted from the sending threads too
        self.adapter = adapter
        self.opts = opts
        self.progress = progress or Progress()
        self.on_batch = on_batch  # e.g. refresh the lock's heartbeat
        self.target = adapter.name
        self.caps = adapter.capabilities  # what the engine does for the target: read once, never its name
        self.destination = adapter.destination()
        self._rng = random.Random(opts.seed)
        self._quarantined: dict | None = None  # (project, run_id) -> parts doctor moved away, read once
        self._whole: dict = {}  # (project, run_id) -> kind -> WholePart: the run being planned only
        self._unsaved = False  # the cursor holds an acknowledgement not stored yet (:meth:`_deliver`)

    # ------------------------------------------------------------------ public
    def sync(self, runs: Iterable[RunInfo]) -> SyncReport:
        report = SyncReport(self.target, self.destination, dry_run=self.opts.dry_run)
        runs = list(runs)
        unchanged = self.unchanged(runs)
        for info in runs:
            if report.unreachable:
                # the network is down: do not hammer it once per remaining run
                res = RunResult(info.project, info.run_id, info.name, info.status, error="not attempted: target unreachable",
                                error_kind="unreachable")
                report.runs.append(res)
                continue
            if (info.project, info.run_id) in unchanged:
                report.runs.append(up_to_date_result(info))
                continue
            res = self.dry_run_one(info) if self.opts.dry_run else self.sync_one(info)
            if res.error_kind == "unreachable":
                report.unreachable = True
            report.runs.append(res)
        return report

    def unchanged(self, runs: list[RunInfo]) -> set[tuple[str, str]]:
        """:func:`unchanged_runs` for this engine's destination."""
        return unchanged_runs(self.root, self.target, self.destination, self.opts, runs)

    def pending_tables(self, info: RunInfo, cursor: Cursor) -> tuple[dict, list[gaps.UnreadablePart]]:
        """The rows not acknowledged yet, per kind in replay order, and the parts that could not be
        read. For a kind the target takes as whole parts (:attr:`Capabilities.whole_parts`), the
        parts none of whose rows are acknowledged are kept aside, undecoded (:meth:`whole_parts`),
        and the table holds the other pending rows."""
        tables, unreadable, whole = {}, [], {}
        for kind in REPLAY_ORDER:
            damaged: dict = {}
            if kind in self.caps.whole_parts:
                whole[kind], tables[kind] = read_kind_parts(info.paths, kind, exclude=cursor.acked.get(kind),
                                                            damaged=damaged)
            else:
                tables[kind] = read_kind(info.paths, kind, exclude=cursor.acked.get(kind), damaged=damaged)
            unreadable += gaps.unreadable_parts(info.paths, kind, damaged)
        self._whole = {(info.project, info.run_id): whole}  # one run's bytes at a time
        return tables, unreadable

    def whole_parts(self, info: RunInfo) -> dict[str, list[WholePart]]:
        """The whole parts :meth:`pending_tables` last kept aside for ``info``, per kind."""
        return self._whole.get((info.project, info.run_id), {})

    def _pending_counts(self, info: RunInfo, tables: dict) -> dict[str, int]:
        whole = self.whole_parts(info)
        return {k: t.num_rows + sum(p.num_rows for p in whole.get(k, ())) for k, t in tables.items()}

    def _check_gaps(self, res: RunResult, unreadable: list[gaps.UnreadablePart], cursor: Cursor) -> str | None:
        """Record what is missing; the message that stops the run when unreadable parts hide unsent rows."""
        if self._quarantined is None:
            self._quarantined = gaps.quarantined_parts(self.root)
        quarantined = self._quarantined.get((res.project, res.run_id))
        if quarantined:
            res.notes.append(gaps.quarantined_note(quarantined))
        res.unreadable = [str(p.path) for p in unreadable]
        blocking, synced = gaps.split(unreadable, cursor.acked)
        if synced:
            res.notes.append(gaps.already_synced_note(synced))
        return gaps.blocking_message(blocking) if blocking else None

    def _cursor(self, info: RunInfo, res: RunResult) -> Cursor | None:
        """The run's cursor for this destination; None (and ``res`` says why) when it is unreadable.

        Such a run is not synced at all: replaying it without knowing what the target holds
        could send its rows twice. The other runs go on.
        """
        try:
            cursor = load_cursor(self.root, self.target, self.destination, info.project, info.run_id)
        except CURSOR_ERRORS as exc:
            path = cursor_path(self.root, self.target, self.destination, info.project, info.run_id)
            res.error = redact_text(f"the sync state of this run for this destination is unreadable ({path}: "
                                    f"{exc}); the run is not synced until it is repaired (see `trackstore doctor`)")
            res.error_kind = "damaged"
            res.plan = plan.skipped(info.project, info.run_id, info.status, plan.DAMAGED, res.error)
            return None
        cursor.staged = self.caps.staging  # what it acknowledges has not left this machine
        return cursor

    def plan(self, info: RunInfo, cursor: Cursor, res: RunResult) -> tuple[RunPlan, dict]:
        """The plan of one run (:func:`.plan.decide`) and its pending rows per kind, in replay
        order: what ``--dry-run`` prints and :meth:`sync_one` executes. Reads the store and asks
        the target nothing; ``cursor`` changes only in memory (a session that never confirmed
        is rolled back, as the sync does first). Fills ``res``'s pending counts, notes, gaps and
        the writer's losses, and sets ``res.plan``."""
        self._recover(cursor, res)
        self.adapter.prepare(info, cursor, self._metric_keys(info))
        tables, unreadable = self.pending_tables(info, cursor)
        res.pending = self._pending_counts(info, tables)
        res.write_errors = gaps.write_errors(info.meta, info.writers)
        blocked = self._check_gaps(res, unreadable, cursor)
        recheck = sum(cursor.recheck[k].overlap(row_ranges(t)) for k, t in tables.items()
                      if t.num_rows and cursor.recheck.get(k))
        recheck += sum(cursor.recheck[k].overlap(p.ids) for k, parts in self.whole_parts(info).items()
                       if cursor.recheck.get(k) for p in parts)
        held_step, held = self._held_back(info, tables)
        res.plan = plan.decide(info.project, info.run_id, info.status, cursor, res.pending,
                               held=held, held_step=held_step, recheck=recheck, blocked=blocked,
                               everything=self.opts.include_synced or self.opts.verify, verify=self.opts.verify)
        res.up_to_date = res.plan.up_to_date
        return res.plan, tables

    def dry_run_one(self, info: RunInfo) -> RunResult:
        """The run's plan, and the skips the target forecasts for its batches: nothing is sent,
        nothing saved."""
        res = RunResult(info.project, info.run_id, info.name, info.status)
        cursor = self._cursor(info, res)
        if cursor is None:
            return res
        run_plan, tables = self.plan(info, cursor, res)
        self._forecast_skips(info, tables, res)
        if run_plan.skip == plan.DAMAGED:  # what the sync would do: stop this run (and exit 8)
            res.error, res.error_kind = run_plan.reason, "damaged"
        return res

    def _forecast_skips(self, info: RunInfo, tables: dict, res: RunResult) -> None:
        """What the target will report it cannot hold (``Adapter.unsupported``), into ``res.skipped``."""
        for kind, table in tables.items():
            # batch by batch, as the sync sends them (a target's rules may depend on what the
            # earlier batches held: SwanLab's first value per (key, step)); kinds a target takes
            # merged by step are judged whole
            predicted: dict[str, int] = {}
            batches = [table] if kind in self.caps.merge_steps or not table.num_rows else self._batches(kind, table)
            for batch in batches:
                for reason, n in self.adapter.unsupported(kind, batch).items():
                    predicted[reason] = predicted.get(reason, 0) + n
            if kind == Kind.SPANS and self.caps.whole_trajectories and info.status != RunStatus.RUNNING and table.num_rows:
                n = rootless_rows(table)  # what the sync's ready_trajectories will skip
                if n:
                    predicted[NO_ROOT_SPAN] = predicted.get(NO_ROOT_SPAN, 0) + n
            for reason, n in predicted.items():
                res.skipped[reason] = res.skipped.get(reason, 0) + n

    def _held_back(self, info: RunInfo, tables: dict) -> tuple[int | None, dict[str, int]]:
        """What a sync holds back of the pending rows: a live run's newest step (it may still
        grow), for a target that takes one row per step (:meth:`_send_steps`), and the rows of
        it per kind; ``(None, {})`` when nothing is held."""
        merged = [k for k in REPLAY_ORDER if k in self.caps.merge_steps and tables[k].num_rows]
        if info.status != RunStatus.RUNNING or not merged:
            return None, {}
        import pyarrow.compute as pc

        newest = max(pc.max(tables[k].column("step")).as_py() for k in merged)
        return newest, {k: pc.sum(pc.equal(tables[k].column("step"), newest).cast("int64")).as_py() or 0
                        for k in merged}

    def sync_one(self, info: RunInfo) -> RunResult:
        """Execute the run's plan (:meth:`plan`)."""
        res = RunResult(info.project, info.run_id, info.name, info.status)
        cursor = self._cursor(info, res)
        if cursor is None:
            return res
        try:
            run_plan, tables = self.plan(info, cursor, res)
            if run_plan.skip == plan.DAMAGED:
                raise gaps.GapError(run_plan.reason or "damaged")
            if run_plan.up_to_date:
                return res
            self._execute(run_plan, tables, info, cursor, res)
        except gaps.GapError as exc:
            self._fail(cursor, res, str(exc), "damaged")
        except PermanentError as exc:
            self._fail(cursor, res, str(exc), "permanent")
        except TargetUnreachableError as exc:
            self._fail(cursor, res, str(exc), "unreachable")
        except RetryableError as exc:
            n = self.opts.max_retries
            self._fail(cursor, res, f"gave up after {n} {'retry' if n == 1 else 'retries'}: {exc}", "unreachable")
        except (UsageError, TargetRefusedError) as exc:  # the whole sync is misconfigured or refused: stop it
            res.error, res.error_kind = str(exc), "error"
            self._save_unsaved(cursor)
            raise
        except TrackstoreError as exc:
            self._fail(cursor, res, str(exc), "error")
        except PermissionError as exc:  # e.g. a kind folder this user may not list
            self._fail(cursor, res, f"{exc}; give the user running sync read access to the store", "error")
        except Exception as exc:  # a bug or an SDK surprise: never report this run as ok
            res.error, res.error_kind = redact_text(f"{type(exc).__name__}: {exc}"), "error"
            self._save_unsaved(cursor)
            raise
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM (the CLI raises it); SIGKILL stores nothing
            self._save_unsaved(cursor)
            raise
        finally:
            self.progress.run_ended(res)
        return res

    def _execute(self, run_plan: RunPlan, tables: dict, info: RunInfo, cursor: Cursor, res: RunResult) -> None:
        """Do what ``run_plan`` says, in the protocol's order (the module docstring): open the
        remote run, reconcile the batch in doubt, push metadata, send the pending rows, push
        the status, verify, close. Only the target can change it on the way: a remote run the
        cursor pointed at and that is gone is replaced and the whole run replayed into it, and
        one found though the cursor knew none has every batch reconciled before it is sent."""
        total = sum(res.pending.values())
        self.progress.run_started(info, total)
        had_remote = run_plan.remote == plan.OPEN
        opened = self._call(res, lambda: self.adapter.open_run(info, cursor))
        if opened == Opened.REPLACED or opened is True:
            tables, unreadable = self._replay_from_scratch(info, cursor, res)
            self._stop_on_gaps(res, unreadable, cursor)  # rows the old run held must go again
        if self.caps.confirms_on_close:
            cursor.begin_session()
        # a cursor that knew no remote run (new destination spelling, lost or quarantined
        # cursor) met a run the target already holds: ask before sending anything
        doubtful = opened == Opened.FOUND and not had_remote
        whole = self.whole_parts(info)
        if doubtful and any(n for n in self._pending_counts(info, tables).values()):
            res.notes.append(f"the {self.target} run already existed but this cursor knew nothing of it "
                             "(a new or renamed destination, or a lost cursor): every batch is reconciled "
                             "with what the target holds before it is sent")
            # the doubt is saved with the remote id: a sync that stops before every batch was
            # reconciled must not leave a cursor that knows the remote run and so trusts its
            # (empty) acknowledged rows, which would send the rest again blindly
            for kind, table in tables.items():
                if table.num_rows:
                    cursor.mark_recheck(kind, row_ranges(table))
                for part in whole.get(kind, ()):
                    cursor.mark_recheck(kind, part.ids)
        if doubtful or opened == Opened.REPLACED or opened is True:
            # the rechecks, or a cursor that forgot a gone remote run, are stored before anything is
            # sent; otherwise the first batch's in-doubt mark stores the remote id with it (a crash
            # before that finds the remote run next time and reconciles every batch)
            self._save(cursor)
        if cursor.in_doubt:
            self._reconcile(info, cursor, res)
            # the reconciled rows are acknowledged now: they are no longer pending
            for kind in REPLAY_ORDER:
                tables[kind] = tables[kind].filter(not_acked(cursor.acked.get(kind), tables[kind]))
                acked = cursor.acked.get(kind)
                if acked and whole.get(kind):  # a part some of whose rows were just acknowledged: as rows
                    touched = [p for p in whole[kind] if acked.overlap(p.ids)]
                    whole[kind] = [p for p in whole[kind] if p not in touched]
                    for p in touched:
                        rows = p.rows(kind)
                        tables[kind] = concat_rows(tables[kind], rows.filter(not_acked(acked, rows)))
        if run_plan.metadata:
            res.notes += self._call(res, lambda: self.adapter.sync_metadata(info, cursor)) or []
        merged = {k: tables[k] for k in REPLAY_ORDER if k in self.caps.merge_steps}
        # a run the target did not hold before this pass (it made it, and the cursor knew no remote
        # run) is marked in memory only: if the pass dies, nothing of it was saved, so the next
        # finds the run there with a cursor that knows none and reconciles every batch, which is
        # what the saved mark would make it do (one durable write a new run fewer)
        new_here = opened == Opened.CREATED and not had_remote
        marked = (self._mark_run_in_doubt(tables, whole, cursor, save=not new_here)
                  if self.caps.doubt_per_run and not merged else False)
        if any(t.num_rows for t in merged.values()):
            self._send_steps(merged, cursor, res, hold_from=run_plan.held_step, doubtful=doubtful)
        if marked and self.sends is not None:  # the run's batches at once, acknowledged as they come
            self._send_at_once([(kind, batch) for kind in REPLAY_ORDER
                                for batch in [*whole.get(kind, ()),
                                              *(self._batches(kind, tables[kind]) if tables[kind].num_rows else ())]],
                               cursor, res, doubtful=doubtful)
        else:
            for kind in REPLAY_ORDER:
                for part in whole.get(kind, ()):  # local parts sent as they are (Capabilities.whole_parts)
                    self._deliver(kind, part, cursor, res, doubtful=doubtful, marked=marked)
                    self._advanced(part.num_rows)
                table = tables[kind]
                if table.num_rows and kind not in merged:
                    self._send_kind(kind, table, cursor, res, doubtful=doubtful, marked=marked)
        status = run_plan.status
        if status:
            self._call(res, lambda: self.adapter.finish_run(info, cursor, status))
            cursor.synced_status = status
        if run_plan.verify:
            res.verified = self._call(res, lambda: self.adapter.verify(info, cursor))
            res.verify_ok = verify.counts_agree(info, cursor, res.verified, self.progress.message)
        self._call(res, lambda: self.adapter.close_run(cursor))
        cursor.confirm_session()
        res.upload = self.adapter.upload_command(cursor) if self.caps.staging else None
        res.view = self.adapter.view(cursor)
        cursor.last_sync_at = iso(time.time())
        cursor.last_error = None
        cursor.notes = list(dict.fromkeys(cursor.notes + res.notes))
        self._save(cursor)

    # ------------------------------------------------------------------ internals
    def _metric_keys(self, info: RunInfo) -> MetricKeys | None:
        """Every metric key of the run, read at the first call, for a target that names keys by
        all of them (a damaged part is left out here: the run stops on it before anything is
        sent)."""
        if not self.caps.wants_metric_keys:
            return None

        @functools.cache
        def metric_keys() -> list[str]:
            import warnings

            from trackstore.read.points import run_keys

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return run_keys(info.paths)

        return metric_keys

    def _recover(self, cursor: Cursor, res: RunResult) -> None:
        """A session that never confirmed its rows (a ``confirms_on_close`` target; the sync
        died or the target could not confirm): the cursor goes back to what it was when the
        session began, and every row handed over since, the batch in doubt included, is
        reconciled with the target before it is sent again (``cursor.recheck``)."""
        if not cursor.roll_back_session():
            return
        res.notes.append(f"the previous {self.target} session did not close: the rows it was handed are checked "
                         "against the target and sent again where missing")

    def _stop_on_gaps(self, res: RunResult, unreadable: list[gaps.UnreadablePart], cursor: Cursor) -> None:
        blocked = self._check_gaps(res, unreadable, cursor)
        if blocked:
            raise gaps.GapError(blocked)

    def _replay_from_scratch(self, info: RunInfo, cursor: Cursor, res: RunResult) -> tuple:
        """The remote run is gone and a new one was made: everything is pending again."""
        cursor.forget()
        res.notes.append(f"the {self.target} run this run was synced to no longer exists; "
                         "created a new one and replayed the whole run into it")
        tables, unreadable = self.pending_tables(info, cursor)
        res.pending = self._pending_counts(info, tables)
        return tables, unreadable

    def _mark_run_in_doubt(self, tables: dict, whole: dict, cursor: Cursor, *, save: bool = True) -> bool:
        """Mark every row this pass will send of the run in doubt, in one durable write
        (:attr:`~.adapter.Capabilities.doubt_per_run`), with what the cursor holds unsaved (in
        memory only when not ``save``); False when there is nothing to send."""
        rows: dict = {}
        for kind in REPLAY_ORDER:
            ids = row_ranges(tables[kind]) if tables[kind].num_rows else None
            for part in whole.get(kind, ()):
                ids = ids or RangeSet()
                ids.update(part.ids)
            if ids:
                rows[kind] = ids
        if not rows:
            return False
        now = iso(time.time())
        cursor.mark_run_in_doubt(rows, f"{RUN}-{now}", now)
        if save:
            self._save(cursor)
        return True

    def _send_kind(self, kind: str, table, cursor: Cursor, res: RunResult, *, doubtful: bool = False,
                   marked: bool = False) -> None:
        """Send ``table`` batch by batch. ``doubtful``: the target may hold some of these rows
        already (a lost or quarantined cursor found an existing remote run), so every batch is
        reconciled before it is sent. ``marked``: the rows are in the run's doubt already
        (:meth:`_mark_run_in_doubt`)."""
        for batch in self._batches(kind, table):
            self._deliver(kind, batch, cursor, res, doubtful=doubtful, marked=marked)
            self._advanced(batch.num_rows)

    def _send_at_once(self, batches: list, cursor: Cursor, res: RunResult, *, doubtful: bool) -> None:
        """Send ``(kind, batch)`` pairs of one run's pass, every one in the run's doubt already
        (:meth:`_mark_run_in_doubt`), up to :attr:`~.adapter.Capabilities.concurrent_sends` at
        once on :attr:`sends`. Only the sending happens in those threads: each batch's outcome is
        recorded here, in order, as :meth:`_deliver` records it. The first error stops batches not
        started yet and is raised once every started one has ended and been recorded, so the
        cursor holds exactly what the target acknowledged (an interrupt waits the same way)."""
        import concurrent.futures as cf

        assert self.sends is not None
        todo = [(kind, batch, ids, self._ask_first(cursor, ids, doubtful))
                for kind, batch in batches for ids in [batch_ids(kind, batch)]]
        futures = [self.sends.submit(self._transfer, kind, batch, cursor, res, check)
                   for kind, batch, _ids, check in todo]
        error: BaseException | None = None
        try:
            for future, (kind, batch, ids, _check) in zip(futures, todo):
                try:
                    outcome = future.result()
                except cf.CancelledError:
                    continue
                except BaseException as exc:  # noqa: BLE001 - raised below, once the others ended
                    if error is None:
                        error = exc
                        for f in futures:
                            f.cancel()
                    continue
                self._record(kind, batch, ids, outcome, cursor, res)
                if error is None:
                    self._advanced(batch.num_rows)
        except BaseException:  # an interrupt (on_batch, Ctrl-C): nothing may touch the cursor after
            for f in futures:
                f.cancel()
            cf.wait(futures)
            raise
        if error is not None:
            raise error

    def _advanced(self, rows: int) -> None:
        """A batch of ``rows`` was delivered: progress, and the caller's hook (lock heartbeat)."""
        self.progress.advanced(rows)
        if self.on_batch is not None:
            self.on_batch()

    def _send_steps(self, tables: dict, cursor: Cursor, res: RunResult, *, hold_from: int | None,
                    doubtful: bool) -> None:
        """Send the kinds of ``capabilities.merge_steps`` together, whole steps in step order (see
        :class:`~.adapter.StepBatch`). Rows from step ``hold_from`` on (the plan's held step: a
        live run's newest, which may still grow; the target takes one row per step) stay pending."""
        if hold_from is not None:
            import pyarrow.compute as pc

            tables = {k: t.filter(pc.less(t.column("step"), hold_from)) for k, t in tables.items()}
        for batch in step_batches(tables, self.adapter.batch_size(STEPS, self.opts.batch_size)):
            self._deliver(STEPS, batch, cursor, res, doubtful=doubtful)
            self._advanced(batch.num_rows)

    def _deliver(self, kind: str, batch, cursor: Cursor, res: RunResult, *, doubtful: bool = False,
                 note: bool = False, marked: bool = False) -> None:
        """The exactly-once protocol for one batch (a Table of ``kind``, or a :class:`StepBatch`).

        The cursor records the batch as in doubt before anything is sent. A send that fails
        with a retryable error has an *unknown* outcome (the request may have reached the
        target and only the answer was lost), so every retry first asks the target which rows
        it holds (``adapter.reconcile``) and sends only the rest, under a new batch id. Rows
        the target holds or acknowledged join the cursor's acknowledged set, atomically with
        the end of the doubt.

        ``marked``: the batch's rows are in a doubt of kind ``run`` stored already (the run's
        pass, :meth:`_mark_run_in_doubt`, or one a previous sync left): nothing is written before
        the send, and the acknowledgement takes the batch's rows out of that doubt.
        """
        ids = batch_ids(kind, batch)
        if not marked:
            cursor.mark_in_doubt(kind, ids, batch_id_of(kind, batch), iso(time.time()))
        doubtful = self._ask_first(cursor, ids, doubtful)
        if not marked:
            self._save(cursor)  # with the previous batch's acknowledgement, if it was not stored yet
        self._record(kind, batch, ids, self._transfer(kind, batch, cursor, res, doubtful), cursor, res, note=note)

    @staticmethod
    def _ask_first(cursor: Cursor, ids: dict, doubtful: bool) -> bool:
        """Whether a batch of rows ``ids`` is reconciled with the target before it is sent: the
        run is ``doubtful``, or some of its rows were handed over in a session that never
        confirmed them (``recheck``). Read in the engine's thread, before the batch is handed to
        a sending thread (:meth:`_record` changes the cursor meanwhile)."""
        return doubtful or bool(cursor.rechecked_kinds(ids))

    def _transfer(self, kind: str, batch, cursor: Cursor, res: RunResult, doubtful: bool) -> _Outcome:
        """Send one batch, retrying as :meth:`_deliver` says; the target's answer. Reads
        ``cursor`` and changes nothing but ``res.retries`` (it may run on :attr:`sends`)."""
        pending, result, attempt, held = batch, SendResult(), 0, 0
        while True:
            try:
                if doubtful:
                    missing = self.adapter.reconcile(kind, pending, cursor, batch_id_of(kind, pending))
                    held += pending.num_rows - missing.num_rows
                    pending, doubtful = missing, False
                if pending.num_rows:
                    result = self.adapter.send(kind, pending, cursor, batch_id_of(kind, pending))
                return _Outcome(pending, result, held)
            except PermanentError:
                raise
            except (RetryableError, ConnectionError, TimeoutError) as exc:
                attempt += 1
                # the target may have stored the batch: ask before sending again
                doubtful = self.caps.reconcile_before_retry
                self._backoff(res, attempt, exc)

    def _record(self, kind: str, batch, ids: dict, outcome: _Outcome, cursor: Cursor, res: RunResult, *,
                note: bool = False) -> None:
        """What the target answered for one batch (:meth:`_transfer`), into the cursor (in memory)
        and the run's result."""
        pending, result, held = outcome.pending, outcome.result, outcome.held
        res.reconciled += held
        if kind == STEPS:
            if result.deferred:
                raise TrackstoreError(f"{self.target}: a step-merged batch cannot defer rows (the engine holds "
                                      "back a live run's newest step itself)")
            acked = ids
            skipped = {k: result.by_kind.get(k, 0) for k in pending.tables}
            for k, table in pending.tables.items():
                res.sent[k] = res.sent.get(k, 0) + table.num_rows - skipped[k]
            for reason, n in result.skipped.items():
                res.skipped[reason] = res.skipped.get(reason, 0) + n
        else:
            deferred = row_ranges(pending.take(result.deferred)) if result.deferred else None
            acked = {kind: ids[kind] - deferred if deferred else ids[kind]}
            skipped = {kind: result.skipped_rows}
            self._count(res, kind, pending.num_rows - len(result.deferred), result)
        cursor.acknowledge(ids, acked, skipped)
        if note:
            what = "step" if kind == STEPS else kind
            res.notes.append(f"reconciled an interrupted {what} batch: {held} of {batch.num_rows} "
                             f"{'row was' if batch.num_rows == 1 else 'rows were'} already at the target")
        # stored with the next batch's in-doubt mark or the run's last save (one write per batch);
        # a run that stops on the way stores it then (:meth:`sync_one`)
        self._unsaved = True

    def _reconcile(self, info: RunInfo, cursor: Cursor, res: RunResult) -> None:
        """The batch a previous sync left in doubt: reconcile it, then send what the target lacks."""
        kind = cursor.in_doubt["kind"]
        # a row of a part that cannot be read now is not acknowledged below: it stays pending
        tables = {}
        for k, ids in cursor.in_doubt_rows().items():
            rows = read_kind(info.paths, k, damaged={})
            tables[k] = rows.filter(ids.mask(rows))
        if kind == RUN:  # a run's pass (Capabilities.doubt_per_run): each kind reconciled in its turn,
            for k in REPLAY_ORDER:  # in the target's batches (the pass may have held many)
                for batch in self._batches(k, tables[k]) if k in tables and tables[k].num_rows else ():
                    self._deliver(k, batch, cursor, res, doubtful=True, note=True, marked=True)
            # the doubt ends here, as a batch's does: the rows of a part unreadable now stay pending
            cursor.acknowledge(cursor.in_doubt_rows(), {}, {})
            return
        if kind != STEPS and kind in self.caps.merge_steps:  # left by a version that sent kinds one by one
            kind = STEPS
        self._deliver(kind, StepBatch(tables) if kind == STEPS else tables[kind], cursor, res, doubtful=True,
                      note=True)

    def _batches(self, kind: str, table):
        """The batches ``kind``'s rows are sent in: the target's size, its groups kept whole."""
        return row_batches(table, self.adapter.batch_size(kind, self.opts.batch_size), self.caps.group_columns.get(kind))

    def _call(self, res: RunResult, fn: Callable):
        """Call ``fn`` with retries for RetryableError / connection trouble; backoff with full jitter."""
        attempt = 0
        while True:
            try:
                return fn()
            except PermanentError:
                raise
            except (RetryableError, ConnectionError, TimeoutError) as exc:
                attempt += 1
                self._backoff(res, attempt, exc)

    def _backoff(self, res: RunResult, attempt: int, exc: Exception) -> None:
        """Count retry ``attempt`` and sleep before it, or re-raise ``exc`` when retries are spent
        (from any thread: see :attr:`sends`)."""
        if attempt > self.opts.max_retries:
            if isinstance(exc, RetryableError):
                raise exc
            raise RetryableError(redact_text(str(exc))) from exc
        with self._tally:
            res.retries += 1
        delay = min(self.opts.backoff_max, self.opts.backoff_base * 2 ** (attempt - 1))
        delay = self._rng.uniform(0, delay)
        self.progress.message(f"{res.project}/{res.run_id}: {redact_text(str(exc))[:200]}; retry "
                              f"{attempt}/{self.opts.max_retries} in {delay:.1f}s")
        time.sleep(delay)

    def _count(self, res: RunResult, kind: str, n: int, result: SendResult) -> None:
        res.sent[kind] = res.sent.get(kind, 0) + n - result.skipped_rows
        for reason, k in result.skipped.items():
            res.skipped[reason] = res.skipped.get(reason, 0) + k

    def _fail(self, cursor: Cursor, res: RunResult, message: str, kind: str) -> None:
        if cursor.session is not None:  # end the session; confirmed only if the target says so
            try:
                self.adapter.close_run(cursor)
                cursor.confirm_session()
            except (TrackstoreError, ConnectionError, TimeoutError):
                pass
        message = redact_text(message)
        res.error = message
        res.error_kind = kind
        cursor.last_error = message
        cursor.last_error_at = iso(time.time())
        try:
            self._save(cursor)
        except OSError:
            pass

    def _save(self, cursor: Cursor) -> None:
        """Store ``cursor`` durably (atomically): every state the engine holds in memory is one
        it may store, since a batch is marked in doubt before it is sent."""
        save_cursor(self.root, cursor)
        self._unsaved = False

    def _save_unsaved(self, cursor: Cursor) -> None:
        """A run stopping on an error the engine does not record (or an interrupt): store an
        acknowledgement not stored yet, so the next sync need not reconcile that batch. Best
        effort: without it, that batch is reconciled, never sent twice."""
        if self._unsaved:
            try:
                self._save(cursor)
            except OSError:
                pass
