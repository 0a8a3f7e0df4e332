"""Turning what training code passes to ``run.log`` into (key -> float) points, or a clear error.

The promise: a value or a step the store cannot hold never reaches the writer thread, where it
would cost every row of its flush window. Metric values become float64 and steps and indexes
int64 (docs/format.md), so each is checked at the call against those types, per value, and
refused with an :class:`InvalidValueError` naming the key or field before anything of that call
is buffered:

* metric values: numbers (int, float, bool, numpy and torch scalars through ``.item()``); an
  int too large for a float64 (``10**400``) is refused; NaN and infinities are kept. Any other
  type is refused, numbers of other kinds (``Fraction``, ``Decimal``) and objects whose
  arithmetic returns floats included, whether the key is new or known (:func:`stored_as_is`):
  pass ``float(value)``;
* steps (:func:`as_step`): integers, integral floats included, from ``-2**63`` to ``2**63-1``
  (negative steps are allowed); bools are refused;
* indexes (:func:`as_index`: ``sample_index``, ``rollout_n``): integers in the same range.

The hot path in :meth:`trackstore.write.run.Run.log` accepts a dict whose keys were all seen before
and whose values :func:`stored_as_is` finds plain numbers. Everything else (first sight of a key, nested dicts, numpy and torch
scalars, ``None``, histograms) comes through :func:`normalize`.
"""

from __future__ import annotations

import warnings
from typing import Any, Collection, Mapping

from ..errors import InvalidValueError
from .names import validate_key
from .text import escape_surrogates

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
# The smallest int whose float() overflows: larger magnitudes round to 2**1024, beyond float64.
FLOAT64_INT_LIMIT = (1 << 1024) - (1 << 970)

# Types the hot path accepts without looking further: float and the float subclasses seen in
# practice (numpy.float64 subclasses float), added at run time.
FAST_TYPES: set[type] = {float}
_INT_TYPES = {int, bool}


def _too_big(what: str, value: int) -> InvalidValueError:
    # never format the int itself: str() of a huge int is slow, and refused past 4300 digits
    return InvalidValueError(
        f"{what} is an integer too large for a float64 (about 2**{value.bit_length() - 1}); numbers are "
        "stored as float64, whose largest value is about 1.8e308 (log float('inf'), or a scaled value)"
    )


def int_as_float64(what: str, value: int) -> int:
    """``value`` if this int converts to a float64, else :class:`InvalidValueError` naming ``what``."""
    if -FLOAT64_INT_LIMIT < value < FLOAT64_INT_LIMIT:
        return value
    raise _too_big(what, value)


def to_float64(what: str, value: int | float) -> float:
    """``float(value)`` for a plain int, float or bool, or :class:`InvalidValueError` naming ``what``."""
    if type(value) is not float and isinstance(value, int):
        int_as_float64(what, value)
    return float(value)


def stored_as_is(values: Collection[Any]) -> bool:
    """True if every value may be buffered as it is: each of a fast type (float, the float
    subclasses met before), a bool, or an int that converts to a float64.

    The one check of :meth:`trackstore.write.run.Run.log`'s fast path; any False goes through
    :func:`normalize`, so a value is accepted or refused the same way whether its key is new or
    known. ``sum`` from 0.0 checks the ints in one C loop (a few ns each; it raises for an int
    too large for a float64), but proves nothing about types: ``Fraction`` and any object whose
    ``__radd__`` returns a float add up to a float too. So the types are looked at first (one C
    loop), and only ints beyond the sum's reach (a numpy scalar among the values absorbs them)
    go through :func:`plain_numbers`.
    """
    types = set(map(type, values))
    if types <= FAST_TYPES:
        return True
    if not types <= FAST_TYPES | _INT_TYPES:
        return False
    try:
        total = sum(values, 0.0)
    except OverflowError:  # an int beyond float64
        return False
    return type(total) is float or plain_numbers(values)


def plain_numbers(values: Collection[Any]) -> bool:
    """True if every value is of a fast type, a bool, or an int that converts to a float64.

    Run.log asks this only when the sum of a call's values is not a plain float (numpy.float64
    values among them): the sum then proves nothing about ints that a numpy scalar absorbed.
    """
    types = set(map(type, values))
    if types <= FAST_TYPES:
        return True
    if not types <= FAST_TYPES | _INT_TYPES:
        return False
    return all(-FLOAT64_INT_LIMIT < v < FLOAT64_INT_LIMIT for v in values if type(v) is int)


def as_step(step: Any, what: str = "step") -> int:
    """An int64 step from an int, a numpy/torch integer or an integral float; bools are refused."""
    if isinstance(step, bool):
        raise InvalidValueError(f"{what} must be an integer, got {step!r}")
    value = _item(step, what)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValueError(f"{what} must be an integer, got {type(step).__name__} {step!r:.60}")
    return _in_int64(int(value), what)


def as_index(value: Any, what: str) -> int:
    """An int64 index (``sample_index``, ``rollout_n``) from an int or a numpy/torch integer."""
    v = _item(value, what)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidValueError(f"{what} must be an integer, got {value!r:.60}")
    return _in_int64(int(v), what)


def _item(value: Any, what: str) -> Any:
    """A numpy/torch scalar's Python value (``.item()``); anything else as it is."""
    item = getattr(value, "item", None)
    if not callable(item):
        return value
    try:
        return item()
    except Exception as exc:  # e.g. a multi-element array, or a tensor whose device is gone
        raise InvalidValueError(f"{what} could not be read with .item(): {exc}") from exc


