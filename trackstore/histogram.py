"""``trackstore.Histogram``: a distribution logged as a value in ``run.log``.

Stored as bin edges and counts plus min, max, mean, std and count (``histograms/`` parts), so
any target can redraw it: wandb takes ``np_histogram=(counts, edges)``; MLflow and SwanLab get
what they can hold (see docs/sync.md). Accepts lists, numpy arrays and tensors (duck-typed
through ``tolist``/``detach``; torch is never imported here).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .errors import InvalidValueError

MAX_BINS = 512  # wandb's limit; a histogram with more bins is refused at log time


def _to_floats(values: Any) -> list[float]:
    detach = getattr(values, "detach", None)
    if callable(detach):  # torch tensor: move to CPU first
        values = detach()
        cpu = getattr(values, "cpu", None)
        if callable(cpu):
            values = cpu()
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

    _walk(values)
    return out


class Histogram:
    """A histogram from raw ``values`` (binned into ``bins`` equal-width bins), or from
    precomputed ``counts`` and ``edges`` (``len(edges) == len(counts) + 1``)."""

    __slots__ = ("edges", "counts", "min", "max", "mean", "std", "count")

    def __init__(self, values: Any = None, bins: int = 64, *, counts: Sequence[float] | None = None,
                 edges: Sequence[float] | None = None):
        if (values is None) == (counts is None):
            raise InvalidValueError("Histogram needs either values, or counts= and edges=")
        if counts is not None:
            if edges is None:
                raise InvalidValueError("Histogram(counts=...) also needs edges=")
            c = _to_floats(counts)
            e = _to_floats(edges)
            if len(e) != len(c) + 1:
                raise InvalidValueError(f"Histogram edges must have len(counts)+1 = {len(c) + 1} items, got {len(e)}")
            if len(c) > MAX_BINS:
                raise InvalidValueError(f"Histogram has {len(c)} bins; at most {MAX_BINS}")
            if any(b < a for a, b in zip(e, e[1:])):
                raise InvalidValueError("Histogram edges must be non-decreasing")
            self.counts, self.edges = c, e
            total = sum(c)
            self.count = int(total)
            self.min, self.max = (e[0], e[-1]) if c else (None, None)
            if total > 0:
                mids = [(a + b) / 2 for a, b in zip(e, e[1:])]
                mean = sum(m * w for m, w in zip(mids, c)) / total
                var = sum(w * (m - mean) ** 2 for m, w in zip(mids, c)) / total
                self.mean, self.std = mean, math.sqrt(var)
            else:
                self.mean = self.std = None
            return
        if not isinstance(bins, int) or isinstance(bins, bool) or not 1 <= bins <= MAX_BINS:
            raise InvalidValueError(f"Histogram bins must be an int in 1..{MAX_BINS}, got {bins!r}")
        vals = [v for v in _to_floats(values) if not math.isnan(v)]
        finite = [v for v in vals if not math.isinf(v)]
        self.count = len(vals)
        if not finite:
            self.edges, self.counts = [0.0, 1.0], [0.0]
            self.min = self.max = self.mean = self.std = None
            return
        lo, hi = min(finite), max(finite)
        if lo == hi:
            lo, hi = lo - 0.5, hi + 0.5
        width = (hi - lo) / bins
        counts = [0.0] * bins
        for v in finite:
            i = int((v - lo) / width)
            counts[min(max(i, 0), bins - 1)] += 1
        self.edges = [lo + i * width for i in range(bins)] + [hi]
        self.counts = counts
        self.min, self.max = min(finite), max(finite)
        n = len(finite)
        self.mean = sum(finite) / n
        self.std = math.sqrt(sum((v - self.mean) ** 2 for v in finite) / n)

    def to_row(self, *, key: str, step: int, ts: Any) -> dict:
        return {"step": step, "key": key, "edges": self.edges, "counts": self.counts, "min": self.min,
                "max": self.max, "mean": self.mean, "std": self.std, "count": self.count, "ts": ts}

    def __repr__(self) -> str:
        return f"Histogram(bins={len(self.counts)}, count={self.count})"
