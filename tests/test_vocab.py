"""The store's vocabularies (trackstore.store.vocab) are the ones every layer uses: each kind has
a schema and a folder, sync replays every kind, the writer ends runs with each terminal status,
and gc's keep reasons are codes with their sentences, which logic and the CLI branch on."""

from __future__ import annotations

import json
import string

import pytest

import trackstore
from tests.fixtures.stores import make_run, mark_synced
from tests.helpers import run_cli
from trackstore.errors import UsageError
from trackstore.read import part_scan
from trackstore.read.listing import list_runs
from trackstore.store import layout, meta, schema
from trackstore.store.layout import RunPaths
from trackstore.store.meta import read_run_json
from trackstore.store.vocab import (
    ENDED_ORDER,
    KINDS,
    REPLAY_ORDER,
    RUN_STATUSES,
    TERMINAL,
    KeepReason,
    Kind,
    RunStatus,
)
from trackstore.sync import engine
from trackstore.sync.registry import get_adapter_class
from trackstore.sync.testing import MemoryAdapter
from trackstore.upkeep import gc as G

DAY = 86400


# ---------------------------------------------------------------------------- kinds
def test_every_kind_has_a_schema_a_folder_and_a_glob(tmp_path):
    assert KINDS == tuple(Kind) and len(set(KINDS)) == 6
    assert layout.KINDS == KINDS and schema.KINDS == KINDS  # the old names answer the same
    assert tuple(schema.SCHEMAS) == KINDS and set(schema.ROWS) == set(KINDS) == set(schema.ENCODINGS)
    paths = RunPaths(tmp_path, "p", "r")
    for kind in KINDS:
        assert {"writer", "seq"} <= set(schema.SCHEMAS[kind].names)
        folder = paths.kind_dir(kind)
        assert folder.parent in (paths.dir, paths.dir / layout.ARTIFACTS_DIR)
        assert part_scan.KIND_GLOB[kind].startswith(folder.relative_to(paths.dir).as_posix() + "/")


def test_replay_order_is_a_permutation_of_kinds_and_the_engine_uses_it():
    assert sorted(REPLAY_ORDER) == sorted(KINDS) and len(REPLAY_ORDER) == len(KINDS)
    assert REPLAY_ORDER[0] == Kind.METRICS  # metrics first, as the engine always replayed them
    assert engine.REPLAY_ORDER is REPLAY_ORDER
    for name in ("mlflow", "wandb", "swanlab"):  # each holds every kind, offered in the replay order
        assert get_adapter_class(name).CAPABILITIES.kinds == REPLAY_ORDER, name
    assert MemoryAdapter.CAPABILITIES.kinds == REPLAY_ORDER


def test_members_read_as_their_words():
    """Stored data, JSON and messages do not change whether code holds a member or a string."""
    for word in (*KINDS, *RUN_STATUSES, *KeepReason):
        value = word.value
        assert word == value and hash(word) == hash(value) and {value: 1}[word] == 1
        assert str(word) == value and f"{word}" == value and f"{word!r}" == repr(value)
        assert json.dumps({word: [word]}) == json.dumps({value: [value]})
        assert word.encode() == value.encode()


# ---------------------------------------------------------------------------- statuses
def test_statuses_and_terminal():
    assert meta.STATUSES == RUN_STATUSES == tuple(RunStatus)
    assert TERMINAL == {"finished", "failed", "crashed"} and RunStatus.RUNNING not in TERMINAL
    assert ENDED_ORDER == ("finished", "failed", "crashed")  # the order messages list them in


@pytest.mark.parametrize("status", ENDED_ORDER)
def test_the_writer_ends_a_run_with_every_terminal_status(root, status):
    run = trackstore.init("p", root=root)
    run.log({"x": 1.0}, step=0)
    run.finish(status=status, compact=False)
    assert read_run_json(run.paths)["status"] == status
    (info,) = list_runs(root)
    assert info.status == status and info.status in TERMINAL


