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
  drawn). Only finite values enter a bucket. Of equal values, a bucket's minimum is the first
  point holding it and its maximum the last, at every level, so ties never make two paths to
  the same curve disagree.
* **A restart reads kilobytes per run.** Beside each part's finest summary a coarse one (at most
  :data:`COARSE_BUCKETS` buckets) is kept; an overlay of many runs, each drawn in a few dozen
  buckets, merges those.
* **A cache, never a source of truth.** Each part file is immutable (a new part or a merge is
  a new file), so a part's summary of one key on one axis, at the part's finest level (at most
  :data:`FINEST_BUCKETS` buckets), is keyed by the part's path, size and modification time. It
  is kept in memory (:class:`Pyramids`, bounded by bytes) and in
  ``<root>/_catalog/curves/<hash>.m4`` (one flat file: a JSON line, then the columns) (written atomically; a damaged, missing or unwritable
  file costs a recomputation, never a wrong answer; pruned oldest first beyond
  :data:`DISK_BYTES`). A poll of a live run computes only the parts it has not seen.
* **Computed by DuckDB, in one query for many parts**: each part's extent of the key, then its
  buckets; user values are bound parameters.
"""

from __future__ import annotations

import hashlib
import json
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

COARSE_BUCKETS = 64  # a part's coarse summary, what an overlay of many runs merges (a few KB on disk)
FINEST_BUCKETS = 1 << 12  # a part's finest summary holds at most this many buckets (4,096: wider than any chart answer)
MEMORY_BYTES = 768 << 20  # part summaries kept in memory (1,000 runs of 10k points: about 400 MB)
DISK_BYTES = 512 << 20  # part summaries kept under _catalog/curves/ (pruned to 3/4 of it, oldest first)
CURVES_DIR = "curves"  # under the catalog's folder
SUFFIX = ".m4"  # a part summary's file under CURVES_DIR
DISK_FORMAT = 1
FIELDS = ("idx", "n", "fx", "fv", "nx", "nv", "mx", "mv", "lx", "lv")
MIN_LEVEL = {"step": 0, "time": -20}  # a step is an integer; a second splits down to about a microsecond


@dataclass
class Buckets:
    """The non-empty buckets of one level, ordered by ``idx``: count, first, minimum, maximum and
    last point (x and value each) of the finite points in each."""

    k: int
    arrays: dict[str, np.ndarray]
    levels: dict[int, Buckets] | None = None  # a part summary's pyramid: coarser levels, made when first asked
    finest: int | None = None  # a coarse summary (at most COARSE_BUCKETS buckets): the level of its part's finest one

    @property
    def nbytes(self) -> int:
        """Its size with a whole pyramid (each coarser level at most half the last): a bound that
        does not grow as levels are made, so the memory cache's accounting stays exact."""
        return 2 * sum(a.nbytes for a in self.arrays.values())

    def at(self, k: int) -> Buckets:
        """These buckets at level ``k``. With a pyramid, each level is merged once, from the
        finest one (a single merge of at most :data:`FINEST_BUCKETS` buckets), then kept."""
        if self.levels is None or k <= self.k:
            return coarsen(self, k)
        got = self.levels.get(k)
        if got is None:
            got = self.levels[k] = coarsen(self, k)
        return got

    def __len__(self) -> int:
        return len(self.arrays["idx"])


def with_levels(b: Buckets) -> Buckets:
    """``b`` with a pyramid: its coarser levels are made when first asked and kept, so a curve of
    a few buckets merges a few buckets, not the finest level's thousands, from the second time."""
    b.levels = {}
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
    import numpy as np

    # one part's buckets are in idx order with x ranges disjoint and increasing, so a coarser
    # bucket's members are a run of consecutive rows: its first point is its first row's, its
    # last its last row's, its extremes found by a reduction (no sort, unlike a merge of parts)
    a = b.arrays
    idx = a["idx"] >> (k - b.k)
    starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
    ends = np.r_[starts[1:], len(idx)]
    sizes = ends - starts
    lo = np.minimum.reduceat(a["nv"], starts)
    hi = np.maximum.reduceat(a["mv"], starts)
    # ties as a merge breaks them: the first row holding the minimum, the last holding the maximum
    at_lo = np.flatnonzero(a["nv"] == np.repeat(lo, sizes))
    at_hi = np.flatnonzero(a["mv"] == np.repeat(hi, sizes))
    low = at_lo[np.searchsorted(at_lo, starts)]
    high = at_hi[np.searchsorted(at_hi, ends) - 1]
    first, last = starts, ends - 1
    return Buckets(k, {"idx": idx[starts], "n": np.add.reduceat(a["n"], starts), "fx": a["fx"][first], "fv": a["fv"][first],
                       "nx": a["nx"][low], "nv": a["nv"][low], "mx": a["mx"][high], "mv": a["mv"][high],
                       "lx": a["lx"][last], "lv": a["lv"][last]})


