"""The catalog as a state machine: whatever runs do, its answers equal a fresh scan of the store.

Runs appear (ended at once, or written by a live writer of this process), grow while running,
finish or fail, are resumed, get new record kinds, lose rows, are compacted, acknowledged by a
cursor and gc'd; after every step the listing, the listing's rows, ``status``, the
``sync_state`` rows and the sync's no-change check, answered through the catalog (kept between
steps in ``_catalog/``), must equal what reading every file gives. Every fingerprint is trusted
at once (the racy rule is switched off: it would hide a wrong freshness check behind
re-reading), and steps are kept a file-system clock tick apart.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import trackstore
from tests.test_catalog import (
    DEST,
    TARGET,
    _settle,
    described,
    full_runs,
    full_status,
    full_sync_state,
    full_unchanged,
    listed,
    op_ack,
    op_compact,
    op_create,
    op_gc,
    op_lose,
    op_records,
    op_resume,
)
from trackstore.read.listing import list_runs
from trackstore.read.sync_status import status_rows
from trackstore.store import meta as store_meta
from trackstore.store.catalog import freshness
from trackstore.store.ledger import sync_state_rows, unchanged_since_ack

MAX_LIVE = 2  # runs written at once by this process (each has a writer thread)


class CatalogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ts-catmodel-"))
        self.live: list = []  # runs this process is writing: running, and growing
        self.made = 0
        self._racy, self._heartbeat = freshness.RACY_S, store_meta.HEARTBEAT_INTERVAL_S
        freshness.RACY_S = -3600.0  # trust every fingerprint: the freshness check, not the racy rule, is under test
        store_meta.HEARTBEAT_INTERVAL_S = 3600.0  # no heartbeat rewrites a live run's files between two looks

    def teardown(self):
        try:
            for run in self.live:
                run.finish()
        finally:
            freshness.RACY_S, store_meta.HEARTBEAT_INTERVAL_S = self._racy, self._heartbeat
            shutil.rmtree(self.root, ignore_errors=True)

    def _ended(self, i: int):
        """An ended run (not one this process is writing), picked by ``i``; None if there is none."""
        live = {run.run_id for run in self.live}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = [r for r in full_runs(self.root) if r.run_id not in live]
        return runs[i % len(runs)] if runs else None

    # ------------------------------------------------------------------ runs appear
    @rule(project=st.sampled_from(["a", "b"]), steps=st.integers(0, 4),
          ending=st.sampled_from(["finished", "failed", "crashed"]))
    def appear_ended(self, project, steps, ending):
        op_create(self.root, project, steps, ending)
        _settle()

    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(project=st.sampled_from(["a", "b"]), steps=st.integers(0, 3))
    def start(self, project, steps):
        self.made += 1
        run = trackstore.init(project=project, root=self.root, name=f"live{self.made}")
        for s in range(steps):
            run.log({"loss": 1.0 / (s + 1)}, step=s)
        run.flush()
        self.live.append(run)
        _settle()

    # ------------------------------------------------------------------ runs grow and end
    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 9), steps=st.integers(1, 3), samples=st.booleans())
    def grow(self, i, steps, samples):
        run = self.live[i % len(self.live)]
        for _ in range(steps):
            run.log({"loss": 0.25, "grown": 1.0})
        if samples:  # a kind folder that was not there
            run.log_samples([{"input": "q", "output": "a", "score": 1.0}], step=0)
        run.flush()
        _settle()

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 9), failed=st.booleans())
    def finish(self, i, failed):
        run = self.live.pop(i % len(self.live))
        run.finish(exit_code=1 if failed else None)
        _settle()

    @rule(i=st.integers(0, 9), steps=st.integers(1, 3))
    def resume(self, i, steps):
        info = self._ended(i)
        if info is not None and info.status != "crashed":
            op_resume(self.root, info, steps)
            _settle()

    @rule(i=st.integers(0, 9), artifact=st.booleans())
    def new_kinds(self, i, artifact):
        info = self._ended(i)
        if info is not None and info.status != "crashed":
            op_records(self.root, info, artifact)
            _settle()

    @rule(i=st.integers(0, 9))
    def lose_rows(self, i):
        info = self._ended(i)
        if info is not None:
            op_lose(self.root, info)
            _settle()

    # ------------------------------------------------------------------ upkeep and sync
    @rule(i=st.integers(0, 9))
    def compact(self, i):
        info = self._ended(i)
        if info is not None:
            op_compact(self.root, info)
            _settle()

    @rule(i=st.integers(0, 9))
    def gc(self, i):
        info = self._ended(i)
        if info is not None:
            op_gc(self.root, info)
            _settle()

    @rule(i=st.integers(0, 9), fraction=st.sampled_from([0.0, 0.5, 1.0]), push_status=st.booleans())
    def acknowledge(self, i, fraction, push_status):
        info = self._ended(i)
        if info is not None:
            op_ack(self.root, info, fraction, push_status, False)
            _settle()

    # ------------------------------------------------------------------ the promise
    @invariant()
    def catalog_answers_as_a_fresh_scan(self):
        root = self.root
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            full = full_runs(root)
            assert described(list_runs(root, unreadable=True)) == described(full)
            assert listed(root) == [r.view_row(light=True) for r in full]
            assert status_rows(root) == full_status(root)
            assert sync_state_rows(root) == full_sync_state(root)
            assert unchanged_since_ack(root, TARGET, DEST, list_runs(root)) == full_unchanged(root)


CatalogModel.TestCase.settings = settings(max_examples=10, stateful_step_count=8, deadline=None,
                                          derandomize=True, suppress_health_check=list(HealthCheck))
test_catalog_agrees_with_a_fresh_scan_as_runs_live = CatalogModel.TestCase
