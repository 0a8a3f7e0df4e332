"""A model test of the sync engine's exactly-once protocol (Hypothesis, stateful).

Random interleavings of: rows of every kind logged by several writers of one run, writers
finishing, compaction, syncs through :mod:`trackstore.sync.testing`'s in-memory target with
faults queued (fail before or after the target stored a batch, time-outs, dropped connections)
and SIGKILL-equivalent aborts before or after a batch is stored, interrupts (Ctrl-C, SIGTERM)
after a batch is stored, and cursors lost (as when
``doctor --fix`` quarantines one). After every step: the target holds every row the cursor
acknowledged exactly once and no row twice. After a final clean sync: it holds every stored
row exactly once. The same model runs against a step-merged target (one row per step, like
wandb), which also records any step the engine split or sent out of order, against a target
that makes rows durable only when its session closes (like SwanLab), and against one that takes
a run's whole pass as one doubt (``Capabilities.doubt_per_run``, like the team store).

The suite runs a bounded number of examples; a deeper run is one command:

    TRACKSTORE_MODEL_EXAMPLES=2000 python -m pytest tests/test_sync_model.py -q
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import trackstore
from trackstore.read.reader import read_kind
from trackstore.store.layout import SYNC_DIR
from trackstore.store.ledger import load_cursor
from trackstore.store.ranges import RangeSet
from trackstore.sync.adapter import TargetOptions
from trackstore.sync.engine import Engine, SyncOptions, select_runs
from trackstore.sync.testing import (
    FAULTS,
    KINDS,
    Abort,
    MemoryAdapter,
    MemoryTarget,
    RunDoubtMemoryAdapter,
    SessionMemoryAdapter,
    StepMemoryAdapter,
)
from trackstore.upkeep.compact import compact_run

EXAMPLES = int(os.environ.get("TRACKSTORE_MODEL_EXAMPLES", "20"))
pytestmark = pytest.mark.filterwarnings("ignore")


class SyncModel(RuleBasedStateMachine):
    adapter = MemoryAdapter

    def __init__(self):
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ts-model-"))
        self.target = MemoryTarget()
        first = trackstore.init("p", name="model", root=self.root, flush_interval=3600)
        self.run_id = first.id
        self.writers = [first]
        self.step = 0
        self.art = self.root.parent / f"{self.root.name}-art.bin"
        self.art.write_bytes(b"weights")

    # ------------------------------------------------------------------ the store
    @precondition(lambda self: self._live())
    @rule(w=st.integers(0, 2), kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3), n=st.integers(1, 9))
    def log(self, w, kinds, n):
        live = self._live()
        run = live[w % len(live)]
        for i in range(n * len(kinds)):
            kind = kinds[i % len(kinds)]
            self.step += 1
            s = self.step
            if kind == "metrics":
                run.log({"a": float(s), "b": s * 2.0}, step=s)
            elif kind == "histograms":
                run.log({"h": trackstore.Histogram([1.0, 2.0, float(s)])}, step=s)
            elif kind == "samples":
                run.log_samples([{"input": f"q{s}", "output": "a", "score": 1.0}], step=s)
            elif kind == "spans":
                with run.trace(step=s, sample_index=0) as tr:
                    with tr.span("assistant", inputs="hi", outputs="ho"):
                        pass
            else:
                run.log_artifact(self.art, name=f"ckpt{s}", type="model")
        run.flush()

    @precondition(lambda self: len(self.writers) < 3 and self._live())
    @rule()
    def add_writer(self):
        self.writers.append(trackstore.init("p", run_id=self.run_id, root=self.root, join=True, flush_interval=3600))

    @precondition(lambda self: self._live())
    @rule(w=st.integers(0, 2))
    def finish_writer(self, w):
        live = self._live()
        live[w % len(live)].finish(compact=False)

    @rule()
    def compact(self):
        compact_run(self.writers[0].paths)  # skipped while a writer lives, as in production

    # ------------------------------------------------------------------ syncs
    @rule(faults=st.lists(st.sampled_from(FAULTS), max_size=4), clean=st.integers(0, 3))
    def sync(self, faults, clean):
        self.target.faults = [None] * clean + list(faults)  # `clean` batches go through first
        try:
            self._engine().sync(select_runs(self.root, SyncOptions()))
        except (Abort, KeyboardInterrupt):
            pass  # the process died, or stopped on an interrupt: what the cursor on disk says is what the next sync sees
        self.target.faults = []

    @rule()
    def lose_cursor(self):
        shutil.rmtree(self.root / SYNC_DIR, ignore_errors=True)

    # ------------------------------------------------------------------ the promise
    @invariant()
    def acknowledged_rows_held_exactly_once(self):
        probe = self._engine()
        cursor = load_cursor(self.root, probe.target, probe.destination, "p", self.run_id)
        assert not self.target.violations, self.target.violations
        for kind in KINDS:
            held = self.target.rows(kind)
            twice = [i for i, n in held.items() if n > 1]
            assert not twice, f"{kind} rows held twice: {twice[:5]}"
            acked = cursor.acked.get(kind)
            if cursor.session is not None:  # rows of an unconfirmed session are not the target's yet
                acked = RangeSet.from_json(cursor.session["acked"].get(kind))
            if acked:
                missing = [i for i in acked.pairs() if held[i] != 1]
                assert not missing, f"acknowledged {kind} rows not at the target: {missing[:5]}"

    def teardown(self):
        try:
            for run in self._live():
                run.finish(compact=False)
            report = self._engine().sync(select_runs(self.root, SyncOptions()))
            assert report.ok, [r.error for r in report.runs]
            paths = self.writers[0].paths
            for kind in KINDS:
                table = read_kind(paths, kind, columns=["writer", "seq"])
                stored = Counter(zip(table.column("writer").to_pylist(), table.column("seq").to_pylist()))
                assert self.target.rows(kind) == stored, kind
            assert not self.target.violations, self.target.violations
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.art.unlink(missing_ok=True)

    # ------------------------------------------------------------------ helpers
    def _live(self):
        return [w for w in self.writers if not w.finished]

    def _engine(self) -> Engine:
        adapter = self.adapter(TargetOptions(store_root=str(self.root)), self.target)
        return Engine(self.root, adapter, SyncOptions(max_retries=2, backoff_base=0.0, seed=0))


class StepSyncModel(SyncModel):
    """The same model against a target that takes one row per step (like wandb): the engine
    sends metrics, histograms and samples as step-merged batches."""

    adapter = StepMemoryAdapter


class SessionSyncModel(SyncModel):
    """The same model against a target that makes rows durable only when its session closes
    (like SwanLab): a killed sync loses what the session spooled, and the engine must resend it."""

    adapter = SessionMemoryAdapter


class RunDoubtSyncModel(SyncModel):
    """The same model against a target that takes a run's whole pass as one doubt (like the team
    store, ``Capabilities.doubt_per_run``): kills and faults between its batches leave the
    run's doubt, which the next sync reconciles."""

    adapter = RunDoubtMemoryAdapter


