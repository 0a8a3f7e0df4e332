"""The record sink: what the record kinds use of a run (:mod:`trackstore.records.sink`).

A real :class:`trackstore.Run` is the sink: its finish callbacks run in order before it closes
(still taking rows), its record state is per run, and the record kinds never import the write
path (checked on the source, with ``ast``; nothing is imported to check it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.records.sink import RecordSink
from trackstore.records.trace import checkpoint_open_spans
from trackstore.store.clock import ts_now

RECORDS = Path(trackstore.__file__).parent / "records"


def test_a_run_is_a_record_sink(root):
    run = trackstore.init("p", root=root, flush_interval=0.25)
    assert isinstance(run, RecordSink)
    assert (run.id, run.project, run.paths.run_id, run.step) == (run.run_id, "p", run.id, 0)
    assert run.flush_interval == 0.25 and run.paths.writer_file(run.writer_id).exists()
    run.finish()


def test_finish_callbacks_run_in_order_before_the_run_closes(root, capsys):
    run = trackstore.init("p", root=root)
    seen = []

    def first():
        seen.append(("first", run.finished))
        run.append("samples", {"input": "late", "output": "kept", "score": None, "extra": None,
                               "json_fields": None, "sample_index": 0, "step": 0, "split": "val", "ts": ts_now()})

    def broken():
        seen.append(("broken", run.finished))
        raise RuntimeError("callback trouble")

    run.on_finish(first)
    run.on_finish(broken)
    run.on_finish(lambda: seen.append(("last", run.finished)))
    run.finish()
    assert seen == [("first", False), ("broken", False), ("last", False)]
    assert "callback trouble" in capsys.readouterr().err  # reported; finishing went on
    assert pq.read_table(run.paths.kind_dir("samples")).column("output").to_pylist() == ["kept"]
    run.on_finish(lambda: seen.append(("after", True)))  # never called: the run is finished
    run.finish()
    assert len(seen) == 3
    with pytest.raises(trackstore.UsageError):
        run.append("samples", {})


def test_record_state_is_per_run_and_made_once(root):
    a = trackstore.init("p", root=root)
    b = trackstore.init("p", root=root)
    made = []

    def factory():
        made.append(1)
        return {}

    assert a.record_state("k", factory) is a.record_state("k", factory)
    assert a.record_state("k", factory) is not b.record_state("k", factory)
    assert len(made) == 2
    a.log_samples([("q", "a")], step=3)
    b.log_samples([("q", "a")], step=3)  # counters are per run: both start at 0
    a.log_samples([("q", "a")], step=3)
    a.finish()
    b.finish()
    assert sorted(pq.read_table(a.paths.kind_dir("samples")).column("sample_index").to_pylist()) == [0, 1]
    assert pq.read_table(b.paths.kind_dir("samples")).column("sample_index").to_pylist() == [0]


def test_open_spans_are_kept_through_the_finish_callback(root):
    run = trackstore.init("p", root=root, flush_interval=3600)  # no background checkpoint
    tr = run.trace(step=1).__enter__()
    tr.span("still open", kind="tool").start()
    assert checkpoint_open_spans(trackstore.init("other", root=root)) == 0  # another run holds none of them
    run.finish()
    t = pq.read_table(run.paths.kind_dir("spans")).to_pydict()
    assert sorted(zip(t["name"], t["status"])) == [("episode", "unfinished"), ("still open", "unfinished")]


def _imports(path: Path) -> list[str]:
    """Absolute names of every import in a records module, also those under TYPE_CHECKING."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ["trackstore", "records"][: 3 - node.level]
                out.append(".".join([*base, *([node.module] if node.module else [])]))
            else:
                out.append(node.module or "")
            out += [f"{out[-1]}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("path", sorted(RECORDS.glob("*.py")), ids=lambda p: p.name)
def test_records_never_import_the_write_path(path):
    bad = [m for m in _imports(path) if m == "trackstore.write" or m.startswith("trackstore.write.")
           or m.endswith(".write") or ".write." in m or m == "trackstore.Run"]
    assert bad == [], f"{path.name} imports {bad}"
