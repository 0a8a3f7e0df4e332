"""``trackstore.Histogram``: a distribution logged as a value in ``run.log``.

Stored as bin edges and counts plus min, max, mean, std, count and the number of NaN and
infinite values (``histograms/`` parts), so any target can redraw it: wandb takes
``np_histogram=(counts, edges)``; MLflow and SwanLab get what they can hold (see docs/sync.md).

Accepts lists (nested too), numpy arrays and tensors. Tensors are duck-typed (``detach``,
``cpu``, ``numpy``/``tolist``): torch is never imported here. With numpy installed the binning
runs in numpy (a 10M-element gradient takes well under a second); without it, in pure Python.
NaN and +-inf are counted in ``nan_count``/``inf_count`` and left out of the bins and the
statistics, so one bad value never hides the shape of the rest.

Any finite float64 values can be binned, up to +-1.8e308: where the width of the range or the
statistics would overflow, they are computed on the values scaled by a power of two (exact) and
scaled back, so the edges, ``mean`` and ``std`` stay finite. A single repeated value gets one
unit either side of it (numpy's convention), or a relative margin where a unit is lost in
rounding. What the store cannot hold is refused with
:class:`~trackstore.errors.InvalidValueError` when the histogram is built: an int too large for
a float64, or counts adding up to more than a 64-bit ``count``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..errors import InvalidValueError
from ..store.values import INT64_MAX

MAX_BINS = 512  # wandb's limit; a histogram with more bins is refused at log time
_FLOAT_MAX = 1.7976931348623157e308
# Beyond this magnitude, sums of squared deviations may overflow: statistics are computed on
# values scaled by a power of two (exact), then scaled back.
_SCALE_ABOVE = 2.0 ** 256


def _numpy():
    try:
        import numpy as np
    except ImportError:  # numpy is optional: fall back to lists
        return None
    return np


def _untensor(values: Any) -> Any:
    """A tensor (torch, or anything shaped like one) as a CPU numpy array or a nested list."""
    detach = getattr(values, "detach", None)
    if callable(detach):
        values = detach()
        cpu = getattr(values, "cpu", None)
        if callable(cpu):
            values = cpu()
        to_numpy = getattr(values, "numpy", None)
        if callable(to_numpy):
            try:
                return to_numpy()
            except (TypeError, RuntimeError):  # e.g. bfloat16 has no numpy dtype
                as_float = getattr(values, "float", None)
                if callable(as_float):
                    return as_float().numpy()
    return values


def _to_floats(values: Any) -> list[float]:
    values = _untensor(values)
    tolist = getattr(values, "tolist", None)
    if callable(tolist):
        values = tolist()
    out: list[float] = []

    def _walk(v: Any) -> None:
        if isinstance(v, (list, tuple)):
            for x in v:
                _walk(x)
        else:
            try:
                out.append(float(v))
            except (TypeError, ValueError):
                raise InvalidValueError(f"histogram values must be numbers, got {type(v).__name__}") from None
            except OverflowError:
                raise InvalidValueError(
                    "histogram values must fit a float64: got an integer too large for a float64 (largest "
                    "about 1.8e308)"
                ) from None

    _walk(values)
    return out


def _to_array(np: Any, values: Any):
    values = _untensor(values)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        # ragged nested lists, non-numbers or huge ints: the list path gives the precise error or flattens
        arr = np.asarray(_to_floats(values), dtype=np.float64)
    return arr.ravel()


class Histogram:
    """A histogram from raw ``values`` (binned into ``bins`` equal-width bins), or from
    precomputed ``counts`` and ``edges`` (``len(edges) == len(counts) + 1``)."""

    __slots__ = ("edges", "counts", "min", "max", "mean", "std", "count", "nan_count", "inf_count")
    edges: list[float]
    counts: list[float]
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    count: int

    def __init__(self, values: Any = None, bins: int = 64, *, counts: Sequence[float] | None = None,
                 edges: Sequence[float] | None = None):
        if (values is None) == (counts is None):
            raise InvalidValueError("Histogram needs either values, or counts= and edges=")
        self.nan_count: int | None = None
        self.inf_count: int | None = None
        if counts is not None:
            self._from_counts(counts, edges)
            return
        if not isinstance(bins, int) or isinstance(bins, bool) or not 1 <= bins <= MAX_BINS:
            raise InvalidValueError(f"Histogram bins must be an int in 1..{MAX_BINS}, got {bins!r}")
        np = _numpy()
        if np is not None:
            self._from_array(np, _to_array(np, values), bins)
        else:
            self._from_list(_to_floats(values), bins)

    # ------------------------------------------------------------------ constructors
    def _from_counts(self, counts: Any, edges: Any) -> None:
        if edges is None:
            raise InvalidValueError("Histogram(counts=...) also needs edges=")
        c = _to_floats(counts)
        e = _to_floats(edges)
        if len(e) != len(c) + 1:
            raise InvalidValueError(f"Histogram edges must have len(counts)+1 = {len(c) + 1} items, got {len(e)}")
        if not c:
            raise InvalidValueError("Histogram needs at least one bin")
        if len(c) > MAX_BINS:
            raise InvalidValueError(f"Histogram has {len(c)} bins; at most {MAX_BINS}")
        if not all(math.isfinite(x) for x in e) or any(b < a for a, b in zip(e, e[1:])):
            raise InvalidValueError("Histogram edges must be finite and non-decreasing")
        if any(not math.isfinite(x) or x < 0 for x in c):
            raise InvalidValueError("Histogram counts must be finite and >= 0")
        self.counts, self.edges = c, e
        total = sum(c)
        if not total <= INT64_MAX or int(round(total)) > INT64_MAX:
            raise InvalidValueError(
                f"Histogram counts add up to {total:.4g}; the count is stored as a 64-bit integer (at most 2**63-1)"
            )
        self.count = int(round(total))
        self.min, self.max = e[0], e[-1]
        if total > 0:  # statistics from the bin midpoints: the best the counts can tell
            k = _scale_exponent(e[0], e[-1])
            mids = [math.ldexp(a / 2 + b / 2, -k) for a, b in zip(e, e[1:])]
            mean = sum(m * w for m, w in zip(mids, c)) / total
            var = sum(w * (m - mean) ** 2 for m, w in zip(mids, c)) / total
            self.mean, self.std = _unscaled_stats(mean, math.sqrt(var), mids[0], mids[-1], k)
        else:
            self.mean = self.std = None

    def _from_array(self, np: Any, arr: Any, bins: int) -> None:
        finite_mask = np.isfinite(arr)
        self.nan_count = int(np.isnan(arr).sum())
        self.inf_count = int(arr.size - self.nan_count - int(finite_mask.sum()))
        finite = arr if self.nan_count == self.inf_count == 0 else arr[finite_mask]
        self.count = int(finite.size)
        if not finite.size:
            self._empty()
            return
        lo, hi = float(finite.min()), float(finite.max())
        self.min, self.max = lo, hi
        k = _scale_exponent(lo, hi)
        scaled = finite if k == 0 else np.ldexp(finite, -k)
        self.mean, self.std = _unscaled_stats(float(scaled.mean()), float(scaled.std()), math.ldexp(lo, -k),
                                              math.ldexp(hi, -k), k)
        lo, hi, k = _bin_range(lo, hi)
        counts, edges = np.histogram(finite if k == 0 else np.ldexp(finite, -k), bins=bins, range=(lo, hi))
        self.counts = counts.astype(np.float64).tolist()
        self.edges = (edges if k == 0 else np.ldexp(edges, k)).tolist()

    def _from_list(self, vals: list[float], bins: int) -> None:
        self.nan_count = sum(1 for v in vals if math.isnan(v))
        finite = [v for v in vals if math.isfinite(v)]
        self.inf_count = len(vals) - self.nan_count - len(finite)
        self.count = len(finite)
        if not finite:
            self._empty()
            return
        lo, hi = min(finite), max(finite)
        self.min, self.max = lo, hi
        n = len(finite)
        k = _scale_exponent(lo, hi)
        scaled = finite if k == 0 else [math.ldexp(v, -k) for v in finite]
        mean = math.fsum(scaled) / n
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in scaled) / n)
        self.mean, self.std = _unscaled_stats(mean, std, math.ldexp(lo, -k), math.ldexp(hi, -k), k)
        lo, hi, k = _bin_range(lo, hi)
        if k:
            finite = [math.ldexp(v, -k) for v in finite]
        width = (hi - lo) / bins
        counts = [0.0] * bins
        for v in finite:  # like numpy: half-open bins, the last one closed
            counts[min(int((v - lo) / width), bins - 1)] += 1
        self.counts = counts
        self.edges = [math.ldexp(lo + i * width, k) for i in range(bins)] + [math.ldexp(hi, k)]

    def _empty(self) -> None:
        self.edges, self.counts = [0.0, 1.0], [0.0]
        self.min = self.max = self.mean = self.std = None

    # ------------------------------------------------------------------ storage
    def to_row(self, *, key: str, step: int, ts: Any) -> dict:
        return {"step": step, "key": key, "edges": self.edges, "counts": self.counts, "min": self.min,
                "max": self.max, "mean": self.mean, "std": self.std, "count": self.count,
                "nan_count": self.nan_count, "inf_count": self.inf_count, "ts": ts}

    @classmethod
    def from_row(cls, row: dict) -> Histogram:
        """Rebuild a histogram from a stored row (for sync adapters and readers)."""
        h = cls(counts=row["counts"], edges=row["edges"])
        for name in ("min", "max", "mean", "std", "count", "nan_count", "inf_count"):
            # a stored NULL is kept (an empty histogram has no min/max: its edges are a placeholder)
            if name in row and (row[name] is not None or name != "count"):
                setattr(h, name, row[name])
        return h

    def __repr__(self) -> str:
        return f"Histogram(bins={len(self.counts)}, count={self.count})"


def _scale_exponent(lo: float, hi: float) -> int:
    """0 for ordinary magnitudes; else ``k`` such that values times ``2**-k`` lie in (-1, 1)."""
    m = max(abs(lo), abs(hi))
    return math.frexp(m)[1] if m > _SCALE_ABOVE else 0


def _unscaled_stats(mean: float, std: float, lo: float, hi: float, k: int) -> tuple[float, float]:
    """``mean`` and ``std`` of values scaled by ``2**-k`` (whose range is ``lo..hi``), scaled back.

    Rounding can put a mean an ulp outside the range; clamped, it never overflows scaling back.
    """
    mean = min(max(mean, lo), hi)
    std = min(std, hi / 2 - lo / 2)
    return math.ldexp(mean, k), math.ldexp(std, k)


def _bin_range(lo: float, hi: float) -> tuple[float, float, int]:
    """The range to bin ``lo..hi`` over, and the power of two ``k`` the values and the range are
    scaled by (``2**-k``) so that numpy's ``hi - lo`` cannot overflow; the edges scale back by ``2**k``.

    One repeated value gets 0.5 either side (numpy's convention), or 2**-20 of itself where 0.5
    is lost in rounding (beyond 2**53), so the range is never empty.
    """
    if lo == hi:
        d = 0.5 if lo - 0.5 < lo < lo + 0.5 else abs(lo) * 2.0 ** -20
        return max(lo - d, -_FLOAT_MAX), min(hi + d, _FLOAT_MAX), 0
    if math.isfinite(hi - lo):
        return lo, hi, 0
    return lo / 2, hi / 2, 1  # halving is exact for such magnitudes, and hi/2 - lo/2 <= 1.8e308
