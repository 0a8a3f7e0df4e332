"""tests/README.md maps every file under tests/ to the layer it tests: a new test file must be
placed on the map, and the map names no file that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MAP = TESTS / "README.md"


def _mapped() -> list[str]:
    """The file names in the first column of the map's tables, as paths relative to tests/."""
    return re.findall(r"^\| `([^`]+\.py)` \|", MAP.read_text(), flags=re.M)


def _python_files() -> set[str]:
    """Every Python file under tests/ except the regenerated fixture store's contents."""
    return {p.relative_to(TESTS).as_posix() for p in TESTS.rglob("*.py")
            if "__pycache__" not in p.parts and "damaged_store" not in p.parts}


def test_every_test_file_is_on_the_map():
    tests = {name for name in _python_files() if Path(name).name.startswith("test_")}
    missing = sorted(tests - set(_mapped()))
    assert not missing, f"add these to tests/README.md, under the layer they test: {missing}"


def test_every_support_file_is_on_the_map():
    missing = sorted(_python_files() - set(_mapped()))
    assert not missing, f"add these to the support files of tests/README.md: {missing}"


def test_the_map_names_only_files_that_exist_and_each_once():
    mapped = _mapped()
    assert len(mapped) > 50, "no files found on the map: the pattern is broken"
    assert len(mapped) == len(set(mapped)), sorted({m for m in mapped if mapped.count(m) > 1})
    gone = sorted(m for m in mapped if not (TESTS / m).is_file())
    assert not gone, f"tests/README.md names files that do not exist: {gone}"
