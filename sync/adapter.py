"""The one interface every sync target implements (:class:`Target`), and the errors it raises.

The engine (:mod:`trackstore.sync.engine`) owns every piece of state: it reads the store,
decides what is pending and what is in doubt, batches (merging kinds per step for a target
that needs it), keeps and writes the cursor, retries with backoff, locks, reports progress and
the summary. An adapter only maps records onto its target's API and answers "what do you
hold?". It never lists the store nor reads its parts or cursors (it reads only the files a
record names in the run's folder: artifact files, sample media), never writes a cursor file,
and keeps what it must remember between syncs in ``cursor.remote_id`` and ``cursor.remote``
(adapter state the engine persists on its behalf). Every HTTP target shares :mod:`trackstore.sync.http` (destination identity,
reachability probe, the one retry/permanent error policy, proxies).

The protocol, method by method (:class:`Target`; :class:`Adapter` is a base class with the
defaults of the optional ones):

``destination()``
    A stable, credential-free description of where data goes (``http://host:5000``,
    ``entity/project``; :func:`trackstore.sync.http.destination_url` normalises URLs). Cursors
    are kept per destination.
``check_online()``
    Raise :class:`~trackstore.errors.TargetUnreachableError` when the target cannot be reached
    (used by ``--if-online``; :func:`trackstore.sync.http.probe`). Cheap; no side effects.
``prepare(run, cursor, metric_keys)``
    Optional. Called for each run before any of its rows is planned or sent, in a sync and in
    a ``--dry-run`` alike, so that both compute the same things (MLflow: the run's metric key
    names, which depend on every key of the run and on the names ``cursor.remote`` already
    gave). ``metric_keys`` gives every metric key of the run when called (:data:`MetricKeys`:
    the engine reads them from the store at the first call, so a run whose batches need no
    new name costs no read), for a target that declares :attr:`Capabilities.wants_metric_keys`
    (None otherwise): adapters never read the store. It must not contact the target nor
    change ``cursor``.
``open_run(run, cursor)``
    Find the remote run by a *deterministic* identity derived from the trackstore run id (a
    marker stored on the remote run where the target allows: MLflow's tag
    ``trackstore.run_id``), or create it; set ``cursor.remote_id`` and keep what else is needed
    in ``cursor.remote``. Calling it any number of times yields the same remote run: a run is
    never created twice. Return ``Opened.CREATED``, ``Opened.FOUND`` (the run existed:
    when the cursor knew no remote run, a lost cursor or a new spelling of the destination, the
    engine reconciles every batch before sending it), or ``Opened.REPLACED`` when the
    remote run the cursor pointed at is gone for good (purged by ``mlflow gc``, a wiped server
    at the same address) and a new one was created: the engine then forgets what it had
    acknowledged and replays the whole run into the new one.
``sync_metadata(run, cursor)``
    Optional. Push config, tags, notes, name. Idempotent (compare and skip, or last-write-wins).
    Returns notes for the summary (e.g. "param x truncated").
``send(kind, rows, cursor, batch_id)``
    Deliver one batch: a pyarrow Table of one kind in replay order, sized by
    :meth:`Adapter.batch_size`, or for a target with :attr:`Capabilities.merge_steps` a
    :class:`StepBatch` of kind :data:`STEPS` (whole steps, in step order). ``batch_id`` is the
    engine's id of exactly these rows: a target that can store it with the batch (MLflow: a run
    tag in the same request; wandb: a marker after the batch in its log) answers
    :meth:`reconcile` cheaply. Return a :class:`SendResult` counting rows the target cannot
    hold (reported, never silently dropped). Raise :class:`RetryableError` for transient
    trouble and :class:`PermanentError` for what retrying cannot fix
    (:func:`trackstore.sync.http.classify` decides, the same way for every target). After a
    retryable failure the engine calls :meth:`reconcile` before it sends those rows again.
``reconcile(kind, rows, cursor, batch_id)``
    The outcome of sending ``rows`` is unknown (the process was killed, the connection cut
    after the server received it, a time-out, a lost cursor met an existing remote run, or a
    session that never confirmed). Ask the target what it holds and return the subset of
    ``rows`` (same type) it does *not* hold yet. This is what makes replay exactly-once
    instead of at-least-once.
``finish_run(run, cursor, status)``
    Push the summary and the terminal status (``finished``/``failed``/``crashed``) with the
    original end time where the target allows. Idempotent.
``close_run(cursor)``
    Optional. The engine is done with this run. For a target with
    :attr:`Capabilities.confirms_on_close` (its client makes rows durable only when the session
    closes), return normally only once every row sent since :meth:`open_run` is durable, else
    raise: the engine then rolls the cursor back to the session's start and reconciles those
    rows at the next sync.
``verify(run, cursor)``
    Read back what the target holds, as ``{kind: rows}`` counts (``--verify`` and tests).
``unsupported(kind, rows)``
    Optional. What :meth:`send` would report for ``rows``, as ``{reason: count}``, without
    sending anything. ``--dry-run`` calls it for the batches the sync would send, in the same
    order, after :meth:`prepare`: a target whose rules depend on earlier batches or on the
    cursor keeps a scratch copy of that state in ``prepare`` and plays each batch through it
    (SwanLab, wandb), so the dry run lists every skip the sync will report.
``upload_command(cursor)``
    Optional, for a staging target (:attr:`Capabilities.staging`). The shell command that uploads what
    this process staged for the run of ``cursor`` (wandb: ``wandb sync DIR``), or None. Called
    by the engine after the run's sync completed; the CLI prints each distinct command once,
    at the end of its summary. No side effects.
``view(cursor)``
    Optional. Where a person sees the run of ``cursor`` in the target's own UI: the lines to
    print (an address, or a command that starts a viewer and then its address), or ``[]``.
    Called by the engine after the run's sync completed; the CLI prints each distinct line
    once, at the end of its summary. No side effects, no requests.
``close()``
    Optional. Release clients and background threads. Called once, at the end.

Seven methods are required; seven have defaults. What the target can do, and what the engine
and the parallel scheduler must do for it, is one record, :class:`Capabilities`
(:attr:`Adapter.capabilities`: the kinds it holds, batch sizes, groups a batch must not split,
step-merged kinds, whether it confirms on close, whether a retry must reconcile first, whether
it wants every metric key, whether it is a staging area, how many runs it takes at once and
why, whether one sync must hold the whole destination, SDK modules to import before threads
start). The engine and :mod:`.parallel` read that record and never a target's name.

:attr:`Capabilities.staging` says whether the destination is a *staging area* rather than the
platform: a folder on this machine that the client's offline or local mode fills for a later
upload (wandb offline, SwanLab offline and local). The engine records the run's cursor as
``staged`` there (:attr:`trackstore.store.cursor.Cursor.staged`): ``status`` and the
``sync_state`` view show it as staged, and ``gc`` does not count it as synced unless told to
(``--count-staged``). A staging destination must have a destination string of its own (its
mode and folder in it), so that syncing the same run to the platform later keeps a separate
cursor. A store the user reads in place (MLflow's file or sqlite store) is not staging: it is
the destination the user chose.

Adapters read the files a record names from the run's folder (artifact files, sample media):
the engine hands them the run (``run.paths``), and they read nothing else of the store: no
listing, no parts, no cursor file. Adapters import their SDK lazily (inside methods or ``__init__``), never at module import,
so ``trackstore sync --help`` and the core stay fast. ``tests/test_import_graph.py`` checks
that no adapter module imports a store reader, the ledger's writers or an engine name.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Mapping, Protocol, runtime_checkable

# RetryableError and PermanentError live in the one exception tree and are re-exported here,
# where adapters (ours and third parties') import them from
from trackstore.errors import LockHeldError, UsageError
from trackstore.errors import PermanentError as PermanentError
from trackstore.errors import RetryableError as RetryableError
from trackstore.read.reader import WholePart as WholePart  # a whole local part, for Capabilities.whole_parts
from trackstore.store.cursor import STEPS as STEPS  # a step-merged batch's kind (StepBatch)
from trackstore.store.vocab import Kind, Word

#: every metric key of the run being synced, read by the engine at the first call (``prepare``)
MetricKeys = Callable[[], list[str]]


def version_tuple(text: str) -> tuple[int, ...]:
    """``"0.31.0rc1"`` -> ``(0, 31, 0)``: the leading numeric release parts of a version string."""
    import re

    parts = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if m is None:
            break
        parts.append(int(m.group(0)))
        if m.end() < len(piece):
            break
    return tuple(parts)


#: why an image row is not sent: its file is not in the run folder (or its path is not a media path)
IMAGE_MISSING = "image file missing from the store"


def image_file(run_dir: Path, row: Mapping[str, Any]) -> Path | None:
    """The stored file an ``images`` row (or a sample's image reference) names, or None when the
    row's path is not a media file path (:func:`trackstore.store.media.parse_media_path`: never
    outside the run folder) or the file is not there. Adapters send these files and nothing else."""
    from trackstore.store.media import parse_media_path

    ident = parse_media_path(row.get("path"))
    if ident is None or ident[0] != row.get("sha256", ident[0]):
        return None
    path = Path(run_dir) / str(row["path"])
    return path if path.is_file() else None


def require_client(package: str, minimum: tuple[int, ...], target: str) -> None:
    """Refuse a missing or too old client SDK before anything is sent (a UsageError, exit 2).

    Reads the installed version from package metadata, without importing the SDK: adapters
    rely on client internals of the versions the tests run, and an older client would fail
    later with a traceback instead of this sentence.
    """
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    need = ".".join(map(str, minimum))
    if importlib.util.find_spec(package) is None:
        raise UsageError(f"the {package} client is not installed: pip install 'trackstore[{package}]'")
    try:
        installed = version(package)
    except PackageNotFoundError:  # importable but without metadata (a source tree): nothing to compare
        return
    if version_tuple(installed) < minimum:
        raise UsageError(f"{package} {installed} is installed, but trackstore's {target} target needs "
                         f"{package}>={need} (the version it is tested with): pip install -U '{package}>={need}'")


class Opened(Word):
    """What :meth:`Adapter.open_run` returns (plain words: they compare equal to the strings)."""

    CREATED = "created"    # no remote run existed: a new one was made
    FOUND = "found"        # the remote run existed (found by the cursor's id or by its marker)
    REPLACED = "replaced"  # the cursor's remote run is gone for good and a new one was made


# the names adapters written before :class:`Opened` import
OPENED_CREATED, OPENED_FOUND, OPENED_REPLACED = Opened.CREATED, Opened.FOUND, Opened.REPLACED


@dataclass
class StepBatch:
    """Rows of several kinds covering whole steps, for an adapter whose target takes one row
    per step (:attr:`Capabilities.merge_steps`): ``tables[kind]`` holds that kind's rows at the
    batch's steps. The engine never splits a step between two batches, sends the batches in
    step order, and holds back a live run's newest step (it may still be growing)."""

    tables: dict[str, Any]

    @property
    def num_rows(self) -> int:
        return sum(t.num_rows for t in self.tables.values())

    def rows(self) -> list[tuple[str, dict]]:
        """Every row as ``(kind, row)``, kinds in the order of :attr:`tables`."""
        return [(k, r) for k, t in self.tables.items() for r in t.to_pylist()]


