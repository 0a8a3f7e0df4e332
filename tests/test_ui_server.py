"""``trackstore ui`` over HTTP, without a browser: the M4 curves keep every extreme, the server
refuses paths with ``..`` on every route, answers only to loopback names, requires its token off
loopback, serves only artifact files the manifest lists (as downloads), and writes nothing.

The server is the real command in a subprocess on 127.0.0.1; the curves are checked against the
points read back from the store's own files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from urllib.parse import quote

import numpy as np
import pytest

from tests.helpers import REPO
from tests.ui_support import UiServer, env_for, serving, write_small_runs

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


# its tests share a module-scoped server/store: `make test` (--dist loadgroup) keeps them on one
# worker, so it is set up once, not once per worker
pytestmark = pytest.mark.xdist_group("test_ui_server")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui-store")
    root = tmp / "store"
    root.mkdir()
    ids = write_small_runs(root)
    return root, ids, tmp


@pytest.fixture(scope="module")
def server(store):
    root, _ids, tmp = store
    with serving(root, tmp) as s:
        yield s


def files_of(root):
    """The store's files, its catalog left out (a cache every reader may refresh, docs/format.md section 11)."""
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).parts[0] != "_catalog")


# ---------------------------------------------------------------------- M4
def test_m4_keeps_every_extreme_and_the_ends(tmp_path):
    """Each bucket's first, last, minimum and maximum are drawn: the plotted extremes equal the
    stored ones at every width, and so does every bucket's (an average would fail this)."""
    import trackstore
    from trackstore.read.pyramid import level_for
    from trackstore.ui.data import Store

    rng = np.random.default_rng(7)
    values = rng.normal(0, 1, 20_000)
    values[12_345] = 40.0  # a one-step spike
    values[777] = -35.0
    root = tmp_path / "s"
    with trackstore.init(project="p", name="r", root=root) as run:
        for i, v in enumerate(values):
            run.log({"k": float(v)}, step=i * 3)  # x is the step: 0, 3, 6, ...
    store = Store(root)
    [info] = store.runs()
    steps = np.arange(len(values)) * 3
    for width in (10, 100, 997):
        [s] = store.series([info], "k", width=width)["series"]
        xs, ys = np.array(s["x"]), np.array(s["y"])
        k = level_for(float(steps[-1] - steps[0]), width, "step")  # whole curves: aligned buckets
        assert s["n"] == len(values) and len(xs) <= 4 * (width + 1)
        assert ys.max() == values.max() == s["max"] and ys.min() == values.min() == s["min"]
        assert (xs[0], ys[0]) == (0, values[0]) and (xs[-1], ys[-1]) == (steps[-1], values[-1])
        assert np.all(np.diff(xs) >= 0)
        # every point drawn is a stored point, and every bucket's min and max are drawn
        stored = dict(zip(steps.tolist(), values.tolist()))
        assert all(stored[int(x)] == y for x, y in zip(xs, ys))
        b, bx = steps >> k, xs.astype(np.int64) >> k
        for bucket in np.unique(b):
            assert ys[bx == bucket].max() == values[b == bucket].max()
            assert ys[bx == bucket].min() == values[b == bucket].min()
    # zoomed: only the range, at full detail when it holds few points
    [s] = store.series([info], "k", width=500, lo=3 * 12_300, hi=3 * 12_400)["series"]
    assert s["n"] == 101 and s["x"] == [3.0 * i for i in range(12_300, 12_401)] and max(s["y"]) == 40.0


def test_series_of_two_runs_match_the_store(store):
    from trackstore.read.listing import list_runs
    from trackstore.read.points import read_points
    from trackstore.ui.data import Store

    root, ids, _tmp = store
    runs = [r for r in list_runs(root) if r.project == "rl"]
    out = Store(root).series(runs, "critic/score/mean", width=1000)
    assert [s["run_id"] for s in out["series"]] == [r.run_id for r in runs]
    for r, s in zip(runs, out["series"]):
        pts = read_points(r.paths, ["critic/score/mean"])["critic/score/mean"].sort_by("step")
        assert s["x"] == [float(v) for v in pts.column("step").to_pylist()]
        assert s["y"] == pts.column("value").to_pylist()


