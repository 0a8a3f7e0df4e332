"""Alerts on runs: a metric that went NaN or infinite, and a live run that stopped logging.

Both are answered from what the catalog keeps of each metrics part file
(:class:`trackstore.store.catalog.MetricFacts`), read once per part when the part is catalogued,
never by scanning a store's metrics at listing time:

* **non-finite** (``nonfinite``): the run holds NaN or infinite metric values; per key how
  many of each and the first step one was seen at.
* **stalled** (``stalled``): the run is ``running`` (a writer is alive) but its newest metric
  row (of its own keys: the ``system/`` metrics a sampler thread logs whatever training does
  do not count) is older than ``stall_after`` times its usual logging interval, and older than
  :data:`STALL_FLOOR_S`. The usual interval is that of the writer that logged most often: the
  time between its first and newest metric row over its number of distinct log times, less
  one (a writer's pauses, evaluation phases included, count in it, so it errs on the quiet
  side). A run with fewer than two log times has no usual interval and is never stalled; a
  run that ended (finished, failed, crashed) is never stalled. The comparison uses the
  reader's clock and the rows' ``ts`` (the writer's clock): keep hosts in step (NTP).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ..store.clock import iso
from ..store.vocab import RunStatus

if TYPE_CHECKING:  # pragma: no cover
    from ..store.catalog import Catalog, MetricFacts

STALL_AFTER = 10  # times the usual logging interval (``trackstore runs --stall-after N``)
STALL_FLOOR_S = 60.0  # never stalled before this much silence: a heartbeat or two, a slow flush
NONFINITE, STALLED = "nonfinite", "stalled"  # the alert codes


@dataclass
class RunAlerts:
    """What is wrong with a run, as listings show it (empty ``codes``: nothing)."""

    codes: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # one sentence per alert, for people
    nonfinite: int = 0  # NaN and infinite metric values
    nonfinite_keys: dict[str, dict[str, int]] = field(default_factory=dict)  # key -> nan, inf, first_step
    last_metric_at: str | None = None  # the newest metric row's ts (running runs)
    interval_s: float | None = None  # the usual logging interval (running runs)
    silent_s: float | None = None  # seconds since the newest metric row (running runs)

    @property
    def short(self) -> str:
        """The table's cell: ``NaN``, ``inf``, ``stalled 14m`` (comma-joined), or empty."""
        out = []
        if NONFINITE in self.codes:
            nan = any(v["nan"] for v in self.nonfinite_keys.values())
            inf = any(v["inf"] for v in self.nonfinite_keys.values())
            out.append("NaN+inf" if nan and inf else "NaN" if nan else "inf")
        if STALLED in self.codes and self.silent_s is not None:
            out.append(f"stalled {short_duration(self.silent_s)}")
        return ", ".join(out)

    def fields(self) -> dict[str, Any]:
        """The alert fields of a run's row in ``--format json`` and ``/api/runs`` (a new dict;
        ``nonfinite_keys`` None rather than empty: Parquet output cannot hold an empty struct)."""
        return {"alerts": list(self.codes), "alert_text": list(self.texts), "nonfinite": self.nonfinite,
                "nonfinite_keys": dict(self.nonfinite_keys) or None, "last_metric_at": self.last_metric_at,
                "metric_interval_s": self.interval_s, "silent_s": self.silent_s}


QUIET = RunAlerts()  # what most runs of a store have: nothing (shared; never changed)


def alerts_of(facts: MetricFacts | None, status: str, *, stall_after: float = STALL_AFTER,
              now: float | None = None) -> RunAlerts:
    """The alerts of a run whose effective status is ``status`` and whose metrics parts say
    ``facts`` (read-only: a run with nothing to say shares :data:`QUIET`)."""
    if facts is None or (not facts.nonfinite and status != RunStatus.RUNNING):
        return QUIET
    out = RunAlerts()
    if facts.nonfinite:
        keys = {k: {"nan": int(v[0]), "inf": int(v[1]), "first_step": v[2]} for k, v in sorted(facts.keys.items())}
        out.codes.append(NONFINITE)
        out.nonfinite, out.nonfinite_keys = int(facts.nonfinite), keys
        out.texts.append(_nonfinite_text(keys))
    if status == RunStatus.RUNNING and facts.last_ts is not None:
        now = time.time() if now is None else now
        out.last_metric_at = iso(facts.last_ts)
        out.interval_s = facts.interval
        out.silent_s = silent = max(0.0, now - facts.last_ts)
        if facts.interval is not None and silent > max(stall_after * facts.interval, STALL_FLOOR_S):
            out.codes.append(STALLED)
            out.texts.append(f"no metric for {long_duration(silent)}, usually every {long_duration(facts.interval)}")
    return out


def _nonfinite_text(keys: dict[str, dict[str, int]]) -> str:
    """``NaN in actor/pg_loss since step 120`` (the key that went first; ``and N more keys``)."""
    first = min(keys, key=lambda k: (keys[k]["first_step"] is None, keys[k]["first_step"] or 0, k))
    v = keys[first]
    what = "NaN/inf" if v["nan"] and v["inf"] else "NaN" if v["nan"] else "inf"
    since = f" since step {v['first_step']}" if v["first_step"] is not None else ""
    more = f" (and {len(keys) - 1} more key{'s' if len(keys) > 2 else ''})" if len(keys) > 1 else ""
    return f"{what} in {first}{since}{more}"


def long_duration(seconds: float) -> str:
    """``20 s``, ``14 min``, ``3.5 h``, ``2.1 d``: a duration for a sentence."""
    if seconds < 120:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def short_duration(seconds: float) -> str:
    """``45s``, ``14m``, ``3h``, ``2d``: a duration for a table cell."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


#: where a listed run's row keeps its :class:`RunAlerts` (beside their fields): the table's short text comes from it
ROW_KEY = "_alerts"


def attach(row: dict[str, Any], found: RunAlerts) -> dict[str, Any]:
    """Put ``found``'s fields (:meth:`RunAlerts.fields`) into a listed run's ``row``, and ``found``
    itself under :data:`ROW_KEY`: the one way every listing (``runs``, the dashboard's table, the
    ``runs`` view's rows) attaches a run's alerts. Returns ``row``."""
    row.update(found.fields())
    row[ROW_KEY] = found
    return row


def add_alerts(root: str | os.PathLike | None, rows: Iterable[dict[str, Any]], *, stall_after: float = STALL_AFTER,
               now: float | None = None) -> None:
    """:func:`attach` each run's alerts to rows that have
    ``project``, ``run_id`` and ``status`` (rows of the ``runs`` view), from the store's catalog."""
    from ..store.catalog import open_catalog
    from ..store.layout import resolve_root

    catalog = open_catalog(resolve_root(root))
    now = time.time() if now is None else now
    try:
        for r in rows:
            attach(r, alerts_of(catalog.metric_facts(r["project"], r["run_id"]), r["status"],
                                stall_after=stall_after, now=now))
    finally:
        catalog.save()


def facts_of(catalog: Catalog | None, root: str | os.PathLike, project: str, run_id: str) -> MetricFacts | None:
    """What the catalog keeps of a run's metrics parts (a catalog of its own when none is given)."""
    if catalog is not None:
        return catalog.metric_facts(project, run_id)
    from ..store.catalog import open_catalog

    own = open_catalog(root)
    try:
        return own.metric_facts(project, run_id)
    finally:
        own.save()
