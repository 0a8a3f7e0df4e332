"""Trajectories as span trees: multi-turn agent rollouts, tool calls, reward computation.

::

    with run.trace(step=10, sample_index=3, rollout_n=0) as tr:          # one trajectory
        with tr.span("assistant", kind="llm", inputs=messages) as s:
            s.set_outputs(reply)                 # or tr.span(..., outputs=reply) when known up front
        result = run_tool(call)              # @traced(kind="tool") nests it under the trace
        tr.set_reward(1.0)

The promises this module keeps:

* Every span is one ``spans`` row (:data:`trackstore.store.schema.SPANS`) with trace id, span id,
  parent span id, name, kind, start/end time in ns since the epoch, status (``ok``, ``error``
  or ``unfinished``), error message, and inputs/outputs/attributes as JSON text kept whole.
* Parents come from a :class:`contextvars.ContextVar`, so ``@traced`` functions find their
  parent without being passed anything, and concurrent trajectories (threads, or asyncio tasks
  under ``asyncio.gather``) never mix: each task runs in its own copy of the context.
* A span still open when its process dies is not lost: a per-run checkpointer writes an
  ``unfinished`` row for every span that stays open longer than half a flush interval, so it
  reaches disk with the next flush. When the span ends, its final row follows. Readers keep
  one row per ``(trace_id, span_id)``: the final row if there is one, else the checkpoint
  (:func:`latest_rows` does this in Python; the ``spans`` SQL view does it in DuckDB). Spans
  that end before the checkpointer looks at them (most of them) are written once. When the
  run finishes (also at exit and on SIGTERM) the spans still open are checkpointed first: the
  checkpointer registers that with :meth:`~trackstore.records.sink.RecordSink.on_finish` when a
  run's first span starts.
* Tracing never raises into training for disk trouble; the caller's own mistakes (a bad
  ``kind``, a step, ``sample_index`` or ``rollout_n`` beyond int64, a reward too large for a
  float64, a finished run) raise :class:`~trackstore.errors.TrackstoreError` subclasses early,
  before anything of that trace is buffered.
  An exception inside a span is recorded (status ``error``) and re-raised unchanged.
* :func:`configure` sets, per run, a bounded sampler (``max_samples_per_step``, deterministic
  by ``seed``: which trajectories are kept depends only on the seed, the step and the sample
  indices, never on timing) and a ``token2text`` hook that decodes token-id fields
  (``prompt_ids`` -> ``prompt_text``...) with a tokenizer the caller passes.

A trace writes through a record sink (:class:`~trackstore.records.sink.RecordSink`, which
:class:`trackstore.Run` implements), and keeps its per-run settings and open spans in the run's
own record state, so they live and die with the run.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import os
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

from ..errors import InvalidValueError, UsageError
from ..store.clock import ts_now
from ..store.notices import warn
from ..store.values import as_index, as_step
from ..store.vocab import Kind
from .samples import as_score, clean_text, encode_json, plain
from .sink import RecordSink

SPAN_KINDS = ("llm", "tool", "reward", "agent", "other")
STATUSES = ("ok", "error", "unfinished")
TOKEN_FIELDS = ("prompt_ids", "response_ids", "token_ids", "input_ids", "output_ids", "completion_ids")

F = TypeVar("F", bound=Callable[..., Any])
_UNSET: Any = object()
_current: contextvars.ContextVar[Span | None] = contextvars.ContextVar("trackstore_current_span", default=None)


# Ids come from a per-process PRNG seeded once from os.urandom (reseeded in forked children):
# os.urandom costs ~100 us per call on some VMs, more than the rest of a span.
_rng = random.Random(os.urandom(32))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))


def new_trace_id() -> str:
    return f"{_rng.getrandbits(128):032x}"


def new_span_id() -> str:
    return f"{_rng.getrandbits(64):016x}"


class Sampler:
    """Keeps at most ``max_per_step`` sample indices per step, with all their rollouts.

    Deterministic by ``seed``: when the step's batch is announced with :meth:`plan` (as verl's
    agent loop knows its batch), the kept indices are the ``max_per_step`` with the smallest
    seeded hash of ``(seed, step, sample_index)``, whatever the order trajectories run in.
    Without a plan, the first ``max_per_step`` distinct indices seen at the step are kept.
    A trace without a sample index counts as its own index.
    """

    KEEP_STEPS = 64  # state is kept for this many recent steps

    def __init__(self, max_per_step: int, seed: int = 0):
        if isinstance(max_per_step, bool) or not isinstance(max_per_step, int) or max_per_step < 0:
            raise InvalidValueError(f"max_samples_per_step must be an integer >= 0, got {max_per_step!r}")
        self.max_per_step = max_per_step
        self.seed = int(seed)
        self._lock = threading.Lock()
        self._chosen: dict[int, set] = {}
        self._planned: set[int] = set()

    def priority(self, step: int, sample_index: Any) -> int:
        h = hashlib.blake2b(f"{self.seed}:{step}:{sample_index}".encode(), digest_size=8)
        return int.from_bytes(h.digest(), "big")

    def plan(self, step: int, sample_indices: Iterable[Any]) -> set:
        """Announce the sample indices of ``step``'s batch; returns the set that will be traced."""
        unique = list(dict.fromkeys(sample_indices))
        chosen = set(sorted(unique, key=lambda i: self.priority(step, i))[: self.max_per_step])
        with self._lock:
            self._chosen[step] = chosen
            self._planned.add(step)
            self._trim()
        return set(chosen)

    def keep(self, step: int, sample_index: Any) -> bool:
        key = object() if sample_index is None else sample_index
        with self._lock:
            chosen = self._chosen.setdefault(step, set())
            if key in chosen:
                return True
            if step in self._planned or len(chosen) >= self.max_per_step:
                return False
            chosen.add(key)
            self._trim()
            return True

    def _trim(self) -> None:
        while len(self._chosen) > self.KEEP_STEPS:
            oldest = min(self._chosen)
            del self._chosen[oldest]
            self._planned.discard(oldest)


