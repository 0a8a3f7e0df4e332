"""A sync through a link that breaks every 50-150 KB completes, exactly.

Between the sync and a real ``mlflow server`` over MLflow's file store (which keeps a point sent
twice twice), tests/proxy.py cuts the traffic every 50-150 KB (seeded), half of the cuts in a
request, half in the answer to one the server processed. Reconciling an in-doubt batch must
cost about what the batch costs (not the run's history: 1.3 MB at 1,000 points per key, which
such a link never lets through), so re-running the sync finishes within a few invocations.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

import trackstore
from tests.helpers import run_cli
from tests.proxy import FaultyProxy
from tests.servers import unique_experiment_name
from tests.sync_harness import mlflow_points

pytest.importorskip("mlflow")

pytestmark = pytest.mark.xdist_group("mlflow_file_server")

KEYS, STEPS, EXTRA = 20, 1000, 10  # 20 x 1,000 + 10 = 20,010 points (a reconcile asks once per key)
POINTS = KEYS * STEPS + EXTRA
MAX_INVOCATIONS = 10


def _log(root, project):
    run = trackstore.init(project, name="long", root=root)
    for s in range(STEPS + 1):
        keys = KEYS if s < STEPS else EXTRA
        run.log({f"train/k{i:02d}": s + i / 100 for i in range(keys)}, step=s)
    run.finish()
    return run


def test_sync_through_a_link_cut_every_50_to_150_kb_completes_exactly(root, mlflow_file_server):
    project = unique_experiment_name("cut-link")
    run = _log(root, project)
    started = time.monotonic()
    codes = []
    with FaultyProxy("127.0.0.1", mlflow_file_server.port) as proxy:
        proxy.link_cuts(50_000, 150_000, seed=26)
        for _ in range(MAX_INVOCATIONS):
            res = run_cli("sync", "--to", "mlflow", "--uri", proxy.url, "--timeout", "20", root=root, timeout=600)
            codes.append(res.returncode)
            assert res.returncode in (0, 7), res.stdout + res.stderr
            if res.returncode == 0:
                break
        stats = proxy.stats()
    elapsed = time.monotonic() - started
    print(f"\ncut link: {len(codes)} invocations {codes}, {stats.cuts} cuts, "
          f"{(stats.bytes_up + stats.bytes_down) / 1e6:.1f} MB through the link, {elapsed:.0f} s")
    assert codes[-1] == 0, f"not complete after {len(codes)} invocations: {codes}"
    assert stats.cuts >= 10
    points = mlflow_points(mlflow_file_server.url, project, run.id)
    assert not [p for p, n in points.items() if n > 1], "a point was stored twice"
    assert sum(points.values()) == POINTS
    expected = Counter((f"train/k{i:02d}", s, s + i / 100) for s in range(STEPS + 1)
                       for i in range(KEYS if s < STEPS else EXTRA))
    assert points == expected
