"""What MLflow holds of a metric key in a range of steps: what a metrics reconcile compares with.

A reconcile of an in-doubt metrics batch (:meth:`~trackstore.sync.mlflow.MlflowAdapter.reconcile`)
asks, per key, for the points at the batch's steps only, so it costs about what the batch costs,
whatever the length of the run's history. A tracking server answers for a range of steps
(``get-history-bulk-interval``, the endpoint MLflow's UI draws charts from); a local store, or a
server without it, gives the key's whole history, filtered here. What was read is kept for the
retries of the batch and kept current by the sends MLflow acknowledged; a send whose outcome is
unknown drops the ranges of its keys only (its own points are the uncertain ones).

Points compare as ``(step, timestamp in ms, value)`` with the value normalised by
:func:`comparable` (NaN, the infinities, and MLflow's ±1.8e308 for them, compare equal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from trackstore.store.redact import redact_text

from .adapter import PermanentError, RetryableError
from .http import classify

#: MLflow's endpoint for a key's points in a range of steps (served beside the REST API for its UI)
RANGE_ENDPOINT = "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval"
RANGE_LIMIT = 2500  # the most points it returns per run; an answer that long may be sampled
INT32 = (-2 ** 31, 2 ** 31 - 1)  # its step bounds are int32


@dataclass
class HeldRange:
    """The points MLflow held at steps ``lo``..``hi`` of one key, as last read (plus acknowledged sends)."""

    lo: int
    hi: int
    points: set


class HeldPoints:
    """(run id, MLflow key) -> the points MLflow holds in a range of steps, read through
    ``adapter`` (its ``client``, ``call`` and ``uri``)."""

    def __init__(self, adapter: Any):
        self.adapter = adapter
        self.ranges: dict[tuple[str, str], HeldRange] = {}
        self.ranged = adapter.uri.startswith(("http://", "https://"))  # the server answers for a step range

    def points(self, rid: str, mk: str, lo: int, hi: int) -> set:
        """The points ``(step, timestamp, value)`` MLflow holds for key ``mk`` of run ``rid`` at
        steps ``lo``..``hi``, from what this sync read already when that covers the range."""
        known = self.ranges.get((rid, mk))
        if known is not None and known.lo <= lo and hi <= known.hi:
            return known.points
        points = self.ask_range(rid, mk, lo, hi) if self.ranged and INT32[0] <= lo and hi <= INT32[1] else None
        if points is None:  # a local store, or a server that cannot answer for a range: the whole history
            hist = self.adapter.call("get metric history", self.adapter.client.get_metric_history, rid, mk)
            points = {(m.step, m.timestamp, comparable(m.value)) for m in hist if lo <= m.step <= hi}
        self.ranges[(rid, mk)] = HeldRange(lo, hi, points)
        return points

    def ask_range(self, rid: str, mk: str, lo: int, hi: int) -> set | None:
        """The points of ``mk`` at steps ``lo``..``hi`` from the server's ``get-history-bulk-interval``
        endpoint (the one MLflow's UI draws charts from; int32 steps); None when the answer may
        be incomplete (it samples at :data:`RANGE_LIMIT` points) or the server does not offer it
        (then it is not asked again)."""
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request

        params = {"run_ids": [rid], "metric_key": mk, "start_step": lo, "end_step": hi, "max_results": RANGE_LIMIT}
        resp = self.adapter.call("read metric range", http_request, get_default_host_creds(self.adapter.uri),
                                 RANGE_ENDPOINT, "GET", params=params)
        if resp.status_code in (400, 404, 405, 501):  # no such endpoint (an older or another server)
            self.ranged = False
            return None
        if resp.status_code != 200:  # retryable or not by the one policy of every target
            message = redact_text(f"read metric range: HTTP {resp.status_code}: {resp.text[:200]}")
            try:
                resp.raise_for_status()
            except Exception as exc:
                raise classify(exc, message) from None
            raise PermanentError(message)  # neither 200 nor an error status: nothing to read
        try:
            metrics = resp.json().get("metrics") or []
            points = {(int(m.get("step", 0)), int(m.get("timestamp", 0)), comparable(float(m.get("value", 0.0))))
                      for m in metrics if m.get("run_id", rid) == rid}
        except (ValueError, TypeError, AttributeError) as exc:  # cut mid-answer, or not MLflow's JSON
            raise RetryableError(f"read metric range: unreadable answer ({exc})") from None
        return None if len(metrics) >= RANGE_LIMIT else points

    def forget(self, rid: str, keys: Iterable[str]) -> None:
        """A send of these keys' points has an unknown outcome: read their ranges again."""
        for mk in keys:
            self.ranges.pop((rid, mk), None)

    def sent(self, rid: str, metrics: Iterable) -> None:
        """MLflow acknowledged ``metrics`` (``mlflow.entities.Metric``): the ranges read hold them now."""
        for m in metrics:
            known = self.ranges.get((rid, m.key))
            if known is not None and known.lo <= m.step <= known.hi:
                known.points.add((m.step, m.timestamp, comparable(m.value)))


def comparable(v):
    """A metric value as MLflow's answers and the store's rows compare: NaN as ``"nan"``, the
    infinities (and MLflow's ±1.8e308 for them) as ``"inf"``/``"-inf"``, other numbers as float."""
    if v is None:
        return None
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if abs(v) >= 1.7976931348623157e308:
            return "inf" if v > 0 else "-inf"
    return float(v)
