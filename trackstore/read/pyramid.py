"""Whole curves from a cache of per-part M4 buckets: a chart costs what changed, not what is stored.

A curve of one key of one run is drawn in **aligned buckets**: at level ``k`` bucket ``i``
holds the points whose x (the step, or the wall time in seconds) lies in ``[i * 2**k, (i + 1) *
2**k)``, and gives its first, minimum, maximum and last point (M4: every extreme is drawn). The
level of a curve ``width`` buckets wide is the smallest ``k`` with ``span / 2**k <= width``.

What this module promises:

* **Exact.** Buckets of one level merge exactly (counts add; first, last, minimum and maximum
  are those of the merged points), and a level merges exactly into any coarser one (bucket
  ``i`` at ``k`` lies inside bucket ``i >> d`` at ``k + d``). So a run's curve made from its
  parts' summaries is the curve of all its points, whichever way they were split into parts,
  and ``n``, ``min`` and ``max`` are over every finite point (NaN and infinities are not
  drawn). Only finite values enter a bucket.
* **A cache, never a source of truth.** Each part file is immutable (a new part or a merge is
  a new file), so a part's summary of one key on one axis, at the part's finest level (at most
  :data:`FINEST_BUCKETS` buckets), is keyed by the part's path, size and modification time. It
  is kept in memory (:class:`Pyramids`, bounded by bytes) and in
  ``<root>/_catalog/curves/<hash>.npz`` (written atomically; a damaged, missing or unwritable
  file costs a recomputation, never a wrong answer; pruned oldest first beyond
  :data:`DISK_BYTES`). A poll of a live run computes only the parts it has not seen.
* **Computed by DuckDB, in one query for many parts**: each part's extent of the key, then its
  buckets; user values are bound parameters.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

FINEST_BUCKETS = 1 << 12  # a part's finest summary holds at most this many buckets (4,096: wider than any chart answer)
MEMORY_BYTES = 768 << 20  # part summaries kept in memory (1,000 runs of 10k points: about 400 MB)
DISK_BYTES = 512 << 20  # part summaries kept under _catalog/curves/ (pruned to 3/4 of it, oldest first)
CURVES_DIR = "curves"  # under the catalog's folder
FIELDS = ("idx", "n", "fx", "fv", "nx", "nv", "mx", "mv", "lx", "lv")
MIN_LEVEL = {"step": 0, "time": -20}  # a step is an integer; a second splits down to about a microsecond


@dataclass
class Buckets:
    """The non-empty buckets of one level, ordered by ``idx``: count, first, minimum, maximum and
    last point (x and value each) of the finite points in each."""

    k: int
    arrays: dict[str, np.ndarray]
    levels: list[Buckets] | None = None  # a part summary's pyramid: this level, then each coarser one

    @property
    def nbytes(self) -> int:
        own = sum(a.nbytes for a in self.arrays.values())
        return own + sum(lv.nbytes for lv in (self.levels or [])[1:])

    def at(self, k: int) -> Buckets:
        """These buckets at level ``k``, merged from the finest stored level not above it."""
        base = self
        for lv in self.levels or []:
            if lv.k <= k:
                base = lv
        return coarsen(base, k)

    def __len__(self) -> int:
        return len(self.arrays["idx"])


def with_levels(b: Buckets) -> Buckets:
    """``b`` with its pyramid: every coarser level down to one bucket (each half the last), so a
    curve of a few buckets merges a few buckets, not the finest level's thousands."""
    levels = [b]
    while len(levels[-1]) > 1 and len(levels) < 64:
        levels.append(coarsen(levels[-1], levels[-1].k + 1))
    b.levels = levels
    return b


def level_for(span: float, buckets: int, axis: str) -> int:
    """The smallest level whose buckets cover ``span`` in at most ``buckets`` of them (aligned
    buckets straddle one more at most)."""
    if span <= 0 or buckets <= 0:
        return MIN_LEVEL[axis]
    return max(MIN_LEVEL[axis], math.ceil(math.log2(span / buckets)))


