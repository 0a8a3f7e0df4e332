"""The buffered, crash-safe write path: in-memory column buffers and a background flush thread.

The promise this module keeps:

* ``log_metrics``/``append`` only append to Python lists under a short lock; they never touch
  the disk, never import pyarrow and never raise for I/O trouble.
* A background thread turns the buffers into Parquet part files every ``flush_interval``
  seconds (or sooner when ``flush_rows`` points are waiting). Each part is written to a temp
  name, fsynced and renamed (:mod:`trackstore.atomic`), so a reader never sees a partial file.
* After ``kill -9`` everything flushed before the kill is on disk and readable; at most the
  last ``flush_interval`` seconds are lost.
* Rows get their per-(writer, kind) ``seq`` numbers when they are taken out of the buffer, and
  a part file's name is derived from its first seq, so a failed write is retried under the same
  name with the same rows: retries never duplicate.
* When the disk fails (full, read-only, quota), the built tables stay in memory (up to
  ``max_pending_bytes``), the writer warns loudly once, keeps retrying, and reports at
  :meth:`close` what it could not write. Beyond the bound, new rows are counted as dropped.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .layout import RunPaths, part_file_name

DEFAULT_FLUSH_INTERVAL = 2.0
DEFAULT_FLUSH_ROWS = 250_000
DEFAULT_MAX_PENDING_BYTES = 1 << 30  # 1 GiB of built-but-unwritten Arrow data


def _warn(msg: str) -> None:
    try:
        sys.stderr.write(f"trackstore: WARNING: {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


@dataclass
class _MetricBuffer:
    """Metrics buffered per ``log`` call: the step and time once per call, keys/values flat."""

    steps: list = field(default_factory=list)
    times: list = field(default_factory=list)
    counts: list = field(default_factory=list)
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class WriteReport:
    """What :meth:`Writer.close` could not do. Empty means everything reached the disk."""

    unwritten_rows: dict[str, int] = field(default_factory=dict)
    dropped_rows: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None

    @property
    def ok(self) -> bool:
        return not any(self.unwritten_rows.values()) and not any(self.dropped_rows.values())

    def describe(self) -> str:
        parts = []
        for kind, n in self.unwritten_rows.items():
            if n:
                parts.append(f"{n} {kind} rows not written")
        for kind, n in self.dropped_rows.items():
            if n:
                parts.append(f"{n} {kind} rows dropped (memory bound reached)")
        if self.last_error:
            parts.append(f"last error: {self.last_error}")
        return "; ".join(parts) or "all data written"


class Writer:
    """Owns one process's buffers and part files for one run. Thread-safe for callers."""

    def __init__(
        self,
        paths: RunPaths,
        writer_id: str,
        *,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        flush_rows: int = DEFAULT_FLUSH_ROWS,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        on_tick: Callable[[], None] | None = None,
        tick_interval: float = 10.0,
    ):
        if flush_interval <= 0:
            raise ValueError("flush_interval must be > 0 seconds")
        self.paths = paths
        self.writer_id = writer_id
        self.flush_interval = float(flush_interval)
        self.flush_rows = int(flush_rows)
        self.max_pending_bytes = int(max_pending_bytes)
        self._on_tick = on_tick
        self._tick_interval = tick_interval
        self._lock = threading.Lock()
        self._io_lock = threading.Lock()  # one flush at a time (thread vs. explicit flush)
        self._metrics = _MetricBuffer()
        self._rows: dict[str, list[dict]] = {}
        self._next_seq: dict[str, int] = {}
        self._pending: list[tuple[str, int, Any]] = []  # (kind, first_seq, pa.Table) not yet on disk
        self._pending_bytes = 0
        self._dropped: dict[str, int] = {}
        self._last_error: str | None = None
        self._failing = False
        self._warned = False
        self.last_values: dict[str, float] = {}
        self.max_step: int | None = None
        self.parts_written = 0
        self._wake = threading.Event()
        self._stop = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"trackstore-writer-{writer_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ called by training code
    def log_metrics(self, step: int, ts: float, keys: Iterable[str], values: Iterable[float], n: int) -> None:
        """Buffer ``n`` points logged at one ``step`` and wall time ``ts`` (seconds)."""
        buf = self._metrics
        with self._lock:
            if self._dropping():
                self._dropped["metrics"] = self._dropped.get("metrics", 0) + n
                return
            buf.steps.append(step)
            buf.times.append(ts)
            buf.counts.append(n)
            buf.keys.extend(keys)
            buf.values.extend(values)
            full = len(buf.values) >= self.flush_rows
        if full:
            self._wake.set()

    def append(self, kind: str, row: dict) -> None:
        """Buffer one row of a non-metric kind (samples, spans, histograms, artifacts)."""
        with self._lock:
            if self._dropping():
                self._dropped[kind] = self._dropped.get(kind, 0) + 1
                return
            self._rows.setdefault(kind, []).append(row)

    def _dropping(self) -> bool:
        return self._failing and self._pending_bytes >= self.max_pending_bytes

    # ------------------------------------------------------------------ flushing
    def flush(self) -> bool:
        """Write everything buffered now, in the caller's thread. True if all of it is on disk."""
        with self._io_lock:
            self._take_buffers()
            return self._write_pending()

    def _loop(self) -> None:
        try:  # pay pyarrow's import (which pulls in pandas, ~0.5 s) now, off the training thread
            import pyarrow as pa

            pa.array([0.0])
        except Exception:
            pass
        last_tick = 0.0
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            if self._stop:
                return
            try:
                self.flush()
            except Exception as exc:  # never let the thread die: that would stop all flushing
                self._record_error(f"unexpected flush error: {exc!r}")
            now = time.monotonic()
            if self._on_tick is not None and now - last_tick >= self._tick_interval:
                last_tick = now
                try:
                    self._on_tick()
                except Exception as exc:
                    self._record_error(f"heartbeat failed: {exc!r}")

    def _take_buffers(self) -> None:
        """Move buffered rows into Arrow tables with seq numbers assigned (under the lock)."""
        with self._lock:
            metrics, self._metrics = self._metrics, _MetricBuffer()
            rows, self._rows = self._rows, {}
        if len(metrics):
            self._queue("metrics", self._metrics_table, metrics, len(metrics))
            self.last_values.update(zip(metrics.keys, metrics.values))
            top = max(metrics.steps)
            self.max_step = top if self.max_step is None else max(self.max_step, top)
        for kind, kind_rows in rows.items():
            if kind_rows:
                self._queue(kind, self._rows_table, (kind, kind_rows), len(kind_rows))

    def _queue(self, kind: str, build: Callable, payload: Any, n: int) -> None:
        first = self._next_seq.get(kind, 0)
        self._next_seq[kind] = first + n
        table = build(payload, first)
        self._pending.append((kind, first, table))
        self._pending_bytes += table.nbytes

    def _metrics_table(self, buf: _MetricBuffer, first_seq: int):
        import pyarrow as pa

        from . import schema

        n = len(buf.values)
        try:
            import numpy as np
        except ImportError:  # pyarrow does not require numpy; fall back to list arithmetic
            np = None
        if np is not None:
            counts = np.asarray(buf.counts, dtype=np.int64)
            steps = pa.array(np.repeat(np.asarray(buf.steps, dtype=np.int64), counts))
            micros = (np.asarray(buf.times, dtype=np.float64) * 1_000_000).astype(np.int64)
            times = pa.array(np.repeat(micros, counts))
            seqs = pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64))
        else:
            step_list: list[int] = []
            time_list: list[int] = []
            for s, t, c in zip(buf.steps, buf.times, buf.counts):
                step_list += [s] * c
                time_list += [int(t * 1_000_000)] * c
            steps, times = pa.array(step_list, pa.int64()), pa.array(time_list, pa.int64())
            seqs = pa.array(range(first_seq, first_seq + n), pa.int64())
        keys = pa.array(buf.keys, pa.string())
        try:
            values = pa.array(buf.values, pa.float64())
        except (OverflowError, pa.ArrowInvalid):  # e.g. an int beyond int64: convert one by one
            values = pa.array([float(v) for v in buf.values], pa.float64())
        writer = pa.repeat(pa.scalar(self.writer_id, pa.string()), n)
        cols = [steps, keys, values, times.cast(schema.TS_TYPE), writer, seqs]
        return pa.Table.from_arrays(cols, schema=schema.with_metadata(schema.METRICS, "metrics"))

    def _rows_table(self, payload: tuple[str, list[dict]], first_seq: int):
        import pyarrow as pa

        from . import schema

        kind, rows = payload
        for i, row in enumerate(rows):
            row["writer"] = self.writer_id
            row["seq"] = first_seq + i
        return pa.Table.from_pylist(rows, schema=schema.with_metadata(schema.SCHEMAS[kind], kind))

    def _write_pending(self) -> bool:
        while self._pending:
            kind, first, table = self._pending[0]
            try:
                write_part(self.paths.kind_dir(kind) / part_file_name(self.writer_id, first), table, kind)
            except OSError as exc:
                self._record_error(f"could not write {kind} part to {self.paths.kind_dir(kind)}: {exc}")
                self._failing = True
                return False
            self._pending.pop(0)
            self._pending_bytes -= table.nbytes
            self.parts_written += 1
        if self._failing:
            self._failing = False
            _warn(f"writing to {self.paths.dir} works again; all buffered data is now on disk")
            self._warned = False
        return True

    def _record_error(self, msg: str) -> None:
        self._last_error = msg
        if not self._warned:
            self._warned = True
            _warn(f"{msg}. Training continues; data is kept in memory (up to "
                  f"{self.max_pending_bytes >> 20} MiB) and written when the disk recovers.")

    # ------------------------------------------------------------------ shutdown
    def close(self, retries: int = 3, retry_delay: float = 0.2) -> WriteReport:
        """Stop the thread and write everything. Idempotent. Never raises for I/O trouble."""
        if not self._closed:
            self._closed = True
            self._stop = True
            self._wake.set()
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=30)
        ok = False
        for attempt in range(max(1, retries)):
            try:
                ok = self.flush()
            except Exception as exc:
                self._record_error(f"flush at close failed: {exc!r}")
                ok = False
            if ok:
                break
            time.sleep(retry_delay * (attempt + 1))
        report = WriteReport(dropped_rows=dict(self._dropped), last_error=None if ok else self._last_error)
        for kind, _first, table in self._pending:
            report.unwritten_rows[kind] = report.unwritten_rows.get(kind, 0) + table.num_rows
        return report

    @property
    def next_seq(self) -> dict[str, int]:
        return dict(self._next_seq)


def write_part(path, table, kind: str) -> None:
    """Write one Arrow table as a zstd Parquet part, atomically (temp -> fsync -> rename)."""
    import pyarrow.parquet as pq

    from . import schema
    from .atomic import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    encodings = {k: v for k, v in schema.ENCODINGS.get(kind, {}).items() if k in table.schema.names}
    dictionary = [n for n in table.schema.names if n not in encodings]

    def _write(f):
        pq.write_table(
            table,
            f,
            compression="zstd",
            use_dictionary=dictionary,
            column_encoding=encodings or None,
            write_statistics=True,
            row_group_size=1 << 20,
        )

    write_atomic(path, _write)
