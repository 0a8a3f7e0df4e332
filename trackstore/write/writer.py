"""The buffered, crash-safe write path: in-memory buffers and a background flush thread.

The promise this module keeps:

* ``log_metrics``/``append`` only append one entry to a Python list (a single atomic
  operation, no lock): they never touch the disk, never import pyarrow and never raise for
  I/O trouble. Because an append is atomic, a signal handler or another thread that flushes
  in the middle of a ``log`` call sees either the whole call or none of it.
* A background thread turns the buffers into Parquet part files every ``flush_interval``
  seconds (or sooner when ``flush_rows`` points are waiting). Each part is written to a temp
  name, fsynced and renamed (:mod:`trackstore.store.atomic`), so a reader never sees a partial file.
* After ``kill -9`` everything flushed before the kill is on disk and readable; at most the
  last ``flush_interval`` seconds are lost.
* Rows get their per-(writer, kind) ``seq`` numbers when they are taken out of the buffer, and
  a part file's name is derived from its first seq, so a failed write is retried under the same
  name with the same rows: retries never duplicate.
* When the disk fails (full, read-only, quota), the built tables stay in memory (up to
  ``max_pending_bytes``), the writer warns loudly once, keeps retrying every flush interval,
  and reports at :meth:`Writer.close` what it could not write. Beyond the bound, new rows are
  counted as dropped (and reported), never silently lost.
* The same thread calls ``on_tick`` (the run's heartbeat) every ``tick_interval`` seconds,
  independently of the flush interval.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Callable, Mapping, cast

from ..store.arrays import column, from_numpy, string_array
from ..store.layout import RunPaths, part_file_name
from ..store.notices import warn
from ..store.parts import write_part
from ..store.vocab import Kind

DEFAULT_FLUSH_INTERVAL = 2.0
DEFAULT_FLUSH_ROWS = 1_000_000  # points; about 70 MB of buffered Python objects at 50 keys per call
DEFAULT_MAX_PENDING_BYTES = 1 << 30  # 1 GiB of built-but-unwritten Arrow data
DEFAULT_TICK_INTERVAL = 10.0
_MAX_LAYOUTS = 10_000  # distinct key layouts remembered between flushes


@dataclass
class WriteReport:
    """What :meth:`Writer.close` could not do. Empty means everything reached the disk."""

    unwritten_rows: dict[str, int] = field(default_factory=dict)
    dropped_rows: dict[str, int] = field(default_factory=dict)
    rejected_rows: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None

    @property
    def ok(self) -> bool:
        return not any(self.lost().values())

    def lost(self) -> dict[str, int]:
        """Rows per kind that are not on disk, whatever the reason."""
        out: dict[str, int] = {}
        for counts in (self.unwritten_rows, self.dropped_rows, self.rejected_rows):
            for kind, n in counts.items():
                if n:
                    out[kind] = out.get(kind, 0) + n
        return out

    def describe(self) -> str:
        parts = []
        for kind, n in self.unwritten_rows.items():
            if n:
                parts.append(f"{n} {kind} rows not written")
        for kind, n in self.dropped_rows.items():
            if n:
                parts.append(f"{n} {kind} rows dropped (memory bound reached while the disk failed)")
        for kind, n in self.rejected_rows.items():
            if n:
                parts.append(f"{n} {kind} rows rejected (values that cannot be stored)")
        if self.last_error:
            parts.append(f"last error: {self.last_error}")
        return "; ".join(parts) or "all data written"


class Writer:
    """Owns one process's buffers and part files for one run. Thread-safe for callers.

    ``ready`` is set once the background thread has imported what flushing and merging will
    need (pyarrow, numpy; about 0.3 s). Nothing the writer does after ``ready`` imports a
    module, so a flush at interpreter shutdown (when Python refuses some imports) converts and
    writes like any other; :func:`trackstore.init` waits for ``ready``, which also makes the
    first flush come ``flush_interval`` after init.
    """

    def __init__(
        self,
        paths: RunPaths,
        writer_id: str,
        *,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        flush_rows: int = DEFAULT_FLUSH_ROWS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        on_tick: Callable[[], None] | None = None,
        tick_interval: float = DEFAULT_TICK_INTERVAL,
        merge_parts: bool = False,
    ):
        if not flush_interval > 0:
            raise ValueError("flush_interval must be > 0 seconds")
        self.paths = paths
        self.writer_id = writer_id
        self.flush_interval = float(flush_interval)
        self.flush_rows = int(flush_rows)
        self.max_pending_bytes = int(max_pending_bytes)
        self._on_tick = on_tick
        self._tick_interval = float(tick_interval)
        # merge this writer's own parts as it goes (trackstore.write.rolling), in this thread
        self._rolling = None
        if merge_parts:
            from .rolling import RollingMerger

            self._rolling = RollingMerger(paths, writer_id)
        self._io_lock = threading.Lock()  # one flush at a time (thread vs. explicit flush)
        self._count_lock = threading.Lock()  # only for the rare dropped-row counters
        # One entry per log call: (step, ts, {key: value}). Appended without a lock (atomic);
        # consumed from the front under _io_lock, so appends racing a flush are never lost.
        self._metrics: list[tuple[int, float, Mapping[str, Any]]] = []
        self._buffered = 0  # approximate points waiting (a wake-up hint, not a count)
        self._rows: dict[str, list[dict]] = {}
        self._next_seq: dict[str, int] = {}
        self._pending: list[tuple[str, int, Any]] = []  # (kind, first_seq, pa.Table) not yet on disk
        self._pending_bytes = 0
        self._dropped: dict[str, int] = {}
        self._rejected: dict[str, int] = {}
        self._last_error: str | None = None
        self._failing = False
        self._warned = False
        self.last_values: dict[str, float] = {}
        # Key layouts (the keys of one log call, in order) seen so far, as integer codes into
        # _key_names: training loops repeat a handful of layouts, so keys are encoded once.
        self._layouts: dict[tuple, int] = {}
        self._layout_codes: list[list[int]] = []
        self._layout_arrays: list = []
        self._key_names: dict[str, int] = {}
        self.max_step: int | None = None
        self.parts_written = 0
        self.ready = threading.Event()
        self._wake = threading.Event()
        self._stop = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"trackstore-writer-{writer_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ called by training code
    def log_metrics(self, step: int, ts: float, values: Mapping[str, Any]) -> None:
        """Buffer the points of one ``log`` call. ``values`` must be the caller's own copy."""
        if self._failing and self._pending_bytes >= self.max_pending_bytes:
            self._count_dropped(Kind.METRICS, len(values))
            return
        self._metrics.append((step, ts, values))
        self._buffered += len(values)
        if self._buffered >= self.flush_rows:
            self._buffered = 0
            self._wake.set()

    def append(self, kind: str, row: dict) -> None:
        """Buffer one row of a non-metric kind (samples, spans, histograms, artifacts)."""
        if self._failing and self._pending_bytes >= self.max_pending_bytes:
            self._count_dropped(kind, 1)
            return
        rows = self._rows.get(kind)
        if rows is None:
            rows = self._rows.setdefault(kind, [])
        rows.append(row)

    def _count_dropped(self, kind: str, n: int) -> None:
        with self._count_lock:
            self._dropped[kind] = self._dropped.get(kind, 0) + n

    # ------------------------------------------------------------------ flushing
    def flush(self, timeout: float | None = None) -> bool:
        """Write everything buffered now, in the caller's thread. True if all of it is on disk.

        ``timeout`` bounds the wait for a flush already running in another thread (e.g. one
        stuck on a hung network filesystem); on timeout nothing is written and False returned.
        """
        if not self._io_lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            self._take_buffers()
            return self._write_pending()
        finally:
            self._io_lock.release()
            if self._rolling is not None and threading.current_thread() is not self._thread and self._rolling.due():
                self._wake.set()  # merges run in the writer's thread, never in the caller's

    def _loop(self) -> None:
        try:
            preload(merging=self._rolling is not None)
        except Exception as exc:  # a broken install: flushes will report it
            self._record_error(f"could not load pyarrow: {exc!r}", disk=False)
        finally:
            self.ready.set()
        now = time.monotonic()
        next_flush = now + self.flush_interval
        next_tick = now + self._tick_interval
        while True:
            woken = self._wake.wait(max(0.0, min(next_flush, next_tick) - time.monotonic()))
            self._wake.clear()
            if self._stop:
                return
            now = time.monotonic()
            if woken or now >= next_flush:
                try:
                    self.flush()
                except Exception as exc:  # never let the thread die: that would stop all flushing
                    self._record_error(f"unexpected flush error: {exc!r}")
                self._roll()
                next_flush = time.monotonic() + self.flush_interval
            if self._on_tick is not None and now >= next_tick:
                try:
                    self._on_tick()
                except Exception as exc:
                    self._record_error(f"heartbeat failed: {exc!r}")
                next_tick = time.monotonic() + self._tick_interval

    def _roll(self) -> None:
        """Rolling merges of this writer's own parts, when due (never during a failing disk)."""
        rolling = self._rolling
        if rolling is None or self._failing or not rolling.due():
            return
        if not self._io_lock.acquire(blocking=False):
            return  # an explicit flush is running: merge after a later one
        try:
            rolling.merge()
        except Exception as exc:
            rolling.enabled = False
            warn(f"merging the part files of run {self.paths.run_id} as it goes stopped ({exc!r}); every row "
                 "is safe in its own file, and finish() or `trackstore compact` merges them later")
        finally:
            self._io_lock.release()

    def _take_buffers(self) -> None:
        """Move buffered rows into Arrow tables with seq numbers assigned (under ``_io_lock``)."""
        buf = self._metrics
        n = len(buf)
        if n:
            batch = buf[:n]
            del buf[:n]  # appends that raced us sit after index n and stay for the next flush
            self._buffered = 0
            points = sum(len(v) for _s, _t, v in batch)
            if points:
                self._queue(Kind.METRICS, self._metrics_table, batch, points)
            top = max(s for s, _t, _v in batch)
            self.max_step = top if self.max_step is None else max(self.max_step, top)
        for kind, rows in list(self._rows.items()):
            n = len(rows)
            if n:
                taken = rows[:n]
                del rows[:n]
                self._queue(kind, self._rows_table, (kind, taken), n)

    def _queue(self, kind: str, build: Callable, payload: Any, n: int) -> None:
        first = self._next_seq.get(kind, 0)
        try:
            table = build(payload, first)
        except Exception as exc:  # a value that cannot be stored: it alone is lost, not its batch
            payload, kept = self._salvage(kind, build, payload)
            self._count_rejected(kind, n - kept, exc)
            if not kept:
                return
            n = kept
            try:
                table = build(payload, first)
            except Exception as exc2:
                self._count_rejected(kind, n, exc2)
                return
        self._next_seq[kind] = first + n
        self._pending.append((kind, first, table))
        self._pending_bytes += table.nbytes

    def _salvage(self, kind: str, build: Callable, payload: Any) -> tuple[Any, int]:
        """What of a batch that failed to convert can be stored: ``(payload, rows kept)``.

        Callers' values are checked when they are logged, so this is a last line of defence
        (a value that changed after the check, a type nobody foresaw): each row or point is
        tried alone and only those that fail are left out.
        """
        if kind == Kind.METRICS:
            kept_batch = []
            kept = 0
            for step, ts, values in payload:
                if not -(1 << 63) <= step < (1 << 63):
                    continue
                good = {k: v for k, v in values.items() if _storable_float(v)}
                if good:
                    kept_batch.append((step, ts, good))
                    kept += len(good)
            return kept_batch, kept
        kind_, rows = payload
        good_rows = []
        for row in rows:
            try:
                build((kind_, [row]), 0)
            except Exception:
                continue
            good_rows.append(row)
        return (kind_, good_rows), len(good_rows)

    def _count_rejected(self, kind: str, n: int, exc: BaseException) -> None:
        if n <= 0:
            return
        with self._count_lock:
            self._rejected[kind] = self._rejected.get(kind, 0) + n
        self._record_error(f"{n} {kind} rows could not be stored and were left out: {exc!r}", disk=False)

    def _metrics_table(self, batch: list, first_seq: int):
        """One Arrow table from many log calls.

        This runs while training goes on and holds the GIL for most of it, so it does as little
        per point as it can: training loops log the same keys in the same order step after
        step, so each distinct key layout is encoded once and the key column is built from
        integer codes (a dictionary array, decoded in C) instead of a million Python strings.
        The last value of each key (the automatic summary) is read from the last call of each
        layout, which is the last call that logged that key.
        """
        import numpy as np
        import pyarrow as pa

        from ..store import schema

        vals = [v for _s, _t, v in batch]
        key_tuples = list(map(tuple, vals))
        per_call = list(map(self._layouts.get, key_tuples))
        if None in per_call:  # layouts not seen before (the first calls, or new keys)
            if len(self._layouts) > _MAX_LAYOUTS:  # keys that change every call: do not hoard
                self._layouts.clear()
                self._layout_codes.clear()
                self._layout_arrays.clear()
                self._key_names.clear()
                per_call = [None] * len(key_tuples)
            names = self._key_names
            for i, keys in enumerate(key_tuples):
                if per_call[i] is None:
                    li = self._layouts.get(keys)
                    if li is None:
                        li = self._layouts[keys] = len(self._layout_codes)
                        self._layout_codes.append([names.setdefault(k, len(names)) for k in keys])
                    per_call[i] = li
        layout_codes = self._layout_codes
        layouts = cast("list[int]", per_call)  # every call's layout is known now
        last_call = {li: i for i, li in enumerate(layouts)}  # the last call of each layout
        counts = [len(layout_codes[li]) for li in layouts]
        n = sum(counts)
        flat = chain.from_iterable(map(dict.values, vals))
        for codes in layout_codes[len(self._layout_arrays):]:
            self._layout_arrays.append(np.asarray(codes, dtype=np.int32))
        indices = from_numpy(np.concatenate(list(map(self._layout_arrays.__getitem__, layouts))), pa.int32())
        values = from_numpy(np.fromiter(flat, np.float64, n), pa.float64())  # raises for an int beyond float range
        c = np.asarray(counts, dtype=np.int64)
        steps = from_numpy(np.repeat(np.fromiter((s for s, _t, _v in batch), np.int64, len(batch)), c), pa.int64())
        micros = (np.fromiter((t for _s, t, _v in batch), np.float64, len(batch)) * 1_000_000).astype(np.int64)
        times = from_numpy(np.repeat(micros, c), schema.TS_TYPE)
        seqs = from_numpy(np.arange(first_seq, first_seq + n, dtype=np.int64), pa.int64())
        wid = self.writer_id.encode("utf-8")  # one string repeated: build its buffers directly
        writer = pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(0, (n + 1) * len(wid), len(wid),
                                                                                      dtype=np.int32)),
                                                        pa.py_buffer(wid * n)])
        for i in sorted(last_call.values()):  # only once every value converted
            self.last_values.update(vals[i])
        keys = pa.DictionaryArray.from_arrays(indices, string_array(list(self._key_names)))
        cols = [steps, keys, values, times, writer, seqs]
        return pa.Table.from_arrays(cols, names=schema.METRIC_POINTS.names)  # write_part applies the schema

    def _rows_table(self, payload: tuple[str, list[dict]], first_seq: int):
        import pyarrow as pa

        from ..store import schema

        kind, rows = payload
        for i, row in enumerate(rows):
            row["writer"] = self.writer_id
            row["seq"] = first_seq + i
        target = schema.with_metadata(schema.SCHEMAS[kind], kind)
        # column(), not Table.from_pylist: pyarrow's list conversion imports pandas when it is
        # installed, which fails at interpreter shutdown (see trackstore.store.arrays.column)
        return pa.Table.from_arrays([column([row.get(f.name) for row in rows], f.type) for f in target],
                                    schema=target)

    def _write_pending(self) -> bool:
        while self._pending:
            kind, first, table = self._pending[0]
            path = self.paths.kind_dir(kind) / part_file_name(self.writer_id, first)
            try:
                write_part(path, table, kind)
            except Exception as exc:  # OSError mostly (full, read-only, quota, EFBIG); keep and retry
                self._failing = True
                self._record_error(f"could not write {kind} part to {self.paths.kind_dir(kind)}: {exc}")
                return False
            self._pending.pop(0)
            self._pending_bytes -= table.nbytes
            self.parts_written += 1
            if self._rolling is not None:
                self._rolling.wrote(kind, path)
        if self._failing:
            self._failing = False
            self._warned = False
            warn(f"writing to {self.paths.dir} works again; all buffered data is now on disk")
        return True

    def _record_error(self, msg: str, disk: bool = True) -> None:
        self._last_error = msg
        if not disk:
            warn(f"{msg}. Training continues; the other rows are stored.")
        elif not self._warned:
            self._warned = True
            warn(f"{msg}. Training continues; data is kept in memory (up to "
                  f"{self.max_pending_bytes >> 20} MiB) and written when the disk recovers.")

    # ------------------------------------------------------------------ shutdown
    def close(self, retries: int = 3, retry_delay: float = 0.2, timeout: float = 60.0) -> WriteReport:
        """Stop the thread and write everything. Idempotent. Never raises for I/O trouble."""
        if not self._closed:
            self._closed = True
            self._stop = True
            self._wake.set()
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=timeout)
        ok = False
        for attempt in range(max(1, retries)):
            try:
                ok = self.flush(timeout=timeout)
                # a log call that passed its run's "finished" check just before finish() set it
                # may append after the flush took the buffers: flush those too
                while ok and self._buffered_counts():
                    ok = self.flush(timeout=timeout)
            except Exception as exc:
                self._record_error(f"flush at close failed: {exc!r}")
                ok = False
            if ok:
                break
            time.sleep(retry_delay * (attempt + 1))
        report = WriteReport(dropped_rows=dict(self._dropped), rejected_rows=dict(self._rejected),
                             last_error=self._last_error if (not ok or self._rejected) else None)
        for kind, _first, table in self._pending:
            report.unwritten_rows[kind] = report.unwritten_rows.get(kind, 0) + table.num_rows
        for kind, n in self._buffered_counts().items():  # left in the buffers (flush timed out)
            report.unwritten_rows[kind] = report.unwritten_rows.get(kind, 0) + n
        return report

    def _buffered_counts(self) -> dict[str, int]:
        out = {kind: len(rows) for kind, rows in self._rows.items() if rows}
        points = sum(len(v) for _s, _t, v in list(self._metrics))
        if points:
            out[Kind.METRICS] = points
        return out

    @property
    def failing(self) -> bool:
        """True while the last write attempt failed (data is being held in memory)."""
        return self._failing

    @property
    def next_seq(self) -> dict[str, int]:
        return dict(self._next_seq)


def _storable_float(v: Any) -> bool:
    try:
        float(v)
    except Exception:
        return False
    return True


def preload(merging: bool) -> None:
    """Import what a flush (and with ``merging``, a merge of parts) will need, so that none of
    it is imported later: at interpreter shutdown some imports fail, and a flush then must not
    be the first to need a module. Also run one conversion of every row kind, which loads
    whatever pyarrow loads lazily on first use."""
    import pyarrow as pa
    import pyarrow.parquet  # noqa: F401

    from ..store import atomic, last_rows, schema  # noqa: F401

    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    for sch in schema.SCHEMAS.values():
        pa.Table.from_arrays([column([], f.type) for f in sch], schema=sch)
    if merging:
        import pyarrow.compute  # noqa: F401

        from ..store import locks, merge, parts  # noqa: F401
        from . import rolling  # noqa: F401