def _in_int64(value: int, what: str) -> int:
    if INT64_MIN <= value <= INT64_MAX:
        return value
    shown = str(value) if value.bit_length() <= 256 else f"about {'-' if value < 0 else ''}2**{value.bit_length() - 1}"
    raise InvalidValueError(
        f"{what} {shown} is out of range: steps and indexes are stored as 64-bit integers, "
        f"from -2**63 to 2**63-1 ({INT64_MIN} to {INT64_MAX})"
    )


def _as_number(key: str, value: Any) -> float | int:
    t = type(value)
    if t is float:
        return value
    if t is int:
        return int_as_float64(f"value for {key!r}", value)
    if t is bool:
        return float(value)
    if isinstance(value, float):  # numpy.float64 and other float subclasses
        FAST_TYPES.add(t)
        return float(value)
    if isinstance(value, int):  # int subclasses (IntEnum, numpy ints that subclass int)
        return int_as_float64(f"value for {key!r}", int(value))
    # numpy scalars, 0-d arrays and tensors: duck-typed through .item(), never importing torch
    item = getattr(value, "item", None)
    if callable(item):
        numel = getattr(value, "numel", None)
        size = numel() if callable(numel) else getattr(value, "size", 1)
        if size != 1:
            raise InvalidValueError(
                f"value for {key!r} has {size} elements; log a scalar, or wrap many values in "
                "trackstore.Histogram(values)"
            )
        try:
            v = item()
        except Exception as exc:  # e.g. a CUDA tensor whose device is gone
            raise InvalidValueError(f"value for {key!r} could not be read with .item(): {exc}") from exc
        if isinstance(v, bool):
            return float(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, int):
            return int_as_float64(f"value for {key!r}", int(v))
        raise InvalidValueError(f"value for {key!r} is {type(value).__name__} holding {type(v).__name__}, not a number")
    if isinstance(value, str):
        raise InvalidValueError(
            f"value for {key!r} is a string ({value[:40]!r}); metrics must be numbers "
            "(log text with run.log_samples, or put it in run.config)"
        )
    raise InvalidValueError(f"value for {key!r} has type {t.__name__}; metrics must be int, float, bool or a "
                            "numpy/torch scalar (pass float(value) to store it as a float64)")


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings with ``/``: ``{"actor": {"lr": 1}}`` -> ``{"actor/lr": 1}``."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        if not isinstance(k, str):
            raise InvalidValueError(f"metric key must be a string, got {type(k).__name__} {k!r}")
        full = f"{prefix}/{k}" if prefix else k
        items = flatten(v, full).items() if isinstance(v, Mapping) else ((full, v),)
        for fk, fv in items:
            if fk in out:
                raise InvalidValueError(
                    f"metric key {fk!r} is given twice (a nested dict and a '/' key flatten to the same name)"
                )
            out[fk] = fv
    return out


def normalize(
    data: Mapping[str, Any], known_keys: set[str], warned_none: set[str], histogram_type: type | tuple[type, ...]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Validate and convert one ``log`` call. Returns ``(scalars, records)``: ``records`` holds the
    values of ``histogram_type`` (a type or a tuple of them: histograms, images), and non-empty
    lists of them, by key.

    ``known_keys`` and ``warned_none`` are the run's caches; valid new keys are added to the
    first, ``None``-valued keys to the second (so each is warned about once).
    """
    if not isinstance(data, Mapping):
        raise InvalidValueError(f"run.log expects a dict of metrics, got {type(data).__name__}")
    flat = flatten(data)
    scalars: dict[str, float] = {}
    hists: dict[str, Any] = {}
    new_keys = []
    for key, value in flat.items():
        if key not in known_keys:
            validate_key(key)
            new_keys.append(key)
        if value is None:
            if key not in warned_none:
                warned_none.add(key)
                warnings.warn(f"trackstore: metric {key!r} is None; skipped (warned once per key)", stacklevel=4)
            continue
        if isinstance(value, histogram_type):
            hists[key] = value
            continue
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, histogram_type) for v in value):
            hists[key] = value  # a list of images (the caller checks what the list holds)
            continue
        scalars[key] = _as_number(key, value)
    known_keys.update(new_keys)
    return scalars, hists


def json_safe(obj: Any, _depth: int = 0) -> Any:
    """Make a config/summary value JSON-serialisable, keeping its structure.

    Numpy/torch scalars become numbers, tuples and sets become lists, NaN/inf stay floats (the
    JSON is written with ``allow_nan``), anything else unknown becomes its ``repr``. Text with
    lone surrogates is escaped (:func:`trackstore.store.text.escape_surrogates`), so what the
    caller reads back from ``run.config`` is what run.json holds.
    """
    if _depth > 64:
        return repr(obj)
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, str):
        return escape_surrogates(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, Mapping):
        return {escape_surrogates(str(k)): json_safe(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v, _depth + 1) for v in obj]
    for convert in ("item", "tolist"):  # a numpy/torch scalar, then an array
        method = getattr(obj, convert, None)
        if callable(method):
            try:
                return json_safe(method(), _depth + 1)
            except Exception:
                pass
    if hasattr(obj, "__fspath__"):
        return escape_surrogates(str(obj))
    return escape_surrogates(repr(obj))

