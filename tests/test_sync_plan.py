"""The dry run is the sync: a model test (Hypothesis, stateful) of the engine's plan of a run.

Random histories of several runs: runs started with or without a config, rows of every kind
logged, config and summary set, runs finished or left running, syncs through
:mod:`trackstore.sync.testing`'s in-memory target with faults (a batch stored and its answer
lost, a sync killed after the target stored a batch: a batch left in doubt), and cursors lost.
Before every sync the dry run's plan of each run is taken; the real sync must then do exactly
that: open the remote run when the plan says so (and only then), push metadata and the status it
names, hand over the rows it lists per kind (sent, or found at the target by reconciling), and
leave an up-to-date run alone. The engine's no-change check never calls a run up to date that
the plan would work on.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

import trackstore
from tests.helpers import log_record
from trackstore.store.catalog import freshness
from trackstore.sync.adapter import TargetOptions
from trackstore.sync.engine import Engine, SyncOptions, select_runs
from trackstore.sync.plan import FIND_OR_CREATE, OPEN
from trackstore.sync.testing import KINDS, Abort, MemoryAdapter, MemoryTarget, StepMemoryAdapter

EXAMPLES = int(os.environ.get("TRACKSTORE_MODEL_EXAMPLES", "12"))
pytestmark = pytest.mark.filterwarnings("ignore")


class Recorder(MemoryAdapter):
    """The reference adapter, recording what reached the target per run."""

    def __init__(self, options, target, events):
        super().__init__(options, target)
        self.events = events

    def _note(self, run, what, value=None):
        self.events.setdefault(run.run_id, []).append((what, value))

    def open_run(self, run, cursor):
        knew = bool(cursor.remote_id)  # the cursor the sync loaded already names the remote run
        opened = super().open_run(run, cursor)
        self._note(run, "open", opened)
        self._note(run, "knew remote", knew)
        return opened

    def sync_metadata(self, run, cursor):
        self._note(run, "metadata")
        return super().sync_metadata(run, cursor)

    def finish_run(self, run, cursor, status):
        self._note(run, "status", status)
        super().finish_run(run, cursor, status)


class StepRecorder(Recorder, StepMemoryAdapter):
    pass


class PlanModel(RuleBasedStateMachine):
    adapter = Recorder

    def __init__(self):
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="ts-plan-"))
        # trust every fingerprint at once (in real use, seconds later), so that the no-change
        # shortcut is taken here too and compared with the full plan
        self._racy, freshness.RACY_S = freshness.RACY_S, -3600.0
        self.target = MemoryTarget()
        self.runs: list = []
        self.step = 0
        self.events: dict = {}

    @precondition(lambda self: len(self.runs) < 3)
    @rule(config=st.booleans())
    def start(self, config):
        run = trackstore.init("p", name=f"r{len(self.runs)}", root=self.root, flush_interval=3600,
                              config={"lr": 0.1, "n": len(self.runs)} if config else None)
        run.flush()
        self.runs.append(run)

    @precondition(lambda self: self._live())
    @rule(r=st.integers(0, 2), kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3), n=st.integers(1, 6))
    def log(self, r, kinds, n):
        run = self._pick(r)
        for i in range(n):
            self.step += 1
            s = self.step
            log_record(run, kinds[i % len(kinds)], s, self.root.parent / f"{self.root.name}-{s}.bin")
        run.flush()

    @precondition(lambda self: self._live())
    @rule(r=st.integers(0, 2), value=st.integers(0, 9))
    def set_config_and_summary(self, r, value):
        run = self._pick(r)
        run.config["extra"] = value
        run.summary["best"] = float(value)
        run.flush()

    @precondition(lambda self: self._live())
    @rule(r=st.integers(0, 2))
    def finish(self, r):
        self._pick(r).finish(compact=False)

    @rule()
    def lose_cursors(self):
        from trackstore.store.layout import SYNC_DIR

        shutil.rmtree(self.root / SYNC_DIR, ignore_errors=True)

    @precondition(lambda self: self.runs)
    @rule(fault=st.sampled_from([None, "fail_after", "abort_after"]), clean=st.integers(0, 3),
          everything=st.booleans())
    def sync(self, fault, clean, everything):
        opts = dict(include_synced=everything)
        infos = select_runs(self.root, SyncOptions())
        dry = self._engine(dry_run=True, **opts)
        unchanged = dry.unchanged(infos)
        plans = {r.run_id: r.plan for r in dry.sync(infos).runs}
        full = self._engine(dry_run=True, include_synced=False)
        for info in infos:  # the no-change shortcut makes the very plan made without it
            if (info.project, info.run_id) in unchanged and not everything:
                assert plans[info.run_id] == full.dry_run_one(info).plan, (plans[info.run_id], info)
        self.events.clear()
        self.target.faults = [None] * clean + ([fault] if fault else [])
        aborted = False
        try:
            report = self._engine(**opts).sync(select_runs(self.root, SyncOptions()))
        except Abort:
            aborted, report = True, None
        self.target.faults = []
        results = {r.run_id: r for r in report.runs} if report else {}
        for run_id, plan in plans.items():
            events = self.events.get(run_id, [])
            res = results.get(run_id)
            if plan.up_to_date:
                assert events == [], (plan, events)
                assert res is None or (res.up_to_date and not res.sent), res
                continue
            if res is None or not res.ok:  # killed or given up: what happened is a prefix of the plan
                assert not events or events[0][0] == "open", events
                if res is not None:
                    for k, n in res.sent.items():
                        assert n <= plan.to_send.get(k, 0), (k, plan, res)
                if aborted:
                    break  # the runs after the killed one were never looked at
                continue
            assert res.plan == plan, (plan, res.plan)
            [(_, opened)] = [e for e in events if e[0] == "open"]
            [(_, knew)] = [e for e in events if e[0] == "knew remote"]
            assert plan.remote == (OPEN if knew else FIND_OR_CREATE), (plan, events)
            if plan.remote == OPEN:
                assert opened == "found", (plan, events)
            else:  # found by its marker (a lost cursor) or created; never "replaced"
                assert opened in ("found", "created"), (plan, events)
            assert plan.metadata == (("metadata", None) in events), (plan, events)
            statuses = [v for w, v in events if w == "status"]
            assert statuses == ([plan.status] if plan.status else []), (plan, events)
            handed = sum(res.sent.values()) + res.reconciled
            assert handed == sum(plan.to_send.values()), (plan, res.sent, res.reconciled)
            if not res.reconciled:
                assert {k: n for k, n in res.sent.items() if n} == {k: n for k, n in plan.to_send.items() if n}
            remote = next(r for r in self.target.runs.values() if r.marker == ("p", run_id))
            info = next(i for i in infos if i.run_id == run_id)
            assert remote.meta["config"] == info.meta.get("config"), (remote.meta, info.meta.get("config"))
            if plan.status:
                assert remote.status == plan.status
        for kind in KINDS:
            assert not [i for i, n in self.target.rows(kind).items() if n > 1], kind
        if report is not None and not fault:  # a sync without faults leaves every run at the target
            at_target = {r.marker for r in self.target.runs.values()}
            assert {("p", info.run_id) for info in infos} <= at_target, (infos, at_target)

    def teardown(self):
        freshness.RACY_S = self._racy
        try:
            for run in self._live():
                run.finish(compact=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            for f in self.root.parent.glob(f"{self.root.name}-*.bin"):
                f.unlink(missing_ok=True)

    def _live(self):
        return [r for r in self.runs if not r.finished]

    def _pick(self, r):
        live = self._live()
        return live[r % len(live)]

    def _engine(self, **opts) -> Engine:
        adapter = self.adapter(TargetOptions(store_root=str(self.root)), self.target, self.events)
        return Engine(self.root, adapter, SyncOptions(max_retries=1, backoff_base=0.0, seed=0, **opts))


class StepPlanModel(PlanModel):
    """The same against a target taking one row per step: a live run's newest step is held back."""

    adapter = StepRecorder


for _model, _n in ((PlanModel, EXAMPLES), (StepPlanModel, max(1, EXAMPLES // 2))):
    _model.TestCase.settings = settings(max_examples=_n, stateful_step_count=15, deadline=None, database=None,
                                        suppress_health_check=list(HealthCheck))
TestPlanModel = PlanModel.TestCase
TestStepPlanModel = StepPlanModel.TestCase