def coarsen(b: Buckets, k: int) -> Buckets:
    """``b`` at the coarser level ``k`` (its own when ``k`` is not coarser)."""
    if k <= b.k or not len(b):
        return b if k <= b.k else Buckets(k, b.arrays)
    a = b.arrays
    return merge([Buckets(k, {**a, "idx": a["idx"] >> (k - b.k)})], k)


def merge(parts: Sequence[Buckets], k: int) -> Buckets:
    """The buckets of every part (each at level ``k`` already) merged into one set at level ``k``."""
    import numpy as np

    parts = [p for p in parts if len(p)]
    if not parts:
        return Buckets(k, {f: np.empty(0, np.int64 if f in ("idx", "n") else np.float64) for f in FIELDS})
    a = {f: np.concatenate([p.arrays[f] for p in parts]) if len(parts) > 1 else parts[0].arrays[f] for f in FIELDS}
    idx = a["idx"]
    uniq, start = _groups(idx)

    def pick(by: np.ndarray, last: bool) -> np.ndarray:
        """Per group, the position of its smallest (``last``: largest) ``by``."""
        order = np.lexsort((by, idx))
        at = np.searchsorted(idx[order], uniq, side="right" if last else "left")
        return order[at - 1] if last else order[at]

    first, lastp = pick(a["fx"], False), pick(a["lx"], True)
    low, high = pick(a["nv"], False), pick(a["mv"], True)
    counts = np.add.reduceat(a["n"][np.argsort(idx, kind="stable")], start) if len(idx) else a["n"]
    out = {"idx": uniq, "n": counts, "fx": a["fx"][first], "fv": a["fv"][first], "nx": a["nx"][low],
           "nv": a["nv"][low], "mx": a["mx"][high], "mv": a["mv"][high], "lx": a["lx"][lastp], "lv": a["lv"][lastp]}
    return Buckets(k, out)


