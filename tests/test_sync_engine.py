"""Engine promises that need no real target, checked against the in-memory reference target
(:mod:`trackstore.sync.testing`): retries that never resend blindly, the retry count a failure
names, the adapter closed once, and the imports adapters may use."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trackstore
import trackstore.sync as sync_pkg
from trackstore.sync.adapter import TargetOptions
from trackstore.sync.engine import Engine, SyncOptions, select_runs
from trackstore.sync.testing import MemoryAdapter, MemoryTarget

SYNC_DIR = Path(sync_pkg.__file__).parent


def _store(root, steps=20):
    run = trackstore.init("p", root=root)
    for s in range(steps):
        run.log({"a": float(s)}, step=s)
    run.finish()
    return run


def _engine(root, target, **kw):
    return Engine(root, MemoryAdapter(TargetOptions(store_root=str(root)), target),
                  SyncOptions(backoff_base=0.0, seed=0, **kw))


def test_a_retry_after_a_lost_answer_asks_the_target_first(root):
    _store(root)
    target = MemoryTarget()
    target.faults = ["fail_after", "timeout", "fail_before", "drop"]
    report = _engine(root, target).sync(select_runs(root, SyncOptions()))
    assert report.ok, report.runs[0].error
    assert set(target.rows("metrics").values()) == {1} and len(target.rows("metrics")) == 20
    assert target.calls["reconcile"] >= 4
    assert report.runs[0].reconciled == 14  # the two batches of 7 the target stored before the answer was lost


def test_giving_up_names_the_retries_it_made(root):
    _store(root)
    target = MemoryTarget()
    target.faults = ["fail_before"] * 3
    [res] = _engine(root, target, max_retries=2).sync(select_runs(root, SyncOptions())).runs
    assert res.error.startswith("gave up after 2 retries"), res.error
    assert res.retries == 2


def test_the_adapter_is_closed_once(root, monkeypatch):
    _store(root)
    closes = []

    class Counting(MemoryAdapter):
        def close(self):
            closes.append(1)

    made = []

    def counting(options):
        made.append(1)
        return Counting(options, MemoryTarget())

    monkeypatch.setattr(sync_pkg, "get_adapter_class", lambda target: counting)
    sync_pkg.sync(root, "memory", SyncOptions(backoff_base=0.0))
    assert len(closes) == 1 and len(made) == 1  # one sync, one worker: one adapter, closed once
    sync_pkg.sync(root, "memory", SyncOptions(backoff_base=0.0, dry_run=True))
    assert len(closes) == 2 and len(made) == 2


def test_adapters_import_no_engine_and_no_private_names():
    """An adapter translates; the engine's internals (and everyone's underscore names) are not its business."""
    for path in SYNC_DIR.glob("*.py"):
        if path.name in ("engine.py", "parallel.py", "__init__.py"):  # the engine, its scheduler, the entry
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                assert module != "engine" and not module.endswith(".engine"), f"{path.name} imports the engine"
                assert not any(a.name.startswith("_") and a.name != "__future__" for a in node.names), \
                    f"{path.name} imports a private name from {module}"


#: what only the engine may touch: the store's readers, the ledger (cursor files), upkeep
ENGINE_ONLY_MODULES = ("trackstore.read.reader", "trackstore.read.listing", "trackstore.read.points",
                       "trackstore.read.views", "trackstore.store.parts", "trackstore.store.ledger",
                       "trackstore.store.atomic", "trackstore.upkeep")
ENGINE_ONLY_NAMES = {"read_kind", "read_rows", "each_part", "row_ids", "save_cursor", "load_cursor",
                     "write_json_atomic", "list_runs", "resolve_runs"}


def adapter_modules() -> list[Path]:
    """The target adapters and their translation modules (the key names they share, and the
    reference adapter)."""
    return sorted(p for p in SYNC_DIR.glob("*.py")
                  if p.name.startswith(("mlflow", "wandb", "swanlab")) or p.name in ("testing.py", "keys.py"))


def test_no_adapter_reads_the_store_or_writes_a_cursor():
    """Only the engine reads the store and writes cursors: an adapter module imports none of
    the store's readers, the ledger or upkeep, nor the engine's modules, nor any underscore
    name, and calls no cursor writer (lazy imports inside functions included)."""
    mods = adapter_modules()
    assert {"mlflow.py", "wandb.py", "swanlab.py", "testing.py"} <= {p.name for p in mods}
    for path in mods:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = (node.module or "")
                full = f"trackstore.sync.{module}" if node.level else module
                assert not full.startswith(ENGINE_ONLY_MODULES), f"{path.name} imports {full}"
                assert full.rsplit(".", 1)[-1] not in ("engine", "parallel", "gaps"), f"{path.name} imports {full}"
                names = {a.name for a in node.names}
                assert not names & ENGINE_ONLY_NAMES, f"{path.name} imports {names & ENGINE_ONLY_NAMES}"
                assert not any(n.startswith("_") and n != "__future__" for n in names), f"{path.name}: {names}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    assert not a.name.startswith(ENGINE_ONLY_MODULES), f"{path.name} imports {a.name}"
            elif isinstance(node, ast.Attribute) and node.attr in ENGINE_ONLY_NAMES:
                raise AssertionError(f"{path.name} uses {node.attr}")


def test_destination_spellings_are_one_destination():
    from trackstore.sync.http import destination_url

    same = ["http://127.0.0.1:5000", "http://127.0.0.1:5000/", "http://localhost:5000", "HTTP://LocalHost:5000//",
            "http://bob:pw@127.0.0.1:5000", "http://[::1]:5000/"]
    assert {destination_url(u) for u in same} == {"http://127.0.0.1:5000"}
    assert destination_url("https://mlflow.example.org:443/") == "https://mlflow.example.org"
    assert destination_url("http://mlflow.example.org:8080/prefix/") == "http://mlflow.example.org:8080/prefix"
    assert destination_url("sqlite:////tmp/x/mlflow.db") == "sqlite:////tmp/x/mlflow.db"


def test_a_dead_proxy_is_named_without_its_secret():
    import pytest

    from tests.servers import free_port
    from trackstore.errors import TargetUnreachableError
    from trackstore.sync.http import probe

    proxy = f"http://alice:s3cr3t@127.0.0.1:{free_port()}"
    with pytest.raises(TargetUnreachableError) as err:
        probe(f"http://127.0.0.1:{free_port()}/health", what="MLflow at X", timeout=2, proxy=proxy)
    text = str(err.value)
    assert "through the proxy" in text and "127.0.0.1" in text and "s3cr3t" not in text


def test_a_wandb_cursor_of_the_carry_era_reads_its_carried_rows_as_acknowledged():
    """Before step-merged batches, wandb kept rows another kind's batch had delivered in
    ``remote["carried"]``: they are acknowledged (their skips counted once), and the keys go."""
    from trackstore.store.ledger import Cursor
    from trackstore.store.ranges import RangeSet

    data = {"target": "wandb", "destination": "d", "project": "p", "run_id": "r",
            "acked": {"metrics": {"w": [[0, 9]]}, "histograms": {"w": [[0, 1]]}},
            "skipped": {"histograms": 1},
            "remote": {"id": "ts1", "carried": {"histograms": {"w": [[0, 5]]}},
                       "carried_skipped": {"histograms\0late": {"w": [[1, 1], [4, 5]]}}}}
    c = Cursor.from_json(data)
    assert c.acked["histograms"] == RangeSet({"w": [[0, 5]]}) and c.acked["metrics"] == RangeSet({"w": [[0, 9]]})
    assert c.skipped["histograms"] == 1 + 2  # seq 1 was acknowledged (and counted) already
    assert c.remote == {"id": "ts1"} and c.remote_id == "ts1"


def test_a_swanlab_cursor_of_the_journal_era_becomes_a_session_and_rows_to_recheck():
    from trackstore.store.ledger import Cursor
    from trackstore.store.ranges import RangeSet

    data = {"target": "swanlab", "destination": "d", "project": "p", "run_id": "r",
            "acked": {"metrics": {"w": [[0, 9]]}}, "skipped": {"metrics": 1},
            "remote": {"id": "e", "journal": {"metrics": {"w": [[5, 9]]}}, "resend": {"metrics": {"w": [[20, 21]]}},
                       "key_max": {"a": 9}}}
    c = Cursor.from_json(data)
    assert c.session == {"acked": {"metrics": {"w": [[0, 4]]}}, "skipped": {"metrics": 1},
                         "remote": {"id": "e", "key_max": {"a": 9}}}
    assert c.recheck == {"metrics": RangeSet({"w": [[20, 21]]})} and "journal" not in c.remote
    assert Cursor.from_json(c.to_json()).session == c.session  # written in the new form


@pytest.mark.parametrize("exc, retry", [
    (ConnectionResetError("reset by peer"), True), (TimeoutError("read"), True),
    (Exception("503 Server Error: Service Unavailable for url: http://h/api"), True),
    (Exception("API request failed with error code 429 != 200"), True),
    (Exception("HTTPConnectionPool(host='127.0.0.1', port=54013): Max retries exceeded"), True),
    (Exception("401 Client Error: Unauthorized"), False), (Exception("invalid api key"), False),
    (Exception("status 404: no such run"), False), (Exception("value at step 500 rejected"), False),
    (FileNotFoundError("missing"), False), (Exception("something new"), False),
])
def test_one_error_policy_for_every_target(exc, retry):
    """sync/http.classify decides for all targets: connection trouble, time-outs, 408/429/5xx
    retry; auth, other 4xx and the unknown stop; a port or a step number is not a status."""
    from trackstore.sync.adapter import PermanentError, RetryableError
    from trackstore.sync.http import classify

    out = classify(exc, "msg")
    assert isinstance(out, RetryableError if retry else PermanentError) and str(out) == "msg"


def test_proxy_flag_does_not_rewrite_the_environment(root, monkeypatch):
    """--proxy reaches the clients through TargetOptions; the CLI leaves os.environ alone (a
    wandb-offline dry run: no client needs it)."""
    import os

    from trackstore.cli.main import main

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    run = trackstore.init("p", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    main(["sync", "--to", "wandb-offline", "--proxy", "http://127.0.0.1:9", "--dry-run", "--format", "json",
          "--root", str(root)])
    assert not {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} & set(os.environ)


def test_a_cursor_with_an_open_session_is_never_settled(root):
    """gc and the no-change skip must not trust ``acked`` while a session is unconfirmed."""
    from trackstore.store.ledger import Cursor, fully_synced_from_parts, settled, summarize_cursor

    run = trackstore.init("p", root=root)
    run.log({"a": 1.0}, step=0)
    run.finish()
    info = select_runs(root, SyncOptions())[0]
    target = MemoryTarget()
    Engine(root, MemoryAdapter(TargetOptions(), target), SyncOptions()).sync([info])
    from trackstore.store.ledger import load_cursor

    c = load_cursor(root, "memory", "memory:default", "p", run.id)
    assert fully_synced_from_parts(info.paths, c, "finished") and settled(summarize_cursor(c, {}), "finished")
    c.session = {"acked": {}, "skipped": {}, "remote": {}}
    c = Cursor.from_json(c.to_json())
    assert not fully_synced_from_parts(info.paths, c, "finished") and not settled(summarize_cursor(c, {}), "finished")


def test_a_cli_sync_builds_one_adapter_and_checks_it_online(root, monkeypatch):
    """``trackstore sync`` with one worker makes one adapter, checks it online and syncs with it
    (it once built a second one only to probe the target, and looked the class up three times)."""
    from typer.testing import CliRunner

    from trackstore.cli.main import app

    _store(root)
    made, online, closed = [], [], []
    target = MemoryTarget()

    class Counting(MemoryAdapter):
        def check_online(self):
            online.append(self)
            super().check_online()

        def close(self):
            closed.append(self)

    def counting(options):
        made.append(Counting(options, target))
        return made[-1]

    monkeypatch.setattr(sync_pkg, "get_adapter_class", lambda name: counting)
    result = CliRunner().invoke(app, ["sync", "--to", "memory", "--root", str(root), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    assert len(made) == 1 and closed == made
    assert online and all(a is made[0] for a in online)  # the probe was the syncing adapter
    assert target.rows("metrics")  # and it was the adapter that sent the rows


def test_the_engine_and_scheduler_never_branch_on_a_target_name():
    """What a target needs is its adapter's Capabilities record; a target's name in the engine or
    the scheduler would be a second place deciding it."""
    names = {"mlflow", "wandb", "wandb-offline", "swanlab"}
    for module in ("engine.py", "batches.py", "verify.py", "parallel.py", "plan.py"):
        tree = ast.parse((SYNC_DIR / module).read_text())
        found = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names}
        assert not found, f"sync/{module} names targets {found}"


def _counting_saves(monkeypatch, fail_from: int | None = None):
    """Count the engine's cursor writes; from write ``fail_from`` on, the process is killed
    instead (Abort: nothing more is written)."""
    import trackstore.sync.engine as engine_mod
    from trackstore.sync.testing import Abort

    real, calls = engine_mod.save_cursor, []

    def save(root, cursor):
        calls.append(cursor.to_json())
        if fail_from is not None and len(calls) >= fail_from:
            raise Abort()
        real(root, cursor)

    monkeypatch.setattr(engine_mod, "save_cursor", save)
    return calls


def test_the_cursor_is_written_once_per_batch_and_once_at_the_end(root, monkeypatch):
    _store(root, steps=20)
    saves = _counting_saves(monkeypatch)
    report = _engine(root, MemoryTarget(), batch_size=7).sync(select_runs(root, SyncOptions()))
    assert report.ok, report.runs[0].error
    # three batches: each in-doubt mark carries the previous batch's acknowledgement, the last
    # write the last one; nothing is written before the first batch
    assert [s["in_doubt"] is not None for s in saves] == [True, True, True, False]
    assert [sum(b - a + 1 for _, spans in s["acked"].get("metrics", {}).items() for a, b in spans)
            for s in saves] == [0, 7, 14, 20]


def test_a_kill_between_an_acknowledgement_and_the_next_write_sends_nothing_twice(root, monkeypatch):
    from trackstore.sync.testing import Abort

    _store(root, steps=20)
    target = MemoryTarget()
    _counting_saves(monkeypatch, fail_from=2)  # batch 1 acknowledged in memory, killed before batch 2's mark
    with pytest.raises(Abort):
        _engine(root, target, batch_size=7).sync(select_runs(root, SyncOptions()))
    assert len(target.rows("metrics")) == 7
    monkeypatch.undo()
    report = _engine(root, target, batch_size=7).sync(select_runs(root, SyncOptions()))
    assert report.ok, report.runs[0].error
    assert report.runs[0].reconciled == 7  # the stored cursor still had batch 1 in doubt: asked, not resent
    assert set(target.rows("metrics").values()) == {1} and len(target.rows("metrics")) == 20


def test_ctrl_c_after_an_acknowledgement_stores_it(root, monkeypatch):
    from trackstore.store.ledger import load_cursor
    from trackstore.sync.engine import Progress

    _store(root, steps=20)
    target = MemoryTarget()

    class Interrupt(Progress):
        def advanced(self, n):
            raise KeyboardInterrupt

    engine = Engine(root, MemoryAdapter(TargetOptions(store_root=str(root)), target),
                    SyncOptions(backoff_base=0.0, seed=0, batch_size=7), Interrupt())
    [info] = select_runs(root, SyncOptions())
    with pytest.raises(KeyboardInterrupt):
        engine.sync([info])
    cursor = load_cursor(root, engine.target, engine.destination, info.project, info.run_id)
    assert cursor.in_doubt is None and len(cursor.acked["metrics"]) == 7
    report = _engine(root, target, batch_size=7).sync([info])
    assert report.ok and report.runs[0].reconciled == 0
    assert set(target.rows("metrics").values()) == {1} and len(target.rows("metrics")) == 20
