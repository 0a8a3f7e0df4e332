"""The public Python surface is exactly what docs/api.md documents, and every name works."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import trackstore

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"


def _documented() -> list[str]:
    text = (DOCS / "api.md").read_text()
    table = text.split("## The names", 1)[1]
    return re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", table, flags=re.M)


def test_all_is_exactly_the_documented_surface():
    documented = _documented()
    assert len(documented) == len(set(documented)), "a name is documented twice"
    assert sorted(trackstore.__all__) == sorted(documented)


def test_every_public_name_resolves():
    for name in trackstore.__all__:
        assert getattr(trackstore, name) is not None, name
    assert callable(trackstore.watch) and callable(trackstore.traced) and callable(trackstore.wide)


def test_docs_import_only_public_names():
    """What the docs teach as ``from trackstore import X`` or ``trackstore.X(...)`` is in __all__."""
    pages = [README, *sorted(DOCS.glob("*.md"))]
    taught: set[str] = set()
    for page in pages:
        text = page.read_text()
        for names in re.findall(r"^\s*from trackstore import ([\w, ]+)$", text, flags=re.M):
            taught.update(n.strip() for n in names.split(","))
        taught.update(re.findall(r"\btrackstore\.([A-Za-z_]\w*)\(", text))
    assert taught, "no imports found: the pattern is broken"
    assert taught <= set(trackstore.__all__), sorted(taught - set(trackstore.__all__))


def test_docs_do_not_teach_inner_modules():
    """Users import from ``trackstore``; inner module paths are for the implementation."""
    inner = re.compile(r"^\s*from trackstore\.(store|write|records|read|upkeep)\b.* import", flags=re.M)
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        if page.name in ("architecture.md", "format.md"):
            continue  # these describe the implementation
        assert not inner.findall(page.read_text()), page.name


def test_lazy_names_stay_lazy():
    code = ("import sys, trackstore\n"
            "from trackstore import traced, configure, unwatch\n"
            "print(sorted(m for m in ('duckdb', 'pyarrow', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_watch_function_survives_the_submodule_import():
    code = ("import trackstore, trackstore.integrations.watch\n"
            "from trackstore import unwatch, watch\n"
            "print(watch is trackstore.watch, callable(trackstore.watch))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_every_error_is_in_the_one_tree_and_keeps_its_old_import_path():
    """The errors of sync adapters, sync gaps and the wandb drop-in live in trackstore.errors,
    keep their bases and exit codes, and are the same classes under their old module paths."""
    from trackstore import errors
    from trackstore.compat import wandb as wandb_dropin
    from trackstore.sync import adapter, gaps

    assert adapter.RetryableError is errors.RetryableError
    assert adapter.PermanentError is errors.PermanentError
    assert gaps.GapError is errors.GapError
    assert wandb_dropin.NotSupportedError is errors.NotSupportedError
    assert issubclass(errors.GapError, errors.StoreError) and errors.GapError.exit_code == errors.EXIT_STORE
    assert issubclass(errors.NotSupportedError, errors.UsageError) and issubclass(errors.NotSupportedError,
                                                                                     NotImplementedError)
    assert errors.NotSupportedError.exit_code == errors.EXIT_USAGE
    for cls in (errors.RetryableError, errors.PermanentError):
        assert cls.__bases__ == (errors.TrackstoreError,) and cls.exit_code == errors.EXIT_ERROR
    drawn = errors.__doc__ or ""
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, errors.TrackstoreError):
            assert f" {name}" in drawn, f"{name} is missing from the tree in trackstore/errors.py"


def test_open_run_outcomes_are_plain_words_under_old_and_new_names():
    """An adapter written against the old constants returns the same words the engine compares
    with :class:`Opened` (what a cursor or a log line then holds is the plain word)."""
    import json

    from trackstore.sync import adapter

    assert [adapter.OPENED_CREATED, adapter.OPENED_FOUND, adapter.OPENED_REPLACED] == ["created", "found", "replaced"]
    assert adapter.Opened("found") is adapter.Opened.FOUND == "found"
    assert json.dumps(list(adapter.Opened)) == '["created", "found", "replaced"]'
    assert f"{adapter.Opened.REPLACED}" == "replaced"
