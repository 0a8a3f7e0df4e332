"""The one relist policy (trackstore.store.layout.relist) and what each caller makes of a kind
folder that keeps changing: a listing, a StoreError, or parts counted as unreadable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.query_fixtures import part
from trackstore.errors import StoreError
from trackstore.store import layout
from trackstore.store.layout import RELIST_ATTEMPTS, RunPaths, relist
from trackstore.store.ledger import read_row_ids
from trackstore.store.parts import each_part, read_rows


def three_parts(root: Path) -> RunPaths:
    for i in range(3):
        part(root, "p", "r", "metrics", [{"step": i, "key": "loss", "value": float(i)}], first_seq=i)
    return RunPaths(root, "p", "r")


def test_a_missing_folder_is_an_empty_listing(tmp_path):
    assert relist(tmp_path / "nothing") == ([], [])
    assert RunPaths(tmp_path, "p", "r").parts("metrics") == []


def test_a_part_vanishing_once_means_the_whole_folder_is_read_again(root):
    paths = three_parts(root)
    calls: list[str] = []

    def read(p):
        calls.append(p.name)
        if len(calls) == 2:
            raise FileNotFoundError(p)  # a swap between the listing and this read
        return p.name

    found, vanished = relist(paths.kind_dir("metrics"), read)
    assert vanished == [] and found == [p.name for p in paths.parts("metrics")]
    assert len(calls) == 2 + 3  # the first attempt stopped at the vanished part; the second read all


def test_a_folder_that_never_settles_is_each_callers_call(root, monkeypatch):
    paths = three_parts(root)
    monkeypatch.setattr(layout, "RELIST_BACKOFF_S", 0.0)
    victim = paths.parts("metrics")[1]
    attempts = []

    def read(p):
        if p == victim:
            attempts.append(1)
            raise FileNotFoundError(p)
        return p

    found, vanished = relist(paths.kind_dir("metrics"), read)
    assert len(attempts) == RELIST_ATTEMPTS and vanished == [victim] and victim not in found and len(found) == 2

    # each_part (what read_kind and curves use): "try again", never a partial answer
    with pytest.raises(StoreError, match="kept changing"):
        each_part(paths, "metrics", read, lambda p, e: None)
    assert each_part(paths, "metrics", lambda p: read_rows(p, "metrics"), lambda p, e: None)  # settled: rows

    # read_row_ids (what gc and status count): the part is not known to be read, so it is unreadable
    from trackstore.store import parts as parts_module

    real = parts_module.read_columns

    def flaky(p, *a, **k):
        if Path(p) == victim:
            raise FileNotFoundError(p)
        return real(p, *a, **k)

    monkeypatch.setattr(parts_module, "read_columns", flaky)
    ids, damaged = read_row_ids(paths, "metrics")
    assert damaged == [victim] and sorted(ids.column("seq").to_pylist()) == [0, 2]