@dataclass
class SendResult:
    """What happened to one batch.

    ``skipped`` counts rows the target cannot hold, by reason (acknowledged and reported);
    ``skip(reason, n, kind=...)`` also says of which kind they are (needed in a
    :class:`StepBatch`, where ``by_kind`` counts them; a one-kind batch needs no ``kind``).
    ``deferred`` lists batch row indices the adapter chose not to send *yet* (e.g. the spans of
    a trajectory still running): they stay pending and come back in the next sync.
    """

    skipped: dict[str, int] = field(default_factory=dict)
    deferred: list[int] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)

    def defer(self, indices) -> None:
        self.deferred.extend(indices)

    def skip(self, reason: str, n: int = 1, kind: str | None = None) -> None:
        if n:
            self.skipped[reason] = self.skipped.get(reason, 0) + n
            if kind is not None:
                self.by_kind[kind] = self.by_kind.get(kind, 0) + n

    @property
    def skipped_rows(self) -> int:
        return sum(self.skipped.values())


@dataclass(frozen=True)
class Capabilities:
    """What a target can do and what the engine must do for it: the one record the engine and
    :mod:`.parallel` read (see the module docstring). An adapter declares it as
    :attr:`Adapter.CAPABILITIES`, and overrides :attr:`Adapter.capabilities` where it depends on
    the destination (MLflow's store kind, wandb's and SwanLab's modes)."""

    #: record kinds this target can hold; rows of other kinds are reported as unsupported
    kinds: tuple[str, ...] = (Kind.METRICS,)
    #: rows per ``send`` call, per kind (the engine never sends more; 500 for a kind not named)
    batch_sizes: Mapping[str, int] = field(default_factory=lambda: {Kind.METRICS: 1000})
    #: kinds whose batches must not split a group of rows sharing this column (e.g. a trace)
    group_columns: Mapping[str, str] = field(default_factory=dict)
    #: spans become one record per trajectory through :mod:`.trajectories` (so a trajectory
    #: without a root span is skipped once its run ended, and the dry run says so)
    whole_trajectories: bool = False
    #: kinds the target takes as one row per step (wandb: metrics, histograms and samples share
    #: one step axis): the engine sends them together as :class:`StepBatch` es of kind
    #: :data:`STEPS`, whole steps in step order, a live run's newest step held back
    merge_steps: tuple[str, ...] = ()
    #: the client makes rows durable only when the run's session closes (SwanLab): the engine
    #: keeps the cursor as it was when the session began until :meth:`Adapter.close_run` returns,
    #: and when a session never got there it goes back to that state and reconciles the rows the
    #: session was handed before sending them again
    confirms_on_close: bool = False
    #: False only for a target whose ``send`` is itself safe to repeat with the same rows and
    #: batch id within one process (wandb: a batch handed to wandb-core is staged under its id,
    #: and a repeat only waits for it to reach the log, which ``reconcile`` could not see yet)
    reconcile_before_retry: bool = True
    #: the target's names depend on every metric key of the run (MLflow: two keys that sanitize
    #: alike get distinct names): the engine reads them and hands them to :meth:`Adapter.prepare`
    wants_metric_keys: bool = False
    #: the destination is a staging area on this machine (see the module docstring)
    staging: bool = False
    #: runs synced at once when ``--jobs`` is not given (measured: docs/performance.md)
    default_jobs: int = 1
    #: the most runs synced at once (None: no limit), and why, said when ``--jobs`` asks for more
    max_jobs: int | None = None
    why_max_jobs: str | None = None
    #: why one sync at a time must hold the whole destination (and sync one run at a time), or None
    one_writer: str | None = None
    #: SDK modules imported once before worker threads start (a first import racing in several
    #: threads can see a partly initialised module)
    preimport: tuple[str, ...] = ()
    #: kinds the target stores as local part files unchanged (the team store): a part none of
    #: whose rows are acknowledged goes to ``send`` as a :class:`WholePart` (its bytes and row
    #: ids, never decoded); the other rows go as tables. ``reconcile`` may answer a WholePart
    #: with the rows it lacks as a table.
    whole_parts: tuple[str, ...] = ()
    #: the target reconciles what it holds of a kind at once, whatever the batches (the team
    #: store reads its parts' row ids): the engine marks every row a pass sends of a run in
    #: doubt in one durable write, instead of one per batch (docs/sync.md, "Exactly once").
    #: Not with ``merge_steps``, whose batches stay one doubt each
    doubt_per_run: bool = False
    #: with ``doubt_per_run``: a run's batches are sent up to this many at once, on threads a
    #: sync's workers share, and acknowledged as each answer comes (the run's last save stores
    #: them). For a target whose requests are independent and whose ``send`` is thread-safe
    #: (the team store: create-only objects); 1 sends one batch after the other
    concurrent_sends: int = 1
    #: the sync's work for this target is CPU in this process (decoding, merging and encoding
    #: parts: the team store), not waiting on a server: ``--jobs`` workers are spread over up to
    #: one process per core (sync/parallel.py), each with its own adapter made from the
    #: :class:`TargetOptions` alone. Threads of one process share one interpreter lock: on a
    #: replication bound by the CPU, eight threads spent a third more CPU than one
    #: (docs/performance.md, "Team store")
    processes: bool = False


