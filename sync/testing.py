"""A reference target in memory, with faults on demand: ``trackstore.sync.testing``.

:class:`MemoryTarget` plays a tracking server: it keeps remote runs and every row delivered to
them, *as delivered* (a row sent twice is held twice, like MLflow's file store, so a test sees
duplicates instead of having them absorbed). :class:`MemoryAdapter` is the whole adapter for it,
and the example docs/sync.md walks through: a new target needs no more than this.

Faults are queued on the target and fire on the next ``send``/``reconcile`` calls, in order:

* ``"fail_before"``: a retryable error; nothing was stored (the request never arrived).
* ``"fail_after"``: the rows *are* stored, then a retryable error (the answer was lost).
* ``"timeout"``: stored, then ``TimeoutError`` (the client gave up; the server went on).
* ``"drop"``: ``ConnectionResetError``; nothing stored.
* ``"abort_before"`` / ``"abort_after"``: :class:`Abort` (a ``BaseException``, so nothing in the
  engine catches it) before or after the rows are stored: the process was SIGKILLed at that
  boundary. The cursor is left exactly as a killed process leaves it on disk.
* ``"interrupt_after"``: stored, then ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM, which the CLI
  raises as one): the engine stores what it acknowledged and not yet saved, then stops.

Usage::

    target = MemoryTarget()
    adapter = MemoryAdapter(TargetOptions(), target)
    target.faults += ["fail_after", "timeout"]
    Engine(root, adapter, SyncOptions(backoff_base=0)).sync(runs)
    target.rows("metrics")      # Counter of (writer, seq) -> times held
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field, replace

from trackstore.errors import TargetUnreachableError
from trackstore.store.vocab import REPLAY_ORDER, Kind

from .adapter import (
    STEPS,
    Adapter,
    Capabilities,
    Opened,
    RetryableError,
    SendResult,
    StepBatch,
    TargetOptions,
)

KINDS = REPLAY_ORDER  # every kind, in the order the engine replays them
FAULTS = ("fail_before", "fail_after", "timeout", "drop", "abort_before", "abort_after", "interrupt_after")


class Abort(BaseException):
    """The sync process died here (SIGKILL-equivalent): propagates through every handler."""


@dataclass
class MemoryRun:
    marker: tuple[str, str]                       # (project, trackstore run id): found again by it
    held: dict[str, Counter] = field(default_factory=dict)  # kind -> (writer, seq) -> times held
    meta: dict = field(default_factory=dict)
    status: str | None = None
    last_step: int = -1                           # step-merged targets: the last step committed
    spool: dict[str, Counter] = field(default_factory=dict)  # session targets: handed over, not durable yet


class MemoryTarget:
    """The "server": remote runs, what they hold, faults to inject, and a switch to go offline."""

    def __init__(self, name: str = "default") -> None:
        self.name = name
        self.runs: dict[str, MemoryRun] = {}
        self.faults: list[str] = []
        self.online = True
        self.calls: Counter = Counter()  # method -> calls that reached the target
        #: what a step-merged target was sent against its rules (a step split or sent out of order)
        self.violations: list[str] = []
        self._lock = threading.Lock()

    def rows(self, kind: str, run_id: str | None = None) -> Counter:
        """(writer, seq) -> how many times the target holds it, over all runs (or one)."""
        out: Counter = Counter()
        for r in self.runs.values():
            if run_id is None or r.marker[1] == run_id:
                out.update(r.held.get(kind, Counter()))
        return out

    def _fault(self) -> str | None:
        with self._lock:
            return self.faults.pop(0) if self.faults else None


class MemoryAdapter(Adapter):
    """The reference adapter: every method of the protocol, against a :class:`MemoryTarget`."""

    name = "memory"
    # small batches: many batches, many boundaries for faults
    CAPABILITIES = Capabilities(kinds=KINDS, batch_sizes={k: 7 for k in KINDS}, group_columns={Kind.SPANS: "trace_id"})

    def __init__(self, options: TargetOptions, target: MemoryTarget):
        super().__init__(options)
        self.target = target

    def destination(self) -> str:
        return f"memory:{self.target.name}"

    def check_online(self) -> None:
        if not self.target.online:
            raise TargetUnreachableError(f"{self.destination()} is offline")

    def open_run(self, run, cursor) -> str:
        self.check_online()
        marker = (run.project, run.run_id)
        rid = cursor.remote_id
        if rid in self.target.runs:
            return Opened.FOUND
        for rid, remote in self.target.runs.items():  # the marker: a lost cursor finds its run
            if remote.marker == marker:
                cursor.remote_id = rid
                return Opened.FOUND
        rid = f"r{len(self.target.runs)}"
        self.target.runs[rid] = MemoryRun(marker)
        cursor.remote_id = rid
        return Opened.CREATED

    def sync_metadata(self, run, cursor) -> list[str]:
        self.target.runs[cursor.remote_id].meta = {"name": run.name, "config": run.meta.get("config")}
        return []

    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult:
        self.check_online()
        fault = self.target._fault()
        if fault in ("fail_before", "drop", "abort_before"):
            raise {"fail_before": RetryableError("injected: failed before storing"),
                   "drop": ConnectionResetError("injected: connection dropped"),
                   "abort_before": Abort("killed before the target stored the batch")}[fault]
        self.target.calls["send"] += 1
        remote = self.target.runs[cursor.remote_id]
        if kind in self.capabilities.merge_steps:
            self.target.violations.append(f"{kind} sent alone, not in a step-merged batch")
        for k, table in (rows.tables.items() if kind == STEPS else [(kind, rows)]):
            store = remote.spool if self.capabilities.confirms_on_close else remote.held
            if kind == STEPS and table.num_rows:
                first = min(table.column("step").to_pylist())
                if first <= remote.last_step:
                    self.target.violations.append(f"{k} rows at step {first} after step {remote.last_step}")
            held = store.setdefault(k, Counter())
            held.update(zip(table.column("writer").to_pylist(), table.column("seq").to_pylist()))
        if kind == STEPS:
            steps = [s for t in rows.tables.values() for s in t.column("step").to_pylist()]
            remote.last_step = max([remote.last_step, *steps])
        if fault == "fail_after":
            raise RetryableError("injected: the answer was lost after the target stored the batch")
        if fault == "timeout":
            raise TimeoutError("injected: timed out after the target stored the batch")
        if fault == "abort_after":
            raise Abort("killed after the target stored the batch")
        if fault == "interrupt_after":  # Ctrl-C or SIGTERM (the CLI raises it) during the request
            raise KeyboardInterrupt("interrupted after the target stored the batch")
        return SendResult()

    def reconcile(self, kind: str, rows, cursor, batch_id: str):
        import pyarrow as pa

        self.check_online()
        self.target.calls["reconcile"] += 1
        remote = self.target.runs[cursor.remote_id]

        def missing(k, table):
            held = remote.held.get(k, Counter()) + remote.spool.get(k, Counter())
            ids = zip(table.column("writer").to_pylist(), table.column("seq").to_pylist())
            return table.filter(pa.array([i not in held for i in ids], pa.bool_()))

        if kind == STEPS:
            return StepBatch({k: missing(k, t) for k, t in rows.tables.items()})
        return missing(kind, rows)

    def finish_run(self, run, cursor, status: str) -> None:
        self.target.runs[cursor.remote_id].status = status

    def verify(self, run, cursor) -> dict[str, int]:
        held = self.target.runs[cursor.remote_id].held
        return {k: sum(c.values()) for k, c in held.items()}


class StepMemoryAdapter(MemoryAdapter):
    """The same target taking one row per step, like wandb: metrics, histograms and samples
    arrive together in :class:`~.adapter.StepBatch` es, whole steps in step order; a row at a
    step the run already committed is a violation the target records."""

    name = "memory-steps"
    CAPABILITIES = replace(MemoryAdapter.CAPABILITIES, merge_steps=(Kind.METRICS, Kind.HISTOGRAMS, Kind.SAMPLES),
                           batch_sizes={STEPS: 7, Kind.SPANS: 7, Kind.ARTIFACTS: 7})

    def destination(self) -> str:
        return f"memory-steps:{self.target.name}"


class SessionMemoryAdapter(MemoryAdapter):
    """The same target with a client that makes rows durable only when the run's session closes
    (like SwanLab): ``send`` only spools rows, :meth:`close_run` makes them durable, and a
    session that dies (the next ``open_run`` finds its spool) loses what it spooled."""

    name = "memory-session"
    CAPABILITIES = replace(MemoryAdapter.CAPABILITIES, confirms_on_close=True)

    def destination(self) -> str:
        return f"memory-session:{self.target.name}"

    def open_run(self, run, cursor) -> str:
        opened = super().open_run(run, cursor)
        self.target.runs[cursor.remote_id].spool.clear()  # a session that never closed: its rows are lost
        return opened

    def close_run(self, cursor) -> None:
        remote = self.target.runs.get(cursor.remote_id or "")
        if remote is not None:
            for kind, rows in remote.spool.items():
                remote.held.setdefault(kind, Counter()).update(rows)
            remote.spool.clear()


class RunDoubtMemoryAdapter(MemoryAdapter):
    """The same target declaring :attr:`~.adapter.Capabilities.doubt_per_run` (like the team
    store): the engine marks a run's whole pass in doubt at once, and its many small batches
    (7 rows) leave that doubt one by one."""

    name = "memory-run-doubt"
    CAPABILITIES = replace(MemoryAdapter.CAPABILITIES, doubt_per_run=True)

    def destination(self) -> str:
        return f"memory-run-doubt:{self.target.name}"