# ---------------------------------------------------------------------- security
TRAVERSALS = [
    "/static/../../../../etc/passwd",
    "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/..%2f..%2f..%2fetc%2fpasswd",
    "/static/%252e%252e/%252e%252e/etc/passwd",
    "/../../etc/passwd",
    "/api/../../etc/passwd",
    "/api/run?run=../../etc/passwd",
    "/api/run?run=rl/..%2f..%2fetc%2fpasswd",
    "/api/samples?run=..%2F..%2Fetc%2Fpasswd",
    "/api/series?run=../../etc/passwd&key=x",
    "/api/histograms?run=../../etc&key=passwd",
    "/api/artifact?run=../../etc&name=passwd&version=1&path=passwd",
    "/api/bands?run=../../etc/passwd&group=g&key=x",
    "/api/csv?run=../../etc/passwd&key=x",
    "/api/csv?run=..%2F..%2Fetc%2Fpasswd&key=passwd",
    "/api/generations?run=../../etc/passwd",
]


def test_paths_out_of_the_store_are_refused_on_every_route(server, store):
    _root, ids, _tmp = store
    cases = TRAVERSALS + [f"/api/artifact?run=rl/{ids['alpha']}&name=policy&version=0&path={quote(p)}"
                          for p in ("../../etc/passwd", "/etc/passwd", "../../../../../../etc/passwd", "../run.json")]
    for path in cases:
        status, headers, body = server.request(path)
        assert status in (400, 403, 404), (path, status)
        assert b"root:" not in body and b"format_version" not in body, path


def test_listed_artifact_downloads_and_nothing_else(server, store):
    root, ids, tmp = store
    status, headers, body = server.request(f"/api/artifact?run=rl/{ids['alpha']}&name=policy&version=0&path=weights.bin")
    assert status == 200 and body == b"\x00\x01weights" * 100
    assert headers["content-type"] == "application/octet-stream" and headers["content-disposition"].startswith("attachment")
    status, _h, _b = server.request(f"/api/artifact?run=rl/{ids['alpha']}&name=policy&version=1&path=weights.bin")
    assert status == 404


def test_only_loopback_host_names_are_answered(server):
    assert server.request("/api/health")[0] == 200
    for host in ("evil.example", "attacker.com:80", "10.0.0.1"):  # DNS rebinding: a page that renamed itself
        status, _h, body = server.request("/api/health", {"Host": host})
        assert status == 403 and b"root" not in body


def test_security_headers_and_json_not_html(server, store):
    _root, ids, _tmp = store
    status, headers, body = server.request(f"/api/samples?run=rl/{ids['alpha']}&step=20")
    assert status == 200 and headers["content-type"] == "application/json"
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-content-type-options"] == "nosniff"
    rows = json.loads(body)["rows"]
    assert any(r["output"] == '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>' for r in rows)


def test_a_token_is_required_off_loopback(store):
    """--host 0.0.0.0 prints a URL with a token; without it every request is refused."""
    root, _ids, tmp = store
    s = UiServer(root, tmp, host="0.0.0.0")
    try:
        m = re.search(r"\?token=([A-Za-z0-9_-]+)", s.banner)
        assert m, s.banner
        token = m.group(1)
        # the URL printed is one a browser can reach: the machine's name, never the wildcard address
        import socket

        assert "0.0.0.0" not in s.banner and f"http://{socket.gethostname()}:{s.port}/?token={token}" in s.banner
        assert s.request("/api/runs")[0] == 401
        assert s.request("/")[0] == 401
        for route in ("/api/bands?run=rl/x&group=g&key=k", "/api/csv?run=rl/x&key=k", "/api/generations?run=rl/x"):
            assert s.request(route)[0] == 401, route
        assert s.request("/api/runs", {"Authorization": "Bearer wrong"})[0] == 401
        assert s.request("/api/runs", {"Authorization": f"Bearer {token}"})[0] == 200
        status, headers, _b = s.request(f"/?token={token}")
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
        assert s.request("/api/runs", {"Cookie": cookie.split(";")[0]})[0] == 200
        assert s.request("/api/runs", {"Cookie": "trackstore_ui_token=nope"})[0] == 401
    finally:
        s.stop()