@dataclass
class TargetOptions:
    """Settings common to all targets, from CLI flags (adapters read their own env vars)."""

    uri: str | None = None          # MLflow tracking URI / wandb base URL / SwanLab host
    project: str | None = None      # override the remote project (wandb/SwanLab)
    entity: str | None = None       # wandb entity / SwanLab workspace
    mode: str | None = None         # offline/local modes of wandb and SwanLab
    logdir: str | None = None       # where offline modes write
    proxy: str | None = None
    timeout: float = 30.0
    store_root: str | None = None


@runtime_checkable
class Target(Protocol):
    """What the engine calls on a target; each method's contract is in the module docstring."""

    name: str

    @property
    def capabilities(self) -> Capabilities: ...
    def destination(self) -> str: ...
    def check_online(self) -> None: ...
    def prepare(self, run, cursor, metric_keys: MetricKeys | None = None) -> None: ...
    def open_run(self, run, cursor) -> str: ...
    def sync_metadata(self, run, cursor) -> list[str]: ...
    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult: ...
    def reconcile(self, kind: str, rows, cursor, batch_id: str): ...
    def finish_run(self, run, cursor, status: str) -> None: ...
    def close_run(self, cursor) -> None: ...
    def verify(self, run, cursor) -> dict[str, int]: ...
    def upload_command(self, cursor) -> str | None: ...
    def view(self, cursor) -> list[str]: ...
    def unsupported(self, kind: str, rows) -> dict[str, int]: ...
    def close(self) -> None: ...