# the variants share the engine's code paths with the plain model: half its examples keep the
# suite's time (TRACKSTORE_MODEL_EXAMPLES deepens all four)
for _model, _n in ((SyncModel, EXAMPLES), (StepSyncModel, max(1, EXAMPLES // 2)), (SessionSyncModel, max(1, EXAMPLES // 2)),
                   (RunDoubtSyncModel, max(1, EXAMPLES // 2))):
    _model.TestCase.settings = settings(max_examples=_n, stateful_step_count=20, deadline=None, database=None,
                                        suppress_health_check=list(HealthCheck))
TestSyncModel = SyncModel.TestCase
TestStepSyncModel = StepSyncModel.TestCase
TestSessionSyncModel = SessionSyncModel.TestCase
TestRunDoubtSyncModel = RunDoubtSyncModel.TestCase


@pytest.mark.parametrize("model", [SyncModel, StepSyncModel, SessionSyncModel], ids=["plain", "steps", "session"])
def test_a_lost_cursor_whose_reconciling_sync_fails_is_still_reconciled_next_time(model):
    """Found by the session model: a lost cursor meets the remote run (every batch to be
    reconciled), the sync then fails before it got through the batches, and the cursor it saved
    knew the remote run but not the doubt, so the next sync resent the rest blindly (an artifact
    held twice). The doubt is saved with the remote id now (``cursor.recheck``)."""
    m = model()
    m.log(kinds=["artifacts"], n=1, w=0)
    m.sync(clean=0, faults=[])
    m.log(kinds=["metrics"], n=1, w=0)
    m.lose_cursor()
    m.sync(clean=0, faults=["fail_before"] * 3)  # more failures than --max-retries 2: the sync gives up
    m.acknowledged_rows_held_exactly_once()
    m.sync(clean=0, faults=[])
    m.acknowledged_rows_held_exactly_once()
    m.teardown()
