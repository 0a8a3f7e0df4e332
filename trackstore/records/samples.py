"""Text generations as records: ``run.log_samples(rows, step=..., split="val")``.

The promise: what was logged is what a reader gets back. Each row becomes one ``samples`` row
(:data:`trackstore.store.schema.SAMPLES`) with its step, split, sample index and time:

* a row is a dict with ``input`` and ``output`` (``score`` optional; every other field is kept
  in ``extra``, a JSON object), or an ``(input, output[, score])`` tuple as verl's validation
  logger produces; a pandas DataFrame is read as its records;
* text of any length and language is stored whole; a non-text ``input``/``output`` (a chat
  message list, a dict) is stored as JSON text and named in ``json_fields``, so
  :func:`decode_row` gives back the same structure;
* ``score`` is a float (NaN kept as NaN), ``NULL`` when absent; ``step`` and ``sample_index``
  are 64-bit integers (negative allowed), and an int score must fit a float64;
* the whole call is validated before anything is buffered: a bad row raises
  :class:`~trackstore.errors.InvalidValueError` naming the row, and nothing of that call is
  stored. Disk trouble never raises here (the writer reports it at ``finish``).

An :class:`trackstore.Image` anywhere in a row (a field of its own, or inside ``input``: a VLM
prompt) is stored as a file of the run and the row holds a reference to it
(:func:`trackstore.records.images.swap_images`).

``sample_index`` counts per ``(step, split)`` across calls of this process (a row's own
``sample_index`` wins), so two calls at one step do not collide. The counters are the run's
own state (:meth:`~trackstore.records.sink.RecordSink.record_state`): they live and die with the run.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any, Iterable, Mapping

from ..errors import InvalidValueError, UsageError
from ..store.text import escape_surrogates, storable
from ..store.values import INT64_MAX, as_index, as_step, json_safe, to_float64
from ..store.vocab import Kind
from .images import store_files, swap_images
from .sink import RecordSink

RESERVED = ("input", "output", "score", "sample_index")
MAX_SPLIT_CHARS = 128

_COUNTERS = "samples.next_index"  # record_state key: {(step, split): next free sample_index}
_counters_lock = threading.Lock()


# ---------------------------------------------------------------------- text and JSON helpers
def clean_text(s: str) -> str:
    """``s`` as it is stored: lone surrogates escaped (:func:`trackstore.store.text.escape_surrogates`).

    Arrow strings are UTF-8, and a string that cannot be encoded would fail later in the writer
    thread, losing the whole part; so the escaping happens here, on the caller's thread.
    """
    return escape_surrogates(s)


def plain(value: Any, _depth: int = 0) -> Any:
    """A JSON-ready copy of ``value``: pydantic models and dataclasses become dicts first."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if _depth > 64:  # a cycle, or absurd nesting
        return repr(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            value = dump()
        except Exception:
            pass
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, _depth + 1) for v in value]
    return json_safe(value)


def _default(obj: Any) -> Any:
    """``json.dumps`` hook for what the C encoder does not know (called for those values only)."""
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, type):
        try:
            return dump()
        except Exception:
            pass
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return json_safe(obj)


def encode_json(value: Any) -> str:
    """JSON text for any value (NaN/Infinity written as such; DuckDB's JSON reads them).

    The C encoder does the work; only unknown objects (numpy/torch values, pydantic models,
    dataclasses) go through :func:`_default`. Odd keys or cycles fall back to :func:`json_safe`.
    Strings holding lone surrogates are escaped inside the value (a JSON reader gets the
    escaped text, as from every other column), not as JSON ``\\udcff`` escapes.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True, separators=(",", ":"), default=_default)
    except (TypeError, ValueError, RecursionError):
        text = json.dumps(json_safe(plain(value)), ensure_ascii=False, allow_nan=True, separators=(",", ":"))
    if clean_text(text) is not text:  # lone surrogates: escape the strings in the value, not the JSON
        text = json.dumps(storable(json.loads(text)), ensure_ascii=False, allow_nan=True, separators=(",", ":"))
    return text


def decode_json(text: str | None) -> Any:
    """Inverse of :func:`encode_json` for readers: the JSON value, or the text itself if it is
    not JSON (``None`` stays ``None``)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def as_score(value: Any, what: str) -> float | None:
    """A float (NaN and inf kept) or None; numpy/torch scalars through ``.item()``; an int too
    large for a float64 is refused. ``what`` names the field in errors (``sample row 3: score``)."""
    if value is None:
        return None
    if isinstance(value, (bool, int, float)):
        return to_float64(what, value)
    item = getattr(value, "item", None)
    if callable(item):
        try:
            v = item()
        except Exception as exc:
            raise InvalidValueError(f"{what} could not be read with .item(): {exc}") from exc
        if isinstance(v, (bool, int, float)):
            return to_float64(what, v)
    raise InvalidValueError(f"{what} must be a number or None, got {type(value).__name__} {value!r:.60}")