def coarse_level(b: Buckets) -> Buckets:
    """A part summary at the first level of at most :data:`COARSE_BUCKETS` buckets (itself when
    it has no more), remembering the level of ``b`` in ``finest``."""
    k = b.k
    if len(b) > COARSE_BUCKETS:
        span = float(b.arrays["lx"][-1] - b.arrays["fx"][0])
        k = max(b.k, math.ceil(math.log2(span / COARSE_BUCKETS)) if span > 0 else b.k)
        while len(set((b.arrays["idx"] >> (k - b.k)).tolist())) > COARSE_BUCKETS:
            k += 1
    c = coarsen(b, k)
    return with_levels(Buckets(c.k, c.arrays, finest=b.k))


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
        yet are computed in one DuckDB query.

        A run drawn in few buckets (an overlay of hundreds of runs gets a few dozen each) is
        merged from its parts' coarse summaries (at most :data:`COARSE_BUCKETS` buckets, a few KB
        on disk), so a restart reads kilobytes per run, not each part's finest level."""
        chosen: dict[Any, tuple[list[Buckets], int]] = {}
        fine_runs: dict[Any, list] = {} if width <= COARSE_BUCKETS // 2 else dict(runs)  # a wide chart needs the finest
        coarse = self.summaries(con, [f for fs in runs.values() for f in fs], key, axis, coarse=True) if not fine_runs else {}
        for rid, files in (runs.items() if not fine_runs else ()):
            parts = [s for f in files if (s := coarse.get(str(f))) is not None and len(s)]
            if not parts:
                continue
            x0 = min(float(p.arrays["fx"][0]) for p in parts)  # coarsening keeps each part's first and last point
            x1 = max(float(p.arrays["lx"][-1]) for p in parts)
            k = max(level_for(x1 - x0, width, axis), max(p.finest if p.finest is not None else p.k for p in parts))
            if all(k >= p.k for p in parts):
                chosen[rid] = (parts, k)
            else:
                fine_runs[rid] = files
        if fine_runs:
            fine = self.summaries(con, [f for fs in fine_runs.values() for f in fs], key, axis)
            for rid, files in fine_runs.items():
                parts = [s for f in files if (s := fine.get(str(f))) is not None and len(s)]
                if parts:
                    x0 = min(float(p.arrays["fx"][0]) for p in parts)
                    x1 = max(float(p.arrays["lx"][-1]) for p in parts)
                    chosen[rid] = (parts, max(level_for(x1 - x0, width, axis), max(p.k for p in parts)))
        out = {}
        for rid in runs:
            if rid not in chosen:
                continue
            parts, k = chosen[rid]
            b = merge([p.at(k) for p in parts], k) if len(parts) > 1 else parts[0].at(k)
            xs, ys = curve_points(b)
            out[rid] = {"x": xs, "y": ys, "n": int(b.arrays["n"].sum()), "min": float(b.arrays["nv"].min()),
                        "max": float(b.arrays["mv"].max())}
        return out

    def summaries(self, con, files: Sequence[str | os.PathLike], key: str, axis: str, *,
                  coarse: bool = False) -> dict[str, Buckets | None]:
        """Each part's summary of ``key`` on ``axis`` (None: the part has no finite point of it):
        at its finest level, or (``coarse``) at the first level of at most :data:`COARSE_BUCKETS`
        buckets, made from the finest one when not kept yet."""
        out: dict[str, Buckets | None] = {}
        todo: dict[str, tuple] = {}
        for f in dict.fromkeys(str(f) for f in files):
            ident = _identity(f, key, axis) + (("coarse",) if coarse else ())
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
        if todo and coarse:
            # from the finest summary when it is kept; a part never summarized (a first look at
            # hundreds of runs) is summarized coarsely by DuckDB directly, its finest level left
            # for when one chart asks for it
            fine = {f: self._cached(_identity(f, key, axis)) for f in todo}
            direct = compute(con, [f for f, b in fine.items() if b is False], key, axis, COARSE_BUCKETS)
            for f, ident in todo.items():
                b = fine[f]
                c = direct.get(f) if b is False else coarse_level(b) if b is not None else None  # type: ignore[arg-type]
                out[f] = c
                self._remember(ident, c)
                self._store(ident, c)
            with self._lock:
                self.computed += sum(1 for b in fine.values() if b is False)
        elif todo:
            computed = compute(con, list(todo), key, axis)
            for f, ident in todo.items():
                b = computed.get(f)
                out[f] = b
                self._remember(ident, b)
                self._store(ident, b)
            with self._lock:
                self.computed += len(todo)
        return out

    def _cached(self, ident: tuple) -> Buckets | None | bool:
        """A summary kept in memory or on disk, without computing it (False: not kept)."""
        with self._lock:
            if ident in self._mem:
                return self._mem[ident]
        found = self._load(ident)
        if found is not False:
            self._remember(ident, found)  # type: ignore[arg-type]
        return found

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
        return self.dir / f"{digest}{SUFFIX}"

    def _load(self, ident: tuple) -> Buckets | None | bool:
        """The stored summary, None (stored: the part has none), or False (not stored or unreadable)."""
        import numpy as np

        try:
            with open(self._path(ident), "rb") as fh:
                head = json.loads(fh.readline())
                if head.get("ident") != repr(ident) or head.get("format") != DISK_FORMAT:
                    return False  # a hash collision, a foreign file or another format: recompute
                if head["empty"]:
                    return None
                m = int(head["m"])
                ints = np.frombuffer(fh.read(16 * m), np.int64).reshape(2, m)
                floats = np.frombuffer(fh.read(64 * m), np.float64).reshape(8, m)
                if ints.shape[1] != m or floats.shape[1] != m or fh.read(1):
                    return False
            arrays = {"idx": ints[0], "n": ints[1], **dict(zip(FIELDS[2:], floats))}
            return with_levels(Buckets(int(head["k"]), arrays, finest=head.get("finest")))
        except Exception:  # noqa: BLE001 - missing, damaged, another version: a recomputation
            return False

    def _store(self, ident: tuple, b: Buckets | None) -> None:
        """One flat file: a JSON line (identity, level, bucket count), then the two integer and
        eight float columns as little-endian arrays; written to a temporary name and renamed."""
        import numpy as np

        path = self._path(ident)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            m = len(b) if b is not None else 0
            head = {"format": DISK_FORMAT, "ident": repr(ident), "empty": b is None, "k": b.k if b else 0, "m": m,
                    "finest": b.finest if b is not None else None}
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(head).encode() + b"\n")
                if b is not None:
                    fh.write(np.ascontiguousarray(np.stack([b.arrays["idx"], b.arrays["n"]]), "<i8").tobytes())
                    fh.write(np.ascontiguousarray(np.stack([b.arrays[f] for f in FIELDS[2:]]), "<f8").tobytes())
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
                for old in self.dir.glob("*.npz"):  # the earlier format (one .npz per summary): never read again
                    try:
                        old.unlink()
                    except OSError:
                        pass
                self._disk_bytes = sum(_size(p) for p in self.dir.glob("*" + SUFFIX))
            else:
                self._disk_bytes += _size(path)
            if self._disk_bytes <= self.disk_bytes:
                return
            files = sorted(self.dir.glob("*" + SUFFIX), key=_mtime)
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
def compute(con, files: Sequence[str], key: str, axis: str, buckets: int = FINEST_BUCKETS) -> dict[str, Buckets]:
    """Each part's summary of ``key`` at its finest level (about ``buckets`` buckets; fewer make a
    coarse summary, which records the finest level in ``finest``), in two DuckDB queries over all
    of them (their extents, then their buckets). Parts without a finite point of the key are absent."""
    import numpy as np

    from .views import bound_values

    if axis not in MIN_LEVEL:
        raise ValueError("axis must be 'step' or 'time'")
    if not files:
        return {}
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
        finest: dict[str, int] = {}
        levels = []
        for fname, x0, x1 in ext:
            finest[fname] = level_for(x1 - x0, FINEST_BUCKETS, axis)
            k = level_for(x1 - x0, buckets, axis)
            levels.append((fname, 2.0 ** -k, k))
        values = bound_values(levels, params, (None, "DOUBLE", "INTEGER"))
        rows = cur.sql(f"""
            WITH lv(filename, scale, k) AS (VALUES {values}),
            b AS (SELECT filename, k, floor(x * scale)::BIGINT AS i, x, value
                  FROM (SELECT filename, {xexpr} AS x, value FROM {src} WHERE {where}) JOIN lv USING (filename))
            SELECT filename, any_value(k), i, count(*), min(x), arg_min(value, x), arg_min(x, (value, x)), min(value),
                   arg_max(x, (value, x)), max(value), max(x), arg_max(value, x)
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
        out[names[s]] = with_levels(Buckets(int(ks[s]), arrays, finest=finest[names[s]] if buckets < FINEST_BUCKETS else None))
    return out