def test_the_server_writes_nothing(server, store):
    root, ids, _tmp = store
    before = files_of(root)
    for path in ("/", "/api/runs", f"/api/run?run=rl/{ids['alpha']}", f"/api/keys?run=rl/{ids['alpha']}",
                 f"/api/series?run=rl/{ids['alpha']}&run=rl/{ids['beta']}&key=actor/entropy",
                 f"/api/compare?run=rl/{ids['alpha']}&run=rl/{ids['beta']}", f"/api/samples?run=rl/{ids['alpha']}",
                 f"/api/trajectories?run=rl/{ids['alpha']}", f"/api/histograms?run=rl/{ids['alpha']}&key=grad/hist",
                 f"/api/bands?run=rl/{ids['alpha']}&run=rl/{ids['beta']}&group=a&group=b&key=actor/entropy",
                 f"/api/csv?run=rl/{ids['alpha']}&key=actor/entropy", f"/api/generations?run=rl/{ids['alpha']}"):
        assert server.request(path)[0] == 200, path
    assert files_of(root) == before


def _every_path(root):
    """Every file and folder under ``root`` with its size and mtime (catalog and locks included)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(d, name))
            out[os.path.relpath(os.path.join(d, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_what_the_server_writes_is_what_the_docs_say(tmp_path):
    """The dashboard writes the catalog cache and nothing else, and docs/ui.md names exactly that."""
    root = tmp_path / "store"
    root.mkdir()
    ids = write_small_runs(root)
    shutil.rmtree(root / "_catalog", ignore_errors=True)  # what a store never listed holds
    before = _every_path(root)
    server = UiServer(root, tmp_path)
    try:
        for path in ("/", "/api/runs", f"/api/run?run=rl/{ids['alpha']}", f"/api/keys?run=rl/{ids['alpha']}",
                     f"/api/series?run=rl/{ids['alpha']}&run=rl/{ids['beta']}&key=actor/entropy",
                     f"/api/samples?run=rl/{ids['alpha']}", f"/api/trajectories?run=rl/{ids['alpha']}",
                     f"/api/histograms?run=rl/{ids['alpha']}&key=grad/hist"):
            assert server.request(path)[0] == 200, path
    finally:
        server.stop()
    after = _every_path(root)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    curves = [p for p in changed if p.startswith("_catalog/curves")]
    assert curves[0] == "_catalog/curves" and len(curves) > 1 and all(p.endswith(".m4") for p in curves[1:])
    assert [p for p in changed if p not in curves] == ["_catalog", "_catalog/catalog.sqlite"]
    doc = (REPO / "docs" / "ui.md").read_text()
    bullet = doc[doc.index("* **Read-only.**"):].split("\n* ", 1)[0]
    assert "`_catalog/catalog.sqlite`" in bullet and "`_catalog/`" in bullet and "never writes the store's data" in bullet
    assert "`_catalog/curves/*.m4`" in bullet


def test_api_answers(server, store):
    _root, ids, _tmp = store
    runs = server.json("/api/runs")["runs"]
    assert sorted(r["name"] for r in runs) == ["alpha", "beta"]
    detail = server.json(f"/api/run?run=rl/{ids['alpha']}")
    assert detail["config"]["actor"]["optim"]["lr"] == 1e-6 and detail["histogram_keys"] == ["grad/hist"]
    assert [(a["name"], a["version"], a["logical_path"]) for a in detail["artifacts"]] == [("policy", 0, "weights.bin")]
    cmp = server.json(f"/api/compare?run=rl/{ids['alpha']}&run=rl/{ids['beta']}")
    assert {c["key"]: c["differs"] for c in cmp["config"]} == {"actor.optim.lr": True, "model.name": False, "seed": True}
    tr = server.json(f"/api/trajectories?run=rl/{ids['alpha']}&step=20&index=1")
    assert tr["total"] == 1 and tr["trees"][0]["sample_index"] == 1
    assert server.request("/api/run?run=rl/nope")[0] == 404
    assert server.request("/api/series?run=rl/" + ids["alpha"] + "&key=k&x=bogus")[0] == 400
    h = server.json(f"/api/histograms?run=rl/{ids['alpha']}&key=grad/hist")
    assert [r["step"] for r in h["rows"]] == list(range(0, 200, 20))


def test_help_is_fast_and_imports_no_server(tmp_path):
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "trackstore.cli.main", "ui", "--help"],
                         capture_output=True, text=True, env=env_for(tmp_path), timeout=60)
    assert out.returncode == 0 and "--host" in out.stdout and "ssh -L" in out.stdout
    assert "starlette" not in out.stderr and "uvicorn" not in out.stderr and "duckdb" not in out.stderr


def test_a_taken_port_is_a_clear_usage_error(server, store):
    root, _ids, tmp = store
    out = subprocess.run([sys.executable, "-m", "trackstore.cli.main", "ui", "--root", str(root), "--port", str(server.port)],
                         capture_output=True, text=True, env=env_for(tmp), timeout=60)
    assert out.returncode == 2 and f"cannot listen on 127.0.0.1:{server.port}" in out.stderr and "Traceback" not in out.stderr


def test_series_of_many_runs_is_a_post(server, store):
    """A thousand run ids do not fit in a URL: the page POSTs them as JSON; same answer as GET."""
    import urllib.request

    _root, ids, _tmp = store
    refs = [f"rl/{ids['alpha']}", f"rl/{ids['beta']}"]
    get = server.json(f"/api/series?run={refs[0]}&run={refs[1]}&key=actor/entropy&width=50")
    req = urllib.request.Request(server.url + "api/series", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"run": refs * 600, "key": "actor/entropy", "width": 50}).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        post = json.loads(r.read())
    assert post["series"] == get["series"]  # each run once
    assert len(json.dumps({"run": refs * 600})) > 40_000  # more than a request line may hold


def test_a_cached_curve_follows_new_parts_and_compaction(tmp_path, monkeypatch):
    """A settled folder is trusted by its own stat: a resumed run's new part, and the folder a
    compaction swaps in, still change the answer (nothing cached hides a point)."""
    import trackstore
    from trackstore.ui import data
    from trackstore.upkeep.compact import compact

    monkeypatch.setattr(data, "SETTLED_S", 0.0)  # every folder counts as settled: the stat path is the one tested
    root = tmp_path / "s"
    with trackstore.init(project="p", name="r", root=root, compact=False) as run:
        run.log({"k": 1.0}, step=0)
        rid = run.run_id
    store = data.Store(root)
    [info] = store.runs()
    assert store.series([info], "k")["series"][0]["n"] == 1
    with trackstore.init(project="p", run_id=rid, resume=True, root=root, compact=False) as run:
        run.log({"k": 7.0}, step=1)
    s = store.series([info], "k")["series"][0]
    assert (s["n"], s["max"]) == (2, 7.0)
    compact(root, [info.paths])
    s = store.series([info], "k")["series"][0]
    assert (s["n"], s["y"]) == (2, [1.0, 7.0])


def test_an_unchanged_runs_table_is_answered_304(server, store):
    """The page polls /api/runs every few seconds: an unchanged store answers 304 Not Modified
    (no body), and the table it answered is the one made from scratch."""
    from trackstore.ui.data import Store

    root, _ids, _tmp = store
    status, headers, body = server.request("/api/runs")
    assert status == 200 and headers["etag"].startswith('"') and headers["cache-control"] == "no-store"
    assert json.loads(body) == {"runs": json.loads(json.dumps(Store(root).run_rows()))}
    status, again, nothing = server.request("/api/runs", {"If-None-Match": headers["etag"]})
    assert (status, nothing, again["etag"]) == (304, b"", headers["etag"])
    assert server.request("/api/runs", {"If-None-Match": '"something else"'})[0] == 200


def test_the_runs_table_makes_again_only_the_rows_of_runs_that_changed(tmp_path, monkeypatch):
    """Each row is kept with what it was made from (run.json's fingerprint, status, end, last
    step): a poll of an unchanged store makes no row, a changed run.json makes that row again,
    and the answer always equals the table made from scratch."""
    import trackstore
    from trackstore.store.catalog import freshness
    from trackstore.store.meta import write_run_json
    from trackstore.ui import data

    monkeypatch.setattr(freshness, "RACY_S", -1.0)  # every fingerprint is old enough to keep
    monkeypatch.setattr(data, "LIST_TTL_S", 0.0)
    root = tmp_path / "store"
    ids = []
    for name in ("a", "b", "c"):
        with trackstore.init(project="p", name=name, config={"lr": 0.1}, root=root) as run:
            run.log({"x": 1.0}, step=0)
            ids.append(run.run_id)
    made = []
    real = data._run_row
    monkeypatch.setattr(data, "_run_row", lambda r: made.append(r.run_id) or real(r))
    s = data.Store(root)
    etag, body = s.runs_payload()
    assert sorted(made) == sorted(ids)
    made.clear()
    assert s.runs_payload() == (etag, body) and made == []
    paths = trackstore.read.listing.resolve_run(ids[1], root).paths
    meta = json.loads(paths.run_file.read_text())
    write_run_json(paths, {**meta, "name": "renamed"})
    etag2, body2 = s.runs_payload()
    assert made == [ids[1]] and etag2 != etag
    assert json.loads(body2) == {"runs": json.loads(json.dumps(data.Store(root).run_rows()))}
    assert [r["name"] for r in json.loads(body2)["runs"]] == ["a", "renamed", "c"]


def test_a_run_page_shows_its_own_sync_state_alone(tmp_path, monkeypatch):
    """The run page's sync section holds the run's own cursors, read alone (not the sync state
    of every run of the store, filtered)."""
    import trackstore
    from trackstore.store import ledger
    from trackstore.store.ledger import Cursor, save_cursor
    from trackstore.store.ranges import RangeSet
    from trackstore.ui import data

    root = tmp_path / "store"
    runs = []
    for name in ("a", "b"):
        with trackstore.init(project="p", name=name, root=root) as run:
            run.log({"x": 1.0}, step=0)
        runs.append(run)
        writer = next(run.paths.writers_dir.glob("*.json")).stem
        save_cursor(root, Cursor("mlflow", f"sqlite:///{name}.db", "p", run.run_id,
                                 acked={"metrics": RangeSet({writer: [[0, 0]]})}, remote={"run_id": name}))
    asked = []
    real = ledger.sync_state_cursors
    monkeypatch.setattr(ledger, "sync_state_cursors", lambda root, only=None: asked.append(only) or real(root, only))
    detail = data.Store(root).run_detail(trackstore.read.listing.resolve_run(runs[0].run_id, root))
    assert asked == [{("p", runs[0].run_id)}]
    assert {(s["run_id"], s["destination"]) for s in detail["sync"]} == {(runs[0].run_id, "sqlite:///a.db")}
    assert {s["kind"]: s["acked_rows"] for s in detail["sync"]}["metrics"] == 1


def test_a_zoomed_curve_of_many_runs_is_each_runs_own(tmp_path):
    """More than eight runs zoomed are one DuckDB query that joins each point to its run's
    extent; a few are asked run by run. Each run's answer in the many-run query is the one it
    gets alone: same points, count and extremes (runs of other lengths and step spacings, one
    with NaN and infinities, one without the key)."""
    import math

    import trackstore
    from trackstore.ui.data import Store

    rng = np.random.default_rng(11)
    root = tmp_path / "s"
    for i in range(10):
        with trackstore.init(project="p", name=f"r{i}", root=root) as run:
            if i == 9:
                run.log({"other": 1.0}, step=0)  # no point of the key
                continue
            values = rng.normal(i, 1 + i, 2_000 + 300 * i)
            if i == 4:
                values[[5, 50, 500]] = [math.nan, math.inf, -math.inf]
            for s, v in enumerate(values):
                run.log({"k": float(v)}, step=s * (1 + i % 3))
    runs = Store(root).runs()
    assert len(runs) == 10
    for lo, hi, width in ((100.0, 1_500.0, 120), (0.0, 9_000.0, 37), (1_999.0, 2_001.0, 50)):
        together = {(s["project"], s["run_id"]): s for s in Store(root).series(runs, "k", width=width, lo=lo, hi=hi)["series"]}
        for r in runs:
            [alone] = Store(root).series([r], "k", width=width, lo=lo, hi=hi)["series"]
            assert together[(r.project, r.run_id)] == alone, (r.name, lo, hi)
        drawn = [s for s in together.values() if s.get("n")]
        assert len(drawn) == 9  # the run without the key is listed, empty
