"""Turning what training code passes to ``run.log`` into (key -> float) points, or a clear error.

The hot path in :meth:`trackstore.run.Run.log` accepts a dict whose keys were all seen before
and whose values are all plain ``float``/``int`` without calling anything here. Everything else
(first sight of a key, nested dicts, bools, numpy and torch scalars, ``None``, histograms) comes
through :func:`normalize`, which raises :class:`InvalidValueError` *before* anything is buffered.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

from .errors import InvalidValueError
from .names import validate_key

# Types the hot path accepts without looking further. Extended at run time with float/int
# subclasses seen in practice (numpy.float64 subclasses float), so they take the fast path too.
FAST_TYPES: set[type] = {float, int}


class Unset:
    """Marker for 'no value' distinct from None."""


def _as_number(key: str, value: Any) -> float | None:
    t = type(value)
    if t is float or t is int:
        return value
    if t is bool:
        return float(value)
    if isinstance(value, float):  # numpy.float64 and other float subclasses
        FAST_TYPES.add(t)
        return float(value)
    if isinstance(value, int):  # int subclasses (IntEnum, numpy ints that subclass int)
        return int(value)
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
        if isinstance(v, (int, float)):
            return v
        raise InvalidValueError(f"value for {key!r} is {type(value).__name__} holding {type(v).__name__}, not a number")
    if isinstance(value, str):
        raise InvalidValueError(
            f"value for {key!r} is a string ({value[:40]!r}); metrics must be numbers "
            "(log text with run.log_samples, or put it in run.config)"
        )
    raise InvalidValueError(f"value for {key!r} has type {t.__name__}; metrics must be numbers")


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
    data: Mapping[str, Any], known_keys: set[str], warned_none: set[str], histogram_type: type
) -> tuple[dict[str, float], dict[str, Any]]:
    """Validate and convert one ``log`` call. Returns ``(scalars, histograms)``.

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
        scalars[key] = _as_number(key, value)
    known_keys.update(new_keys)
    return scalars, hists


def json_safe(obj: Any, _depth: int = 0) -> Any:
    """Make a config/summary value JSON-serialisable, keeping its structure.

    Numpy/torch scalars become numbers, tuples and sets become lists, NaN/inf stay floats (the
    JSON is written with ``allow_nan``), anything else unknown becomes its ``repr``.
    """
    if _depth > 64:
        return repr(obj)
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [json_safe(v, _depth + 1) for v in obj]
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return json_safe(item(), _depth + 1)
        except Exception:
            pass
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        try:
            return json_safe(tolist(), _depth + 1)
        except Exception:
            pass
    if hasattr(obj, "__fspath__"):
        return str(obj)
    return repr(obj)


def is_finite(x: float) -> bool:
    return not (math.isnan(x) or math.isinf(x))
