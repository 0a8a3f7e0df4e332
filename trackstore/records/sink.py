"""What a record kind needs from a run: the :class:`RecordSink` protocol.

The record kinds (:mod:`~trackstore.records.samples`, :mod:`~trackstore.records.trace`,
:mod:`~trackstore.records.artifacts`) build rows and hand them to a sink; they never import the
write path. :class:`trackstore.Run` is the sink they are given: it implements every member
below with public methods, and nothing else of a run is used by a record kind. Imports point
one way: ``trackstore.write`` may import ``trackstore.records``, never the reverse.

The promises a sink keeps for a record kind:

* ``append(kind, row)`` buffers one row of ``kind`` (``"samples"``, ``"spans"``,
  ``"artifacts"``, ...; the columns of :mod:`trackstore.store.schema`) and returns at once. It
  raises :class:`~trackstore.errors.UsageError` once the run is finished, and never for disk
  trouble (the writer reports that at ``finish``).
* ``on_finish(callback)`` calls ``callback()`` when the run finishes, before it closes: the
  sink still takes ``append`` then, so a kind can write what it holds (tracing writes its open
  spans as ``unfinished``). Callbacks run once, in the order they were registered, in the
  thread that finishes the run; one that raises is reported and the others still run. A
  callback registered after the run finished is never called.
* ``record_state(key, factory)`` is the kind's own per-run state: the first call with ``key``
  stores and returns ``factory()``, every later call returns that same object (thread-safe;
  ``factory`` must not call ``record_state``).
  The state lives exactly as long as the run object, so a kind keeps no registry of runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    from ..store.layout import RunPaths

T = TypeVar("T")


@runtime_checkable
class RecordSink(Protocol):
    """The part of a run that record kinds use (implemented by :class:`trackstore.Run`)."""

    @property
    def id(self) -> str:
        """The run id."""
        ...

    @property
    def project(self) -> str:
        """The run's project."""
        ...

    @property
    def paths(self) -> RunPaths:
        """Where the run lives on disk (:class:`trackstore.store.layout.RunPaths`)."""
        ...

    @property
    def writer_id(self) -> str:
        """The id of this process's writer of the run (in every file name it writes)."""
        ...

    @property
    def step(self) -> int:
        """The step a record without an explicit step belongs to (the run's counter)."""
        ...

    @property
    def finished(self) -> bool:
        """True once the run is finished (or is a forked copy that may not write)."""
        ...

    @property
    def flush_interval(self) -> float:
        """Seconds between two flushes of the writer: what is buffered reaches disk within it."""
        ...

    def append(self, kind: str, row: dict) -> None:
        """Buffer one row of ``kind``; :class:`~trackstore.errors.UsageError` once finished."""
        ...

    def flush(self) -> bool:
        """Write everything buffered now (blocking); True if it all reached the disk."""
        ...

    def on_finish(self, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` when the run finishes, before it stops taking rows."""
        ...

    def record_state(self, key: str, factory: Callable[[], T]) -> T:
        """The per-run state a record kind keeps under ``key`` (made by ``factory`` on first use)."""
        ...
