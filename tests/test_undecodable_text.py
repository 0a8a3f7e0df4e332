"""Text Python decoded from undecodable bytes (lone surrogates) is stored escaped, never fatal.

A script started with a non-UTF-8 argument or from a non-UTF-8 working directory holds such
text in ``sys.argv`` and ``os.getcwd()``; callers pass it in config, tags, notes, samples and
traces. Each is stored escaped as docs/format.md ("Text") says, the run ends ``finished``, and
names that become paths are refused before anything touches the disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import trackstore
from trackstore.errors import InvalidNameError, InvalidValueError
from trackstore.store.text import escape_surrogates, unescape_surrogates

SCRIPT = """
import sys, trackstore
run = trackstore.init("p", root=sys.argv[1], config={"arg": sys.argv[-1]}, tags=["t\\udcff"], notes="n\\udcfe")
run.config["later"] = "a\\ud800b"
run.log({"x": 1})
run.log_samples([{"input": "in\\udcff", "output": "out", "score": 1.0}], step=0)
with run.trace(step=0, note="t\\udcff") as t:
    pass
run.finish()
print(run.dir)
"""


def _run_script(tmp_path: Path, root: Path, *extra: bytes, cwd: bytes | None = None) -> Path:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    argv = [os.fsencode(sys.executable), os.fsencode(script), os.fsencode(root), *extra]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert b"WARNING" not in proc.stderr, proc.stderr.decode(errors="replace")
    return Path(os.fsdecode(proc.stdout.strip()))


def _every_run_folder_has_run_json(root: Path) -> None:
    for run_dir in root.glob("project=*/run=*"):
        assert (run_dir / "run.json").is_file(), f"{run_dir} has no run.json"


def test_non_utf8_argument_is_recorded_escaped(tmp_path, root):
    run_dir = _run_script(tmp_path, root, b"\xff")
    meta = json.loads((run_dir / "run.json").read_bytes().decode("utf-8"))  # valid UTF-8
    assert meta["status"] == "finished"
    assert meta["command"][-1] == "\\udcff"
    assert os.fsencode(unescape_surrogates(meta["command"][-1])) == b"\xff"  # the bytes, back
    assert meta["config"] == {"arg": "\\udcff", "later": "a\\ud800b"}
    assert meta["tags"] == ["t\\udcff"] and meta["notes"] == "n\\udcfe"
    samples = pq.read_table(next((run_dir / "samples").glob("*.parquet")))
    assert samples.column("input").to_pylist() == ["in\\udcff"]
    spans = pq.read_table(next((run_dir / "spans").glob("*.parquet")))
    assert json.loads(spans.column("attributes")[0].as_py()) == {"note": "t\\udcff"}
    _every_run_folder_has_run_json(root)


def test_non_utf8_working_directory_is_recorded_escaped(tmp_path, root):
    cwd = os.fsencode(tmp_path) + b"/\xff"
    os.mkdir(cwd)
    run_dir = _run_script(tmp_path, root, cwd=cwd)
    meta = json.loads((run_dir / "run.json").read_bytes().decode("utf-8"))
    assert meta["status"] == "finished"
    assert os.fsencode(unescape_surrogates(meta["cwd"])) == cwd
    _every_run_folder_has_run_json(root)


def test_config_with_lone_surrogate_keeps_the_run_writable(root):
    run = trackstore.init("p", root=root)
    run.config["k"] = "\ud800"
    run.summary["s"] = "x\udcff"
    assert run.config["k"] == "\\ud800"  # what run.json holds
    assert run.flush()
    run.finish()
    meta = json.loads((run.dir / "run.json").read_bytes())
    assert meta["status"] == "finished"
    assert meta["config"]["k"] == "\\ud800" and meta["summary"]["s"] == "x\\udcff"


def test_names_that_become_paths_are_refused_before_the_disk(root, tmp_path):
    with pytest.raises(InvalidNameError, match="not valid Unicode"):
        trackstore.init("p\udcff", root=root)
    assert not any(root.iterdir())
    run = trackstore.init("p", root=root)
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidNameError, match="not valid Unicode"):
        run.log_artifact(tmp_path / "f", name="a\udcff")
    with pytest.raises(InvalidValueError, match="not valid Unicode"):
        run.log({"k\udcff": 1.0})
    run.finish()
    assert json.loads((run.dir / "run.json").read_bytes())["status"] == "finished"


def test_escaping_round_trips_and_leaves_valid_text_alone():
    for text in ["plain", "é 中文 🙂", "C:\\udata\\x", "\ud800", "a\udcffb\udc80", "\\\udcff"]:
        stored = escape_surrogates(text)
        stored.encode("utf-8")
        assert escape_surrogates(stored) == stored  # escaping twice changes nothing
        assert unescape_surrogates(stored) == text
    assert escape_surrogates("é 中文 🙂") == "é 中文 🙂"