def _groups(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``idx``, ascending, and where each starts in ``idx`` sorted."""
    import numpy as np

    s = np.sort(idx, kind="stable")
    if not len(s):
        return s, np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[starts], starts


def curve_points(b: Buckets) -> tuple[list[float], list[float]]:
    """The points a curve draws from buckets: each bucket's first, minimum, maximum and last
    point, once each, in bucket order and within a bucket by x then y."""
    import numpy as np

    a = b.arrays
    if not len(b):
        return [], []
    xs = np.stack([a["fx"], a["nx"], a["mx"], a["lx"]], axis=1)
    ys = np.stack([a["fv"], a["nv"], a["mv"], a["lv"]], axis=1)
    order = np.lexsort((ys, xs), axis=1)
    xs = np.take_along_axis(xs, order, axis=1)
    ys = np.take_along_axis(ys, order, axis=1)
    keep = np.ones(xs.shape, bool)
    keep[:, 1:] = (xs[:, 1:] != xs[:, :-1]) | (ys[:, 1:] != ys[:, :-1])
    return xs[keep].tolist(), ys[keep].tolist()


# ---------------------------------------------------------------------- the cache
class Pyramids:
    """Part summaries of one store, in memory and under ``_catalog/curves/`` (thread-safe)."""

    def __init__(self, root: str | os.PathLike, memory_bytes: int = MEMORY_BYTES, disk_bytes: int = DISK_BYTES):
        from ..store.catalog import CATALOG_DIR

        self.root = Path(root)
        self.dir = self.root / CATALOG_DIR / CURVES_DIR
        self.memory_bytes, self.disk_bytes = memory_bytes, disk_bytes
        self._mem: OrderedDict[tuple, Buckets | None] = OrderedDict()
        self._mem_bytes = 0
        self._disk_bytes: int | None = None  # measured on first write
        self._lock = threading.Lock()
        self.computed = 0  # part summaries computed (not found in memory or on disk): what a poll cost

    def curve(self, con, files: Sequence[str | os.PathLike], key: str, axis: str, width: int) -> dict[str, Any] | None:
        """One run's whole curve of ``key`` (``files``: its metrics parts), about ``width``
        buckets wide: ``{"x", "y", "n", "min", "max"}``, or None when no part holds a finite
        point of the key."""
        return self.curves(con, {"run": list(files)}, key, axis, width).get("run")

    def curves(self, con, runs: dict[Any, list], key: str, axis: str, width: int) -> dict[Any, dict[str, Any]]:
        """:meth:`curve` of several runs at once (``runs``: id -> part files); parts not summarized
        yet are computed in one DuckDB query."""
        summaries = self.summaries(con, [f for fs in runs.values() for f in fs], key, axis)
        out = {}
        for rid, files in runs.items():
            parts = [s for f in files if (s := summaries.get(str(f))) is not None and len(s)]
            if not parts:
                continue
            x0 = min(float(p.arrays["fx"].min()) for p in parts)
            x1 = max(float(p.arrays["lx"].max()) for p in parts)
            k = max(level_for(x1 - x0, width, axis), max(p.k for p in parts))
            b = merge([p.at(k) for p in parts], k) if len(parts) > 1 else parts[0].at(k)
            xs, ys = curve_points(b)
            out[rid] = {"x": xs, "y": ys, "n": int(b.arrays["n"].sum()), "min": float(b.arrays["nv"].min()),
                        "max": float(b.arrays["mv"].max())}
        return out

    def summaries(self, con, files: Sequence[str | os.PathLike], key: str, axis: str) -> dict[str, Buckets | None]:
        """Each part's summary of ``key`` on ``axis`` (None: the part has no finite point of it)."""
        out: dict[str, Buckets | None] = {}
        todo: dict[str, tuple] = {}
        for f in dict.fromkeys(str(f) for f in files):
            ident = _identity(f, key, axis)
            with self._lock:
                if ident in self._mem:
                    self._mem.move_to_end(ident)
                    out[f] = self._mem[ident]
                    continue
            found = self._load(ident)
            if found is not False:
                out[f] = found  # type: ignore[assignment]
                self._remember(ident, found)  # type: ignore[arg-type]
            else:
                todo[f] = ident
        if todo:
            computed = compute(con, list(todo), key, axis)
            for f, ident in todo.items():
                b = computed.get(f)
                out[f] = b
                self._remember(ident, b)
                self._store(ident, b)
            with self._lock:
                self.computed += len(todo)
        return out

    # ------------------------------------------------------------------ memory
    def _remember(self, ident: tuple, b: Buckets | None) -> None:
        with self._lock:
            if ident not in self._mem:
                self._mem_bytes += b.nbytes if b is not None else 0
            self._mem[ident] = b
            while self._mem_bytes > self.memory_bytes and self._mem:
                _k, old = self._mem.popitem(last=False)
                self._mem_bytes -= old.nbytes if old is not None else 0

    # ------------------------------------------------------------------ disk
    def _path(self, ident: tuple) -> Path:
        digest = hashlib.sha256("\0".join(map(str, ident)).encode("utf-8", "surrogateescape")).hexdigest()[:40]
        return self.dir / f"{digest}.npz"

    def _load(self, ident: tuple) -> Buckets | None | bool:
        """The stored summary, None (stored: the part has none), or False (not stored or unreadable)."""
        import numpy as np

        path = self._path(ident)
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["ident"]) != repr(ident):
                    return False  # a hash collision or a foreign file: recompute
                if int(z["empty"]):
                    return None
                return with_levels(Buckets(int(z["k"]), {f: z[f] for f in FIELDS}))
        except Exception:  # noqa: BLE001 - missing, damaged, another version: a recomputation
            return False

    def _store(self, ident: tuple, b: Buckets | None) -> None:
        import numpy as np

        path = self._path(ident)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            arrays: dict[str, Any] = dict(b.arrays) if b is not None else {}
            arrays.update(ident=np.array(repr(ident)), empty=np.array(int(b is None)), k=np.array(b.k if b else 0))
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
            os.replace(tmp, path)
            self._account(path)
        except OSError:  # a read-only store or a full disk: the memory cache still serves
            try:
                tmp.unlink()
            except OSError:
                pass

    def _account(self, path: Path) -> None:
        """Keep the folder under :attr:`disk_bytes`: past it, delete the oldest files down to 3/4."""
        with self._lock:
            if self._disk_bytes is None:
                self._disk_bytes = sum(_size(p) for p in self.dir.glob("*.npz"))
            else:
                self._disk_bytes += _size(path)
            if self._disk_bytes <= self.disk_bytes:
                return
            files = sorted(self.dir.glob("*.npz"), key=_mtime)
            for p in files:
                if self._disk_bytes <= self.disk_bytes * 3 // 4:
                    break
                size = _size(p)
                try:
                    p.unlink()
                    self._disk_bytes -= size
                except OSError:
                    pass


