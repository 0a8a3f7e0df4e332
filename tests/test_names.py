"""Bad names, keys and values fail early, with a clear message, before anything is written;
unicode names (Chinese included) round-trip through run.json, listings and the CLI."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest

import trackstore
from tests.helpers import run_cli
from trackstore.read.listing import list_runs

BAD_PROJECTS = [
    ("", "must not be empty"),
    (" padded", "whitespace"),
    ("padded ", "whitespace"),
    (".hidden", "must not start with '.'"),
    ("..", "must not start with '.'"),
    ("a/b", "'/'"),
    ("a\\b", "'\\\\'"),
    ("a=b", "'='"),
    ("a%2Fb", "'%'"),
    ("a\nb", "U+000A"),
    ("a\x00b", "U+0000"),
    ("a\x85b", "U+0085"),
    ("safe\u202eexe.txt", "U+202E"),
    ("bad\udc80name", "not valid Unicode"),  # a lone surrogate, as from a mis-decoded file name
    ("x" * 129, "too long: 129 characters, 129 bytes in UTF-8; the limit is 128 characters"),
    ("实验" * 35, "too long: 70 characters, 210 bytes in UTF-8; the limit is 200 bytes"),
    (123, "must be a string"),
    (None, "must be a string"),
]


@pytest.mark.parametrize("name,why", BAD_PROJECTS, ids=[repr(n)[:20] for n, _ in BAD_PROJECTS])
def test_bad_project_names_fail_before_anything_is_written(root, name, why):
    with pytest.raises(trackstore.InvalidNameError) as exc:
        trackstore.init(name, root=root)
    assert isinstance(exc.value, ValueError)
    assert why in str(exc.value) and "project name" in str(exc.value)
    assert list(root.iterdir()) == []
    assert trackstore.current_run() is None


BAD_RUN_IDS = ["", "-starts-with-dash", ".hidden", "a/b", "has space", "中文", "x" * 65, "a=b"]


@pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=[repr(r)[:20] for r in BAD_RUN_IDS])
def test_bad_run_ids_fail_before_anything_is_written(root, run_id):
    with pytest.raises(trackstore.InvalidNameError, match="run id"):
        trackstore.init("p", root=root, run_id=run_id, resume=True)
    assert list(root.iterdir()) == []


def test_length_messages_say_which_limit_and_give_both_counts(root, tmp_path):
    """A 128-character Chinese name is within the character limit: the byte limit refuses it."""
    with pytest.raises(trackstore.InvalidNameError) as exc:
        trackstore.init("模" * 128, root=root)
    msg = str(exc.value)
    assert "project name" in msg and "128 characters, 384 bytes in UTF-8; the limit is 200 bytes" in msg
    assert "limit is 128 characters" not in msg
    run = trackstore.init("p", root=root)
    f = tmp_path / "w.bin"
    f.write_bytes(b"w")
    with pytest.raises(trackstore.InvalidNameError, match="artifact name .* 67 characters, 201 bytes in UTF-8; "
                                                         "the limit is 200 bytes"):
        run.log_artifact(f, name="模" * 67)
    with pytest.raises(trackstore.InvalidNameError, match="artifact name .* 129 characters, 129 bytes in UTF-8; "
                                                         "the limit is 128 characters"):
        run.log_artifact(f, name="a" * 129)
    run.log_artifact(f, name="模" * 66)  # 198 bytes: accepted
    run.finish()
    with pytest.raises(trackstore.InvalidNameError, match="run id .* 65 characters; the limit is 64 characters"):
        trackstore.init("p", root=root, run_id="r" * 65)


def test_bad_arguments_to_init_fail_before_anything_is_written(root):
    with pytest.raises(trackstore.InvalidNameError, match="must be a string"):
        trackstore.init("p", root=root, run_id=7)
    with pytest.raises(trackstore.InvalidValueError, match="run name must be a string"):
        trackstore.init("p", name=3, root=root)
    with pytest.raises(trackstore.InvalidValueError, match="tags"):
        trackstore.init("p", tags=["ok", ""], root=root)
    with pytest.raises(trackstore.InvalidValueError, match="flush_interval"):
        trackstore.init("p", root=root, flush_interval=0)
    assert list(root.iterdir()) == []


class FakeTensor:
    """What a 0-d torch tensor looks like to trackstore (duck typing; torch is never imported)."""

    def __init__(self, *values):
        self.values = values

    def numel(self):
        return len(self.values)

    def item(self):
        if len(self.values) != 1:
            raise RuntimeError("a Tensor with more than one element cannot be converted to Scalar")
        return self.values[0]


BAD_KEYS = [
    ({"": 1.0}, "must not be empty"),
    ({"a\nb": 1.0}, "control character (U+000A)"),
    ({"a\u2028b": 1.0}, "U+2028"),
    ({"k" * 1001: 1.0}, "too long: 1001 characters; the limit is 1000 characters"),
    ({1: 1.0}, "must be a string"),
    ({"a": {2: 1.0}}, "must be a string"),
    ({"a": {"b": 1.0}, "a/b": 2.0}, "given twice"),
    ({"k\ud800": 1.0}, "not valid Unicode"),
]
BAD_VALUES = [
    ({"x": "0.5"}, "is a string"),
    ({"x": [1.0, 2.0]}, "type list"),
    ({"x": 1 + 2j}, "type complex"),
    ({"x": b"1"}, "type bytes"),
    ({"x": object()}, "type object"),
    ({"x": np.array([1.0, 2.0])}, "has 2 elements"),
    ({"x": FakeTensor(1.0, 2.0)}, "has 2 elements"),
    ({"x": np.array(["a"])}, "holding str"),
]


@pytest.mark.parametrize("data,why", BAD_KEYS + BAD_VALUES, ids=[repr(d)[:24] for d, _ in BAD_KEYS + BAD_VALUES])
def test_bad_keys_and_values_fail_at_the_call_and_buffer_nothing(root, data, why):
    run = trackstore.init("p", root=root)
    run.log({"good": 1.0})
    with pytest.raises(trackstore.InvalidValueError) as exc:
        run.log({"also_good": 2.0, **data}, step=7)
    assert isinstance(exc.value, ValueError) and why in str(exc.value)
    assert run.step == 1  # the failed call did not advance the step either
    run.log({"good": 3.0})
    run.finish()
    rows = pq.read_table(run.dir / "metrics").to_pylist()
    assert [(r["step"], r["key"], r["value"]) for r in rows] == [(0, "good", 1.0), (1, "good", 3.0)]


@pytest.mark.parametrize("step", ["3", 1.5, True, [1]])
def test_bad_steps_fail_early(root, step):
    run = trackstore.init("p", root=root)
    with pytest.raises(trackstore.InvalidValueError, match="step must be an integer"):
        run.log({"x": 1.0}, step=step)


def test_accepted_values(root):
    run = trackstore.init("p", root=root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.log({"np64": np.float64(0.5), "np32": np.float32(0.25), "npint": np.int64(7), "npbool": np.bool_(True),
                 "zero_d": np.array(3.0), "tensor": FakeTensor(1.5), "bool": False, "int": 2,
                 "huge": 2**70, "nan": math.nan, "ninf": -math.inf, "none": None,
                 "nested": {"deeper": {"x": 1.0}}}, step=np.int64(4))
        run.log({"none": None, "np64": np.float64(1.5)}, step=5.0)
    nones = [w for w in caught if "'none' is None" in str(w.message)]
    assert len(nones) == 1  # warned once per key, not per call
    run.finish()
    got = {(r["step"], r["key"]): r["value"] for r in pq.read_table(run.dir / "metrics").to_pylist()}
    assert got[(4, "np64")] == 0.5 and got[(4, "np32")] == 0.25 and got[(4, "npint")] == 7.0
    assert got[(4, "npbool")] == 1.0 and got[(4, "zero_d")] == 3.0 and got[(4, "tensor")] == 1.5
    assert got[(4, "bool")] == 0.0 and got[(4, "int")] == 2.0 and got[(4, "huge")] == float(2**70)
    assert math.isnan(got[(4, "nan")]) and got[(4, "ninf")] == -math.inf
    assert got[(4, "nested/deeper/x")] == 1.0 and got[(5, "np64")] == 1.5
    assert not any(k == "none" for _s, k in got)


def test_caller_may_reuse_its_dict(root):
    run = trackstore.init("p", root=root)
    d = {"x": 1.0}
    run.log(d)
    d["x"] = 2.0  # a training loop that refills one dict each step
    run.log(d)
    run.finish()
    assert [r["value"] for r in pq.read_table(run.dir / "metrics").to_pylist()] == [1.0, 2.0]


UNICODE_PROJECTS = ["强化学习-实验", "Ünïcödé café", "実験 🚀 v2", "x" * 128, "模" * 66]


@pytest.mark.parametrize("project", UNICODE_PROJECTS)
def test_unicode_names_round_trip(root, project):
    run = trackstore.init(project, name="第一次运行", config={"模型": "千问", "lr": 1e-6}, tags=["中文", "grpo"],
                          notes="备注", root=root)
    run.log({"奖励/平均": 0.5, "actor/熵": 1.25})
    run.finish()
    assert run.dir.parent.name == f"project={project}"
    meta = json.loads(run.paths.run_file.read_text(encoding="utf-8"))
    assert (meta["project"], meta["name"], meta["tags"], meta["notes"]) == (project, "第一次运行", ["中文", "grpo"], "备注")
    assert meta["config"]["模型"] == "千问" and meta["summary"]["奖励/平均"] == 0.5
    [info] = list_runs(root)
    assert (info.project, info.name, info.status) == (project, "第一次运行", "finished")
    assert [i.run_id for i in list_runs(root, project=project)] == [run.id]
    keys = sorted(r["key"] for r in pq.read_table(run.dir / "metrics").to_pylist())
    assert keys == ["actor/熵", "奖励/平均"]

    out = run_cli("runs", "--format", "json", root=root)
    assert out.returncode == 0, out.stderr
    [row] = json.loads(out.stdout)
    assert (row["project"], row["name"], row["tags"]) == (project, "第一次运行", ["中文", "grpo"])
    out = run_cli("runs", "--project", project, "--format", "csv", root=root)
    assert project in out.stdout and "第一次运行" in out.stdout
    out = run_cli("show", run.id, "--format", "json", root=root)
    assert json.loads(out.stdout)[0]["config"]["模型"] == "千问"
