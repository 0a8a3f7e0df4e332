"""The team store as a state machine (Hypothesis, stateful): whatever the source store and the
link do, a replica never holds a row twice nor a row the source does not have, and a clean sync
makes it exact, whether a run's parts go one after the other or at once (the target's
``concurrent_sends``, on threads: then a fault meets whichever write comes first).

Random histories of runs logging every kind, finishing, resuming and compacting, and of syncs
to a replica on a path (the real ``store`` target and engine) that meet faults in the replica's
folder: a write that lands and whose answer is lost (a cut after delivery), a write refused
before it lands (a cut before), a sync killed right after a write landed, and a lost ledger.
After every step the replica's parts are read the way a plain reader would (every
``*.parquet`` of its run folders).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import trackstore
from tests.helpers import log_record
from trackstore.errors import RetryableError
from trackstore.store import objects
from trackstore.sync.adapter import TargetOptions
from trackstore.sync.engine import Engine, SyncOptions, select_runs
from trackstore.sync.replica import ReplicaAdapter

# 6 histories of 12 steps (about 25 s alone): the suite must stay within CI's 15 minutes; set
# TRACKSTORE_MODEL_EXAMPLES to look further (a reconcile that forgot what the replica holds fails
# within the first few)
EXAMPLES = int(os.environ.get("TRACKSTORE_MODEL_EXAMPLES", "6"))
KINDS = ("metrics", "samples", "spans", "histograms", "artifacts")
pytestmark = pytest.mark.filterwarnings("ignore")


class Killed(BaseException):
    """The sync process dies here (not an Exception: nothing in the engine catches it)."""


class FaultyFolder(objects.PathFolder):
    """A real folder whose ``put_new`` meets the fault planned for its n-th call."""

    def __init__(self, path: Path, faults: list):
        super().__init__(path)
        self.faults = faults

    def put_new(self, key: str, data: bytes) -> bool:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "cut_before":
            raise RetryableError("connection reset before the request arrived")
        written = super().put_new(key, data)
        if fault == "cut_after":
            raise RetryableError("connection reset after the request arrived")
        if fault == "killed_after":
            raise Killed()
        return written


class ReplicaModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="ts-replica-"))
        self.root, self.replica = self.base / "store", self.base / "team"
        self.runs: list = []
        self.step = 0
        self.faults: list = []
        self.sends = ThreadPoolExecutor(4)

    @precondition(lambda self: len(self.runs) < 3)
    @rule()
    def start(self):
        run = trackstore.init("p", name=f"r{len(self.runs)}", root=self.root, flush_interval=3600)
        run.flush()
        self.runs.append(run)

    @precondition(lambda self: self._live())
    @rule(r=st.integers(0, 2), kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=3), n=st.integers(1, 5))
    def log(self, r, kinds, n):
        run = self._pick(r)
        for i in range(n):
            self.step += 1
            s = self.step
            log_record(run, kinds[i % len(kinds)], s, self.base / f"a{s}.bin")
        run.flush()

    @precondition(lambda self: self._live())
    @rule(r=st.integers(0, 2))
    def finish(self, r):
        self._pick(r).finish(compact=False)

    @precondition(lambda self: [r for r in self.runs if r.finished] and len(self._live()) < 3)
    @rule(r=st.integers(0, 2))
    def resume(self, r):
        ended = [x for x in self.runs if x.finished]
        old = ended[r % len(ended)]
        run = trackstore.init("p", run_id=old.run_id, resume=True, root=self.root, flush_interval=3600)
        self.runs[self.runs.index(old)] = run

    @rule()
    def compact(self):
        from trackstore.store.layout import iter_run_dirs, run_paths
        from trackstore.upkeep.compact import compact

        if self.root.exists():
            compact(self.root, [run_paths(self.root, p, r) for p, r, _ in iter_run_dirs(self.root)])

    @rule()
    def lose_the_ledger(self):
        shutil.rmtree(self.root / "_sync", ignore_errors=True)

    @precondition(lambda self: self.runs)
    @rule(fault=st.sampled_from([None, "cut_before", "cut_after", "killed_after"]), clean=st.integers(0, 1),
          at_once=st.booleans())
    def sync(self, fault, clean, at_once):
        self.faults[:] = [None] * clean + ([fault] if fault else [])
        try:
            self._engine(at_once).sync(select_runs(self.root, SyncOptions()))
        except Killed:
            pass
        self.faults[:] = []

    @invariant()
    def never_a_row_twice_nor_one_the_source_lacks(self):
        for kind in KINDS:
            held = self._replica_ids(kind)
            assert not [i for i, n in held.items() if n > 1], f"{kind}: a row twice in the replica"
            assert set(held) <= self._source_ids(kind), f"{kind}: a row the source does not have"

    def teardown(self):
        try:
            for run in self._live():
                run.finish(compact=False)
            if self.runs:  # a clean sync makes the replica exact
                self._engine().sync(select_runs(self.root, SyncOptions()))
                for kind in KINDS:
                    assert set(self._replica_ids(kind)) == self._source_ids(kind), kind
        finally:
            self.sends.shutdown()
            shutil.rmtree(self.base, ignore_errors=True)

    def _live(self):
        return [r for r in self.runs if not r.finished]

    def _pick(self, r):
        live = self._live()
        return live[r % len(live)]

    def _engine(self, at_once: bool = False) -> Engine:
        adapter = ReplicaAdapter(TargetOptions(uri=str(self.replica), store_root=str(self.root)))
        adapter.folder = FaultyFolder(self.replica, self.faults)
        return Engine(self.root, adapter, SyncOptions(max_retries=2, backoff_base=0.0, seed=0),
                      sends=self.sends if at_once else None)

    def _replica_ids(self, kind: str) -> Counter:
        import pyarrow.parquet as pq

        folder = "artifacts/_manifest" if kind == "artifacts" else kind
        ids: Counter = Counter()
        for part in self.replica.glob(f"project=*/run=*/{folder}/*.parquet"):
            t = pq.read_table(part, columns=["writer", "seq"])
            ids.update(zip(t.column("writer").to_pylist(), t.column("seq").to_pylist()))
        return ids

    def _source_ids(self, kind: str) -> set:
        if not self.root.exists():
            return set()
        t = trackstore.query(f"SELECT writer, seq FROM {kind}", root=self.root)
        return set(zip(t.column("writer").to_pylist(), t.column("seq").to_pylist()))


ReplicaModel.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=12, deadline=None,
                                          database=None, suppress_health_check=list(HealthCheck))
TestReplicaModel = ReplicaModel.TestCase


class LiveRun:
    """A live run beside a replica on a path: it logs metrics and samples (a flush every third
    step, so its parts go as rows, one part per kind and pass), and syncs through a
    :class:`FaultyFolder` meeting ``faults``."""

    def __init__(self, tmp_path: Path, batch: int | None = None):
        self.tmp, self.batch = tmp_path, batch
        self.root, self.replica = tmp_path / "store", tmp_path / "team"
        self.run = trackstore.init("p", name="live", root=self.root, flush_interval=3600)
        self.faults: list = []

    def log(self, steps: range) -> None:
        for step in steps:
            log_record(self.run, "metrics", step, self.tmp / "a.bin")
            log_record(self.run, "samples", step, self.tmp / "a.bin")
            if step % 3 == 2:
                self.run.flush()

    def sync(self):
        adapter = ReplicaAdapter(TargetOptions(uri=str(self.replica), store_root=str(self.root)))
        adapter.folder = FaultyFolder(self.replica, self.faults)
        opts = SyncOptions(max_retries=2, backoff_base=0.0, seed=0, batch_size=self.batch)
        return Engine(self.root, adapter, opts).sync(select_runs(self.root, SyncOptions()))

    def parts(self) -> set[Path]:
        return set(self.replica.glob("project=p/run=*/*/*.parquet"))

    def finish_and_sync_exactly(self, landed: Path, steps: int) -> None:
        """Finish the run and sync: the part that landed before is reconciled, not sent again,
        and the replica then holds every row of the source once (2 metrics and 1 samples rows
        a step), all of them acknowledged."""
        import pyarrow.parquet as pq

        from trackstore.store.ledger import iter_cursors

        self.run.finish(compact=False)
        report = self.sync()
        assert report.ok, [r.error for r in report.runs]
        assert report.runs[0].reconciled == pq.ParquetFile(landed).metadata.num_rows  # not sent again
        model = ReplicaModel.__new__(ReplicaModel)
        model.root, model.replica = self.root, self.replica
        for kind in ("metrics", "samples"):
            held = model._replica_ids(kind)
            assert max(held.values()) == 1, f"{kind}: a row twice in the replica"
            assert set(held) == model._source_ids(kind), kind
        (cursor,) = iter_cursors(self.root, target="store")
        assert cursor.in_doubt is None
        assert len(cursor.acked["metrics"]) == 2 * steps and len(cursor.acked["samples"]) == steps


@pytest.mark.parametrize("batch", [None, 5])
def test_killed_after_a_runs_first_part_then_more_rows_then_a_rerun_is_exact(tmp_path, batch):
    """Every row a pass sends of a run is marked in doubt in one durable write before the first
    part (Capabilities.doubt_per_run), and nothing is written between its parts: a sync killed
    after the first part landed leaves that doubt, and the next sync, after the run logged more
    (its pending rows batched otherwise, the part named by another range), reconciles it instead
    of sending those rows again; in the target's batches when the doubt holds more (``batch``)."""
    import pyarrow.parquet as pq

    from trackstore.store.ledger import iter_cursors

    live = LiveRun(tmp_path, batch)
    live.log(range(0, 6))
    assert live.sync().ok  # the replica knows the run: no later pass starts from a lost cursor
    live.log(range(6, 12))
    before = live.parts()
    live.faults[:] = ["killed_after"]  # the pass's first part lands, and the sync dies
    with pytest.raises(Killed):
        live.sync()
    (cursor,) = iter_cursors(live.root, target="store")
    assert cursor.in_doubt["kind"] == "run"
    assert {k: len(v) for k, v in cursor.in_doubt_rows().items()} == {"metrics": 12, "samples": 6}
    (landed,) = live.parts() - before  # one part of pass 2, no more
    live.log(range(12, 15))
    live.finish_and_sync_exactly(landed, steps=15)
    if batch:  # every part went as rows (a writer's several flushes), the doubt's in the target's batches too
        assert max(pq.ParquetFile(p).metadata.num_rows for p in live.parts()) <= batch