def _identity(path: str, key: str, axis: str) -> tuple:
    st = os.stat(path)  # FileNotFoundError: the part was merged away, the caller lists again
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns, key, axis)


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


# ---------------------------------------------------------------------- computing
def compute(con, files: Sequence[str], key: str, axis: str) -> dict[str, Buckets]:
    """Each part's summary of ``key`` at its finest level, in two DuckDB queries over all of
    them (their extents, then their buckets). Parts without a finite point of the key are absent."""
    import numpy as np

    if axis not in MIN_LEVEL:
        raise ValueError("axis must be 'step' or 'time'")
    xexpr = "step::DOUBLE" if axis == "step" else "epoch_us(ts) / 1e6"
    src = "read_parquet($files, filename = true, union_by_name = true)"
    where = "key = $key AND isfinite(value)"
    params: dict[str, Any] = {"files": list(files), "key": key}
    cur = con.cursor()
    try:
        ext = cur.execute(f"SELECT filename, min({xexpr}), max({xexpr}) FROM {src} WHERE {where} GROUP BY filename",
                          params).fetchall()
        if not ext:
            return {}
        values = []
        for i, (fname, x0, x1) in enumerate(ext):
            k = level_for(x1 - x0, FINEST_BUCKETS, axis)
            params[f"f{i}"], params[f"s{i}"], params[f"k{i}"] = fname, 2.0 ** -k, k
            values.append(f"($f{i}, $s{i}::DOUBLE, $k{i}::INTEGER)")
        rows = cur.sql(f"""
            WITH lv(filename, scale, k) AS (VALUES {', '.join(values)}),
            b AS (SELECT filename, k, floor(x * scale)::BIGINT AS i, x, value
                  FROM (SELECT filename, {xexpr} AS x, value FROM {src} WHERE {where}) JOIN lv USING (filename))
            SELECT filename, any_value(k), i, count(*), min(x), arg_min(value, x), arg_min(x, value), min(value),
                   arg_max(x, value), max(value), max(x), arg_max(value, x)
            FROM b GROUP BY filename, i ORDER BY filename, i""", params=params).to_arrow_table()
    finally:
        cur.close()
    names = rows.column(0).to_pylist()
    cols = [rows.column(j).to_numpy() for j in range(2, 12)]
    ks = rows.column(1).to_numpy()
    out: dict[str, Buckets] = {}
    bounds: list[int] = [0, *(j for j in range(1, len(names)) if names[j] != names[j - 1])] if names else []
    ends = [*bounds[1:], len(names)]
    for s, e in zip(bounds, ends):
        arrays = {f: np.ascontiguousarray(c[s:e]) for f, c in zip(FIELDS, cols)}
        arrays["idx"] = arrays["idx"].astype(np.int64)
        arrays["n"] = arrays["n"].astype(np.int64)
        out[names[s]] = with_levels(Buckets(int(ks[s]), arrays))
    return out