@dataclass
class TraceSettings:
    """What :func:`configure` set for one run."""

    sampler: Sampler | None = None
    token2text: Any = None  # an object with .decode(ids), or a callable ids -> str
    skip_special_tokens: bool = True


class _RunTracing:
    """What tracing keeps per run, as the run's record state: :func:`configure`'s settings and
    the open spans with their checkpointer (made when the run's first span starts)."""

    def __init__(self) -> None:
        self.settings: TraceSettings | None = None
        self.open: _OpenSpans | None = None


_STATE = "trace"  # record_state key


def _tracing(run: RecordSink) -> _RunTracing:
    return run.record_state(_STATE, _RunTracing)


def configure(run: RecordSink, *, max_samples_per_step: int | None = None, seed: int = 0, token2text: Any = None,
              skip_special_tokens: bool = True) -> TraceSettings:
    """Set tracing options for ``run``: a bounded sampler and a token-decoding hook.

    ``max_samples_per_step=None`` traces everything. ``token2text`` is a tokenizer (anything
    with ``decode(ids, skip_special_tokens=...)``) or a callable ``ids -> str``; it adds
    ``<x>_text`` next to each ``<x>_ids`` list of integers in span inputs and outputs.
    """
    if token2text is not None and not (callable(getattr(token2text, "decode", None)) or callable(token2text)):
        raise InvalidValueError("token2text must be a tokenizer with .decode(ids) or a callable ids -> str")
    s = TraceSettings(
        sampler=None if max_samples_per_step is None else Sampler(max_samples_per_step, seed),
        token2text=token2text,
        skip_special_tokens=skip_special_tokens,
    )
    _tracing(run).settings = s
    return s


def _decode(tok: Any, ids: list, skip: bool) -> str:
    decode = getattr(tok, "decode", None)
    if callable(decode):
        try:
            return decode(ids, skip_special_tokens=skip)
        except TypeError:
            return decode(ids)
    return tok(ids)


def _with_text(value: Any, settings: TraceSettings | None) -> Any:
    """``value`` (made plain) with ``<x>_text`` added for each ``<x>_ids`` token list."""
    if settings is None or settings.token2text is None:
        return value
    value = plain(value)
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for key in TOKEN_FIELDS:
        ids = out.get(key)
        text_key = key[: -len("_ids")] + "_text"
        if text_key in out or not isinstance(ids, list) or not all(type(i) is int for i in ids):
            continue
        try:
            out[text_key] = _decode(settings.token2text, ids, settings.skip_special_tokens)
        except Exception as exc:  # a broken tokenizer must not break the rollout
            out[f"{text_key}_error"] = f"{type(exc).__name__}: {exc}"
    return out


