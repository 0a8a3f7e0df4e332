"""How a reader that stays up follows a team store (``trackstore.read.replica_copy.follow``):
how often it brings its copy in step, and what it says when it cannot. The copy itself, over a
real S3 server, is tested in tests/test_team_store_s3.py."""

from __future__ import annotations

import threading
import time

from trackstore.read import replica_copy


def test_a_long_pass_spaces_the_next_and_failures_are_said_once(monkeypatch):
    """A pass that takes long (a listing of a large replica) is followed by a wait of at least
    FOLLOW_DUTY times as long, whatever ``every`` asks; a failure repeated pass after pass is one
    line, its end another; the thread stops when asked."""
    calls: list[tuple[float, float]] = []
    outcomes = iter([None, OSError("link down"), OSError("link down"), OSError("link down"), None, None])
    done = threading.Event()

    def fake_copy(uri, env=None, **_how):
        start = time.monotonic()
        time.sleep(0.02)
        calls.append((start, time.monotonic()))
        failure = next(outcomes, None)
        if len(calls) == 6:
            done.set()
        if failure is not None:
            raise failure

    said: list[str] = []
    monkeypatch.setattr(replica_copy, "local_copy", fake_copy)
    stop = replica_copy.follow("s3://team/runs", 0.001, report=said.append)
    assert done.wait(60)
    stop.set()
    for (_s0, e0), (s1, _e1) in zip(calls, calls[1:]):
        assert s1 - e0 >= replica_copy.FOLLOW_DUTY * 0.02  # never a busy loop over a slow listing
    assert len(said) == 2, said
    assert "could not be brought in step (link down)" in said[0] and "in step again" in said[1]
    n = len(calls)
    time.sleep(1.5)
    assert len(calls) <= n + 1  # stopped: at most the pass that was under way


def test_a_dashboards_copy_follows_the_run_json_files_and_the_runs_it_has_read(monkeypatch):
    """With the runs a dashboard has read (``OnDemand``), each pass brings in step the run.json
    files and those runs' parts, not the whole replica; a run is fetched once, before its first
    read, however many requests ask for it at once."""
    calls: list[dict] = []
    lock = threading.Lock()

    def fake_copy(uri, env=None, **how):
        with lock:
            calls.append(how)
        time.sleep(0.05)

    def fake_bring(uri, runs, env=None):
        fake_copy(uri, env, runs=runs)

    monkeypatch.setattr(replica_copy, "local_copy", fake_copy)
    monkeypatch.setattr(replica_copy, "bring_runs", fake_bring)
    demand = replica_copy.OnDemand("s3://team/runs")
    threads = [threading.Thread(target=demand.bring, args=([("p", "a"), ("p", "b")],)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [{"runs": [("p", "a"), ("p", "b")]}]
    demand.bring([("p", "a")])
    assert len(calls) == 1  # read before: nothing fetched
    calls.clear()
    stop = replica_copy.follow("s3://team/runs", 0.01, report=lambda line: None, runs=demand.runs)
    deadline = time.monotonic() + 30
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    assert calls[0] == {"for_listing": True, "runs": [("p", "a"), ("p", "b")]}