def _text(value: Any, field: str, json_fields: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return clean_text(value)
    json_fields.append(field)
    return encode_json(value)


# ---------------------------------------------------------------------- the record kind
def log_samples(run: RecordSink, rows: Iterable[Any], step: int | None = None, split: str = "val", **kw: Any) -> int:
    """Buffer ``rows`` as samples of ``run`` at ``step`` (default: the run's current step).

    ``split`` names the source (``val``, ``train``, ``rollout``...). Returns how many rows were
    stored. Raises :class:`InvalidValueError` for bad rows and :class:`UsageError` for unknown
    keyword arguments, before anything is buffered.
    """
    if kw:
        raise UsageError(f"log_samples got unknown arguments: {', '.join(sorted(kw))}")
    if run.finished:
        raise UsageError(f"run {run.id} is finished; start a new run or resume it to log more samples")
    from ..store.clock import ts_now

    step = as_step(run.step if step is None else step)
    if not isinstance(split, str) or not split or len(split) > MAX_SPLIT_CHARS or not split.isprintable():
        raise InvalidValueError(f"split must be a short printable string such as 'val', got {split!r:.60}")
    rows = _as_rows(rows)
    built: list[dict] = []
    images: list = []  # trackstore.Image values of the rows, stored as files (records.images)
    for i, row in enumerate(rows):
        built.append(_build(swap_images(row, images), i))
    if not built:
        return 0
    if images:
        store_files(run, images, f"sample images at step {step}")
    ts = ts_now()
    with _counters_lock:
        counters: dict[tuple[int, str], int] = run.record_state(_COUNTERS, dict)
        indexes, nxt = _assign_indexes(built, counters.get((step, split), 0), step)
        for r, index in zip(built, indexes):
            r["sample_index"], r["step"], r["split"], r["ts"] = index, step, split, ts
        counters[(step, split)] = nxt
    for r in built:
        run.append(Kind.SAMPLES, r)
    return len(built)


def _as_rows(rows: Any) -> list:
    if isinstance(rows, (str, bytes)) or isinstance(rows, Mapping):
        raise InvalidValueError("log_samples expects a list of rows (dicts or (input, output, score) tuples)")
    to_dict = getattr(rows, "to_dict", None)
    if callable(to_dict) and hasattr(rows, "columns"):  # a pandas DataFrame
        return list(to_dict(orient="records"))
    try:
        return list(rows)
    except TypeError:
        raise InvalidValueError(f"log_samples expects a list of rows, got {type(rows).__name__}") from None


def _build(row: Any, i: int) -> dict:
    where = f"sample row {i}"
    json_fields: list[str] = []
    out: dict[str, Any]
    if isinstance(row, Mapping):
        missing = [k for k in ("input", "output") if k not in row]
        if missing:
            raise InvalidValueError(f"{where} has no {' or '.join(missing)!s} field; rows need input and output")
        bad = [k for k in row if not isinstance(k, str)]
        if bad:
            raise InvalidValueError(f"{where}: field names must be strings, got {bad[0]!r}")
        index = row.get("sample_index")
        if index is not None:
            index = _as_index(index, where)
        extra = {k: v for k, v in row.items() if k not in RESERVED}
        out = {
            "input": _text(row["input"], "input", json_fields),
            "output": _text(row["output"], "output", json_fields),
            "score": as_score(row.get("score"), f"{where}: score"),
            "extra": encode_json(extra) if extra else None,
            "sample_index": index,
        }
    elif isinstance(row, (tuple, list)) and len(row) in (2, 3):
        out = {
            "input": _text(row[0], "input", json_fields),
            "output": _text(row[1], "output", json_fields),
            "score": as_score(row[2], f"{where}: score") if len(row) == 3 else None,
            "extra": None,
            "sample_index": None,
        }
    else:
        raise InvalidValueError(
            f"{where} is a {type(row).__name__}; use a dict with input/output/score or an (input, output, score) tuple"
        )
    out["json_fields"] = json_fields or None
    return out


def _as_index(value: Any, where: str) -> int:
    return as_index(value, f"{where}: sample_index")


def _assign_indexes(built: list[dict], nxt: int, step: int) -> tuple[list[int], int]:
    """Each row's sample_index (its own, or the next free one from ``nxt``) and the next free
    index after them. Raises when an automatic index would pass the int64 maximum."""
    out = []
    for i, r in enumerate(built):
        index = r["sample_index"]
        if index is None:
            if nxt > INT64_MAX:
                raise InvalidValueError(
                    f"sample row {i}: no automatic sample_index is left at step {step} (an earlier row took "
                    f"{INT64_MAX}, the 64-bit maximum); give each row its own sample_index"
                )
            index = nxt
        nxt = max(nxt, index + 1)
        out.append(index)
    return out, nxt


def decode_row(row: Mapping[str, Any]) -> dict:
    """A stored sample row as the caller logged it: JSON fields parsed, ``extra`` merged back."""
    out = dict(row)
    for f in out.get("json_fields") or ():
        if out.get(f) is not None:
            out[f] = json.loads(out[f])
    extra = out.pop("extra", None)
    if extra:
        for k, v in json.loads(extra).items():
            out.setdefault(k, v)
    return out