# ---------------------------------------------------------------------- open-span checkpoints
class _OpenSpans:
    """The spans of one run that are open, and the thread that checkpoints the long-lived ones."""

    def __init__(self, run: RecordSink):
        self.lock = threading.Lock()
        self.spans: dict[str, Span] = {}
        self.interval = max(0.05, float(run.flush_interval) / 2)
        self._run_ref = weakref.ref(run)
        self._thread = threading.Thread(target=self._loop, name="trackstore-span-checkpoint", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            run = self._run_ref()
            if run is None or run.finished:
                return
            self.checkpoint(min_age_s=self.interval)
            del run

    def checkpoint(self, min_age_s: float = 0.0, timeout: float = -1) -> int:
        """Append an ``unfinished`` row for each open span older than ``min_age_s`` not yet written.

        ``timeout`` bounds the wait for the lock (a signal handler may have interrupted a
        thread that holds it: then nothing is done rather than deadlocking).
        """
        cutoff = time.time_ns() - int(min_age_s * 1e9)
        n = 0
        if not self.lock.acquire(timeout=timeout):
            return 0
        try:
            for span in list(self.spans.values()):
                if not span._checkpointed and span.start_ns <= cutoff:
                    span._checkpointed = True
                    if span._write("unfinished"):
                        n += 1
        finally:
            self.lock.release()
        return n


    def checkpoint_before_finish(self) -> None:
        """The run's finish callback: spans still open are written as ``unfinished``."""
        try:
            self.checkpoint(timeout=0.5)
        except Exception as exc:  # finishing must go on whatever happens here
            warn(f"could not record open spans at finish: {exc!r}")


_open_lock = threading.Lock()


def _open_spans(run: RecordSink) -> _OpenSpans:
    """The run's open spans, made (with the checkpointer, registered to run at finish) on first use."""
    state = _tracing(run)
    with _open_lock:
        reg = state.open
        if reg is None:
            reg = state.open = _OpenSpans(run)
            run.on_finish(reg.checkpoint_before_finish)
        return reg


def checkpoint_open_spans(run: RecordSink) -> int:
    """Write an ``unfinished`` row now for every open span of ``run`` (e.g. before a risky call).

    Returns how many rows were buffered; ``run.flush()`` puts them on disk.
    """
    reg = _tracing(run).open
    return reg.checkpoint() if reg is not None else 0


def checkpoint_before_finish(run: RecordSink) -> None:
    """Write the spans of ``run`` still open as ``unfinished`` (never raises). :meth:`Run.finish`
    (also at exit and on SIGTERM) does this just before the run closes, through the callback
    the checkpointer registers with ``run.on_finish``: ending a run mid-trajectory loses none."""
    reg = _tracing(run).open
    if reg is not None:
        reg.checkpoint_before_finish()


# ---------------------------------------------------------------------- spans
class Span:
    """One operation in a trajectory. Use as a context manager, or call :meth:`end`."""

    def __init__(self, trace: Trace, name: str, kind: str, parent: Span | None, inputs: Any = _UNSET,
                 attributes: Mapping[str, Any] | None = None, outputs: Any = _UNSET):
        self.trace = trace
        self.name = _check_name(name)
        self.kind = _check_kind(kind)
        self.parent = parent
        self.span_id = new_span_id()
        self.inputs = inputs
        self.outputs: Any = outputs
        self.attributes: dict[str, Any] = dict(attributes or {})
        self.start_ns: int = 0
        self.end_ns: int | None = None
        self.status = "unfinished"
        self.error: str | None = None
        self._checkpointed = False
        self._ended = False
        self._token: contextvars.Token | None = None

    @property
    def recording(self) -> bool:
        return self.trace.recording

    @property
    def parent_span_id(self) -> str | None:
        return None if self.parent is None else self.parent.span_id

    def __repr__(self) -> str:
        return f"<trackstore.Span {self.name!r} kind={self.kind} status={self.status}>"

    # -------------------------------------------------------------- what the caller records
    def set_inputs(self, inputs: Any) -> Span:
        self.inputs = inputs
        return self

    def set_outputs(self, outputs: Any) -> Span:
        self.outputs = outputs
        return self

    def set_attribute(self, key: str, value: Any) -> Span:
        self.attributes[str(key)] = value
        return self

    def set_attributes(self, attributes: Mapping[str, Any] | None = None, **kw: Any) -> Span:
        self.attributes.update({str(k): v for k, v in dict(attributes or {}, **kw).items()})
        return self

    def set_error(self, error: BaseException | str) -> Span:
        """Mark the span failed (done automatically when an exception leaves the ``with``)."""
        self.status = "error"
        self.error = _error_text(error)
        return self

    def span(self, name: str, kind: str = "other", inputs: Any = _UNSET, outputs: Any = _UNSET,
             attributes: Mapping[str, Any] | None = None) -> Span:
        """A child of this span (not yet started: use it in a ``with``). ``outputs`` may be
        given now or set later with :meth:`set_outputs`."""
        return Span(self.trace, name, kind, self, inputs=inputs, attributes=attributes, outputs=outputs)

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Span:
        """Start the span now (``with`` does this). It may be checkpointed from now on."""
        if self.start_ns:
            raise UsageError(f"span {self.name!r} was already started")
        self.start_ns = time.time_ns()
        if self.recording:
            reg = _open_spans(self.trace.run)
            with reg.lock:
                reg.spans[self.span_id] = self
        return self

    def end(self, status: str | None = None, error: BaseException | str | None = None) -> None:
        """Finish the span (idempotent) and buffer its final row."""
        if status is not None and status not in ("ok", "error"):
            raise InvalidValueError(f"span status must be 'ok' or 'error', got {status!r}")
        if self._ended:
            return
        if not self.start_ns:
            self.start()
        self._ended = True
        self.end_ns = time.time_ns()
        if error is not None:
            self.set_error(error)
        if status is not None:
            self.status = status
        elif self.status == "unfinished":
            self.status = "ok"
        if self.recording:
            reg = _open_spans(self.trace.run)
            with reg.lock:
                reg.spans.pop(self.span_id, None)
                self._write(self.status)

    def __enter__(self) -> Span:
        self.start()
        self._token = _current.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            self.end(error=exc)
        finally:
            if self._token is not None:
                _reset(self._token)
                self._token = None

    # -------------------------------------------------------------- the row
    def _row(self, status: str, with_data: bool = True) -> dict:
        tr = self.trace
        settings = tr._settings
        attrs = self.attributes
        if self.parent is None and tr.attributes:
            attrs = {**tr.attributes, **attrs}
        final = status != "unfinished"
        return {
            "trace_id": tr.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "name": self.name,
            "kind": self.kind,
            "step": tr.step,
            "sample_index": tr.sample_index,
            "rollout_n": tr.rollout_n,
            "validate": tr.validate,
            "reward": tr.reward if self.parent is None else None,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns if final else None,
            "status": status,
            "error": self.error if final else None,
            "inputs": (None if (self.inputs is _UNSET or not with_data)
                       else encode_json(_with_text(self.inputs, settings))),
            "outputs": (None if (self.outputs is _UNSET or not final or not with_data)
                        else encode_json(_with_text(self.outputs, settings))),
            "attributes": encode_json(attrs) if (attrs and with_data) else None,
            "ts": ts_now(),
        }

    def _write(self, status: str) -> bool:
        try:
            row = self._row(status)
        except Exception as exc:  # e.g. the caller mutating its inputs while a checkpoint reads them
            warn(f"span {self.name!r}: could not encode its data ({exc!r}); this row is stored without it")
            row = self._row(status, with_data=False)
        try:
            self.trace.run.append(Kind.SPANS, row)
            return True
        except UsageError:
            warn(f"span {self.name!r} ended after run {self.trace.run.id} finished; it was not recorded")
            return False


def _reset(token: contextvars.Token) -> None:
    try:
        _current.reset(token)
    except ValueError:  # ended in another context (e.g. a generator closed elsewhere)
        _current.set(None)


# ---------------------------------------------------------------------- traces
class Trace:
    """One trajectory. Create with :meth:`trackstore.Run.trace`; use as a (async) context manager.

    ``validate`` marks validation rollouts, ``reward`` (settable later with :meth:`set_reward`)
    is stored on the root span, other keyword arguments become the root span's attributes.
    """

    def __init__(self, run: RecordSink, step: int | None = None, sample_index: int | None = None,
                 rollout_n: int | None = None, name: str = "episode", *, validate: bool = False,
                 reward: Any = None, **attrs: Any):
        if run.finished:
            raise UsageError(f"run {run.id} is finished; traces cannot be added to it")
        self.run = run
        self.step = as_step(run.step if step is None else step)
        self.sample_index = None if sample_index is None else as_index(sample_index, "sample_index")
        self.rollout_n = None if rollout_n is None else as_index(rollout_n, "rollout_n")
        if not isinstance(validate, bool):
            raise InvalidValueError(f"validate must be True or False, got {validate!r}")
        self.validate = validate
        self.reward = as_score(reward, "trace reward")
        self.attributes: dict[str, Any] = dict(attrs)
        self.trace_id = new_trace_id()
        self._settings = _tracing(run).settings
        sampler = self._settings.sampler if self._settings else None
        self.recording = True if sampler is None else sampler.keep(self.step, self.sample_index)
        self.root = Span(self, name, "agent", None)

    @property
    def name(self) -> str:
        return self.root.name

    def __repr__(self) -> str:
        return f"<trackstore.Trace {self.name!r} step={self.step} sample_index={self.sample_index}>"

    def set_reward(self, reward: Any) -> Trace:
        self.reward = as_score(reward, "trace reward")
        return self

    def set_attributes(self, attributes: Mapping[str, Any] | None = None, **kw: Any) -> Trace:
        self.attributes.update({str(k): v for k, v in dict(attributes or {}, **kw).items()})
        return self

    def set_inputs(self, inputs: Any) -> Trace:
        self.root.set_inputs(inputs)
        return self

    def set_outputs(self, outputs: Any) -> Trace:
        self.root.set_outputs(outputs)
        return self

    def span(self, name: str, kind: str = "other", inputs: Any = _UNSET, outputs: Any = _UNSET,
             attributes: Mapping[str, Any] | None = None) -> Span:
        """A new span under the innermost open span of this trace (the root if none).
        ``outputs`` may be given now or set later with :meth:`Span.set_outputs`.

        A trace used without ``with``/:meth:`start` is started here, so its spans are never
        orphans; end it with :meth:`end` (else it is kept as ``unfinished`` when the run ends).
        """
        if not self.root.start_ns:
            self.root.start()
        return Span(self, name, kind, self._parent(), inputs=inputs, attributes=attributes, outputs=outputs)

    def _parent(self) -> Span:
        cur = _current.get()
        if cur is not None and cur.trace is self and not cur._ended:
            return cur
        return self.root

    def traced(self, fn: Callable | None = None, *, name: str | None = None, kind: str = "other",
               capture_inputs: bool = True, capture_outputs: bool = True):
        """Decorator: calls of ``fn`` become spans of this trace (see :func:`traced`)."""
        return traced(fn, name=name, kind=kind, capture_inputs=capture_inputs, capture_outputs=capture_outputs,
                      _trace=self)

    # -------------------------------------------------------------- lifecycle
    def __enter__(self) -> Trace:
        self.root.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.root.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> Trace:
        return self.__enter__()

    async def __aexit__(self, exc_type, exc, tb) -> None:
        self.__exit__(exc_type, exc, tb)

    def start(self) -> Trace:
        """Start the trajectory without a ``with`` block (it does not become the context's
        current trace: create its spans with :meth:`span` and ``start()``/``end()`` them)."""
        self.root.start()
        return self

    def end(self, status: str | None = None, error: BaseException | str | None = None) -> None:
        """End the trajectory without a ``with`` block."""
        self.root.end(status=status, error=error)


def current_span() -> Span | None:
    """The innermost open span in this context (thread or asyncio task), or None."""
    return _current.get()


def current_trace() -> Trace | None:
    span = _current.get()
    return None if span is None else span.trace


# ---------------------------------------------------------------------- the decorator
def traced(fn: Callable | None = None, *, name: str | None = None, kind: str = "other", capture_inputs: bool = True,
           capture_outputs: bool = True, _trace: Trace | None = None):
    """Trace calls of a sync or async function as spans: ``@traced`` or ``@traced(kind="tool")``.

    Inside an open trace (found through the context, so concurrent trajectories stay apart) a
    call becomes a child span of the innermost open span, named ``name`` or the function's
    qualified name, with its bound arguments as inputs (``self``/``cls`` left out) and its
    return value as outputs. Outside any trace the function runs untouched.
    """
    _check_kind(kind)

    def decorate(f: F) -> F:
        span_name = name or getattr(f, "__qualname__", None) or repr(f)
        try:
            sig = inspect.signature(f)
        except (TypeError, ValueError):
            sig = None

        def open_span(args: tuple, kwargs: dict) -> Span | None:
            cur = _current.get()
            parent: Span | None
            if _trace is not None:  # bound to one trace: traced while it is open, plain after
                if _trace.root._ended or not _trace.root.start_ns:
                    return None
                parent = cur if (cur is not None and cur.trace is _trace and not cur._ended) else _trace.root
            else:
                parent = cur
            if parent is None or not parent.recording:
                return None
            inputs = _bind(sig, args, kwargs) if capture_inputs else _UNSET
            return Span(parent.trace, span_name, kind, parent, inputs=inputs)

        if inspect.iscoroutinefunction(f):
            @functools.wraps(f)
            async def async_wrapper(*args, **kwargs):
                span = open_span(args, kwargs)
                if span is None:
                    return await f(*args, **kwargs)
                with span:
                    result = await f(*args, **kwargs)
                    if capture_outputs:
                        span.set_outputs(result)
                    return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            span = open_span(args, kwargs)
            if span is None:
                return f(*args, **kwargs)
            with span:
                result = f(*args, **kwargs)
                if capture_outputs:
                    span.set_outputs(result)
                return result

        return wrapper  # type: ignore[return-value]

    return decorate(fn) if fn is not None else decorate


def _bind(sig: inspect.Signature | None, args: tuple, kwargs: dict) -> Any:
    if sig is None:
        return {"args": list(args), "kwargs": kwargs}
    try:
        bound = sig.bind_partial(*args, **kwargs)
    except TypeError:
        return {"args": list(args), "kwargs": kwargs}
    out = dict(bound.arguments)
    params = list(sig.parameters)
    if params and params[0] in ("self", "cls"):
        out.pop(params[0], None)
    for p in sig.parameters.values():  # flatten **kwargs into the inputs, as people read them
        if p.kind is inspect.Parameter.VAR_KEYWORD and p.name in out:
            out.update(out.pop(p.name))
    return out


# ---------------------------------------------------------------------- readers
def latest_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict]:
    """One row per ``(trace_id, span_id)``: the final row if written, else the ``unfinished`` one.

    The same rule as the ``spans`` SQL view, for code that reads the Parquet parts directly.
    Among rows of equal rank the one with the highest ``seq`` wins; input order is kept.
    """
    best: dict[tuple, dict] = {}
    order: list[tuple] = []
    for r in rows:
        key = (r["trace_id"], r["span_id"])
        rank = (r["status"] != "unfinished", r.get("seq", 0))
        old = best.get(key)
        if old is None:
            order.append(key)
            best[key] = dict(r)
        elif rank > (old["status"] != "unfinished", old.get("seq", 0)):
            best[key] = dict(r)
    return [best[k] for k in order]


# ---------------------------------------------------------------------- validation helpers
def _check_kind(kind: Any) -> str:
    if kind not in SPAN_KINDS:
        raise InvalidValueError(f"span kind must be one of {', '.join(SPAN_KINDS)}, got {kind!r}")
    return kind


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidValueError(f"span name must be a non-empty string, got {name!r:.60}")
    return clean_text(name)


def _error_text(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        msg = str(error)
        return clean_text(f"{type(error).__name__}: {msg}" if msg else type(error).__name__)
    return clean_text(str(error))