def test_a_first_pass_killed_after_its_first_part_saves_nothing_and_a_rerun_is_exact(tmp_path):
    """A run the replica did not hold is not marked in doubt on disk (one durable write a new
    run fewer): a first pass killed after a part landed leaves no cursor at all, and the next
    sync, after the run logged more (the part it sends named by another range), finds the run
    at the replica with a cursor that knows none, and reconciles instead of sending twice."""
    from trackstore.store.ledger import iter_cursors

    live = LiveRun(tmp_path)
    live.log(range(0, 6))
    live.faults[:] = [None, None, "killed_after"]  # the marker, run.json, then the first part lands: the sync dies
    with pytest.raises(Killed):
        live.sync()
    assert list(iter_cursors(live.root, target="store")) == []  # nothing of the pass was saved
    (landed,) = live.parts()
    live.log(range(6, 9))
    live.finish_and_sync_exactly(landed, steps=9)


def test_a_part_refused_among_parts_sent_at_once_leaves_the_others_acknowledged(tmp_path):
    """A run's parts sent at once (``concurrent_sends``): when one is refused, the parts that
    landed are acknowledged in the cursor the run's failure saves, the refused one's rows stay in
    doubt, and the next sync sends exactly what is missing."""
    from trackstore.errors import PermanentError
    from trackstore.store.ledger import iter_cursors

    refuse = [True]

    class RefusingFolder(objects.PathFolder):
        def put_new(self, key: str, data: bytes) -> bool:
            if refuse and "/samples/" in key:
                raise PermanentError("refused")
            return super().put_new(key, data)

    root, replica = tmp_path / "store", tmp_path / "team"
    run = trackstore.init("p", name="r", root=root, flush_interval=3600)
    for step in range(6):
        for kind in ("metrics", "samples", "spans", "histograms"):
            log_record(run, kind, step, tmp_path / "a.bin")
    run.finish(compact=False)
    with ThreadPoolExecutor(4) as sends:
        def sync():
            adapter = ReplicaAdapter(TargetOptions(uri=str(replica), store_root=str(root)))
            adapter.folder = RefusingFolder(replica)
            return Engine(root, adapter, SyncOptions(max_retries=1, backoff_base=0.0, seed=0), sends=sends).sync(
                select_runs(root, SyncOptions()))

        first = sync()
        assert not first.ok and "refused" in first.runs[0].error
        (cursor,) = iter_cursors(root, target="store")
        landed = {p.parent.name for p in replica.glob("project=p/run=*/*/*.parquet")}
        assert "samples" not in landed and landed  # the others went, at once
        assert set(cursor.acked) == landed  # each landed part acknowledged, no other
        assert set(cursor.in_doubt_rows()) == {"samples"} | {"metrics", "spans", "histograms"} - landed
        refuse.clear()
        again = sync()
    assert again.ok, [r.error for r in again.runs]
    model = ReplicaModel.__new__(ReplicaModel)
    model.root, model.replica = root, replica
    for kind in ("metrics", "samples", "spans", "histograms"):
        held = model._replica_ids(kind)
        assert max(held.values()) == 1 and set(held) == model._source_ids(kind), kind