class Adapter:
    """Base class of sync targets: the defaults of :class:`Target`'s optional methods and the
    class attributes the engine reads. See the module docstring for each method's contract."""

    name: ClassVar[str] = ""
    #: what the target can do (:class:`Capabilities`); see :attr:`capabilities`
    CAPABILITIES: ClassVar[Capabilities] = Capabilities()

    def __init__(self, options: TargetOptions):
        self.options = options

    @property
    def capabilities(self) -> Capabilities:
        """The record the engine reads: :attr:`CAPABILITIES`, unless the destination changes it."""
        return self.CAPABILITIES

    def batch_size(self, kind: str, requested: int | None = None) -> int:
        limit = self.capabilities.batch_sizes.get(kind, 500)
        return max(1, min(limit, requested)) if requested else limit

    def destination(self) -> str:
        raise NotImplementedError

    def upload_command(self, cursor) -> str | None:
        return None

    def view(self, cursor) -> list[str]:
        return []

    def check_online(self) -> None:
        raise NotImplementedError

    def open_run(self, run, cursor) -> str:
        raise NotImplementedError

    def sync_metadata(self, run, cursor) -> list[str]:
        return []

    def send(self, kind: str, rows, cursor, batch_id: str) -> SendResult:
        raise NotImplementedError

    def reconcile(self, kind: str, rows, cursor, batch_id: str):
        raise NotImplementedError

    def finish_run(self, run, cursor, status: str) -> None:
        raise NotImplementedError

    def verify(self, run, cursor) -> dict[str, int]:
        raise NotImplementedError

    def unsupported(self, kind: str, rows) -> dict[str, int]:
        if kind not in self.capabilities.kinds:
            return {f"{self.name} cannot hold {kind}": rows.num_rows} if rows.num_rows else {}
        return {}

    def prepare(self, run, cursor, metric_keys: MetricKeys | None = None) -> None:
        pass

    def close_run(self, cursor) -> None:
        pass

    def close(self) -> None:
        pass

    @contextmanager
    def exclusive(self, what: str) -> Iterator[None]:
        """Work on ``what`` at this destination alone: one worker of this process at a time and,
        when the store is known (``options.store_root``), one process syncing this store at a
        time (the store lock :func:`~trackstore.store.locks.sync_object_lock_name`, which names
        no runs, so gc is not held up). For a remote object several runs share that must be
        created once per destination (an MLflow experiment): look it up, and only under this
        look again and create it. Waits up to :data:`EXCLUSIVE_WAIT_S`, then raises
        :class:`RetryableError`."""
        from trackstore.store import locks

        key = f"{self.name}\0{self.destination()}\0{what}"
        with _EXCLUSIVE_GUARD:
            local = _EXCLUSIVE.setdefault(key, threading.Lock())
        if not local.acquire(timeout=EXCLUSIVE_WAIT_S):
            raise RetryableError(f"waited {EXCLUSIVE_WAIT_S:.0f} s for another worker creating {what}")
        try:
            if self.options.store_root is None:
                yield
                return
            name = locks.sync_object_lock_name(self.name, self.destination(), what)
            try:
                held = locks.acquire(self.options.store_root, name, wait=True, timeout=EXCLUSIVE_WAIT_S,
                                     info={"runs": [], "destination": self.destination(), "target": self.name,
                                           "object": what})
            except LockHeldError as exc:
                raise RetryableError(f"another sync is creating {what}: {exc}") from None
            with held:
                yield
        finally:
            local.release()


#: how long :meth:`Adapter.exclusive` waits for another worker or sync creating the same object
EXCLUSIVE_WAIT_S = 60.0
_EXCLUSIVE: dict[str, threading.Lock] = {}  # one per (target, destination, object), for this process's workers
_EXCLUSIVE_GUARD = threading.Lock()