def test_a_status_outside_the_vocabulary_is_refused(root):
    run = trackstore.init("p", root=root)
    with pytest.raises(UsageError, match="finished, failed, crashed"):
        run.finish(status="done")
    run.finish()


# ---------------------------------------------------------------------------- gc keep reasons
def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@pytest.mark.parametrize("code", list(KeepReason))
def test_every_keep_reason_has_a_text_and_a_summary(code):
    assert code.text and code.summary
    assert _fields(code.summary) <= _fields(code.text)  # the summary names nothing the text lacks
    details = {name: "0" for name in _fields(code.text)}
    if "days" in details:
        details["days"] = 1.25
    said = code.say(**details)
    assert said and "{" not in said and "}" not in said  # every field filled
    assert len(set(KeepReason)) == len({c.text for c in KeepReason})  # no two codes read alike


def test_summaries_are_what_gc_counted_by_before_the_codes():
    """``gc`` counted kept runs by the sentence up to its first " (" or ": "; the summaries
    keep that output (``ended ...`` was counted as "newer than --older-than")."""
    details = {"status": "failed", "days": 2.5, "keep_last": 3, "lock": "sync-mlflow pid 7", "why": "a writer is live",
               "files": "project=p/run=r/metrics/part-w-0.parquet", "fix": "trackstore doctor --fix",
               "targets": "wandb", "staged": "", "target": "mlflow", "destination": "http://127.0.0.1:5000",
               "behind": "3 metrics rows pending", "minutes": 12, "what": "model-r:v3 (best)"}
    for code in KeepReason:
        text = code.say(**details)
        old = "newer than --older-than" if text.startswith("ended ") else text.split(" (")[0].split(": ")[0]
        assert code.summary.format(**details) == old, code


def test_compactable_branches_on_the_code_not_the_sentence(root):
    ended = make_run(root, ended_days_ago=40)
    plan = G.plan(root, G.Policy(older_than_s=0))  # unsynced: kept, and compactable
    (c,) = plan.keep
    assert c.kept(KeepReason.NEVER_SYNCED) and G.compactable(plan, G.Policy(older_than_s=0)) == [ended]
    c.keep(G.Verdict(KeepReason.LIVE))
    c.reason = "never synced"  # the sentence says nothing: the code decides
    assert G.compactable(plan, G.Policy(older_than_s=0)) == []
    c.keep(G.Verdict(KeepReason.NEVER_SYNCED))
    c.reason = "live: a writer is running"
    assert G.compactable(plan, G.Policy(older_than_s=0)) == [ended]


def test_other_project_is_kept_by_code_and_left_out_by_the_cli(root):
    mine = make_run(root, "a", ended_days_ago=40)
    mark_synced(root, mine)
    other = make_run(root, "b", ended_days_ago=40)
    mark_synced(root, other)
    plan = G.plan(root, G.Policy(older_than_s=30 * DAY, project="a"))
    assert [c.run_id for c in plan.delete] == [mine.run_id]
    (kept,) = plan.keep
    assert kept.run_id == other.run_id and kept.kept(KeepReason.OTHER_PROJECT)
    assert kept.reason == KeepReason.OTHER_PROJECT.text == "other project"
    out = run_cli("gc", "--older-than", "30d", "--project", "a", "--dry-run", "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    assert [r["run_id"] for r in json.loads(out.stdout)] == [mine.run_id]
    assert "other project" not in out.stderr
    table = run_cli("gc", "--older-than", "30d", "--project", "a", "--dry-run", "--show-kept", root=root)
    assert table.returncode == 0, table.stderr
    assert other.run_id not in table.stdout and "other project" not in table.stdout


def test_kept_runs_are_counted_by_summary(root):
    make_run(root, ended_days_ago=40)
    make_run(root, ended_days_ago=40)
    make_run(root, ended_days_ago=1)
    plan = G.plan(root, G.Policy(older_than_s=30 * DAY))
    assert G.describe_kept(plan.keep) == {"never synced": 2, "newer than --older-than": 1}
    assert {c.kept_for.code for c in plan.keep if c.kept_for} == {KeepReason.NEVER_SYNCED, KeepReason.NEWER}
