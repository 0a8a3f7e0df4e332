"""Damaged part files: skipped with a warning naming the file, or a clear error naming it."""

from __future__ import annotations

import os

import pytest

from tests.helpers import run_cli
from tests.query_fixtures import make_run, metric_rows, part
from trackstore.errors import CorruptFileError
from trackstore.read.views import SkippedFileWarning, connect, query


def damaged_store(root, how: str):
    """Two runs of 5 points each; one extra part file of the first run is damaged ``how``."""
    a = make_run(root, "p", "a", steps=5)
    make_run(root, "p", "b", steps=5)
    bad = part(root, "p", a.id, "metrics", metric_rows(7, start=100), writer="w9")
    data = bad.read_bytes()
    if how == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        bad.write_bytes(b"\x8f\x00garbage bytes, not parquet at all\xff" * 40)
    elif how == "no-footer":
        bad.write_bytes(data[:-8])
    return bad


@pytest.mark.parametrize("how", ["truncated", "garbage", "no-footer"])
def test_damaged_file_skipped_with_warning(root, how):
    bad = damaged_store(root, how)
    with pytest.warns(SkippedFileWarning, match=str(bad.name)) as caught:
        con = connect(root)
    assert "trackstore doctor" in str(caught[0].message)
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (20,)  # 2 runs x 5 steps x 2 keys


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_damaged_file_error_mode_names_file(root, how):
    bad = damaged_store(root, how)
    with pytest.raises(CorruptFileError) as info:
        query("SELECT count(*) FROM metrics", root=root, on_corrupt="error")
    assert str(bad) in str(info.value) and "trackstore doctor" in str(info.value)


def test_damage_inside_data_pages_names_file(root):
    """Framing intact, data pages overwritten: the query error names the file, no traceback."""
    a = make_run(root, "p", "a", steps=2)
    bad = part(root, "p", a.id, "metrics", metric_rows(2000, start=100), writer="w9")
    data = bytearray(bad.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    for i in range(4, len(data) - footer - 8):
        data[i] = 0xAB
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as info:
        query("SELECT sum(value) FROM metrics", root=root)
    assert str(bad) in str(info.value)


def test_damaged_footer_with_intact_magic(root):
    a = make_run(root, "p", "a", steps=2)
    bad = part(root, "p", a.id, "metrics", metric_rows(50, start=100), writer="w9")
    data = bytearray(bad.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    for i in range(len(data) - footer - 8, len(data) - 8):
        data[i] = 0xFF
    bad.write_bytes(bytes(data))
    with pytest.warns(SkippedFileWarning, match=bad.name):
        assert query("SELECT count(*) AS n FROM metrics", root=root).to_pylist() == [{"n": 4}]
    with pytest.raises(CorruptFileError, match=bad.name):
        connect(root, on_corrupt="error")


def test_cli_warns_and_answers(root):
    bad = damaged_store(root, "truncated")
    res = run_cli("sql", "SELECT count(*) AS n FROM metrics", "-f", "csv", root=root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["n", "20"]
    assert str(bad) in res.stderr and "WARNING" in res.stderr and "Traceback" not in res.stderr


def test_cli_strict_fails_with_store_exit_code(root):
    bad = damaged_store(root, "garbage")
    res = run_cli("sql", "SELECT count(*) FROM metrics", "--strict", root=root)
    assert res.returncode == 4
    assert str(bad) in res.stderr and "trackstore doctor" in res.stderr and "Traceback" not in res.stderr



def test_kept_folder_listings_see_a_damaged_part_arrive_and_leave(root, monkeypatch):
    """connect() keeps each kind folder's listing in the catalog and then stat-s the folder, not
    its parts: a part renamed in or out changes the folder, so the next connect sees it."""
    import os
    import warnings

    from trackstore.store.catalog import freshness, open_catalog

    # no fingerprint counts as too recent to keep (as if every change were seconds old)
    monkeypatch.setattr(freshness, "RACY_S", -1.0)

    a = make_run(root, "p", "a", steps=5)
    make_run(root, "p", "b", steps=5)
    assert connect(root).execute("SELECT count(*) FROM metrics").fetchone() == (20,)
    kept = open_catalog(root).part_folders()
    assert kept and all(fp and names for fp, names in kept.values())  # the listings were kept
    bad = part(root, "p", a.id, "metrics", metric_rows(3, start=100), writer="w9")
    tmp = bad.with_name(".incoming.tmp")
    bad.rename(tmp)
    tmp.write_bytes(b"\x8f\x00garbage" * 40)
    os.rename(tmp, bad)  # arrives by a rename, as every part does
    with pytest.warns(SkippedFileWarning, match=bad.name):
        con = connect(root)
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (20,)
    with pytest.warns(SkippedFileWarning, match=bad.name):  # the same answer from the kept checks
        connect(root)
    bad.unlink()
    good = part(root, "p", a.id, "metrics", metric_rows(3, start=100), writer="w8")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedFileWarning)
        con = connect(root)
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (23,)
    assert good.name in {n for _fp, names in open_catalog(root).part_folders().values() for n in names}


def test_an_unchanged_store_opens_without_listing_its_part_folders(root, monkeypatch):
    """The second connect() of an unchanged store lists no kind folder and stat-s no part file:
    opening costs a stat per kind folder, whatever the number of parts."""
    import os

    from trackstore.store.catalog import freshness

    monkeypatch.setattr(freshness, "RACY_S", -1.0)
    for name in ("a", "b", "c"):
        make_run(root, "p", name, steps=5)
    assert connect(root).execute("SELECT count(*) FROM metrics").fetchone() == (30,)
    listed, real_scandir = [], os.scandir

    def counting_scandir(path="."):
        listed.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    con = connect(root)
    kind_folders = [p for p in listed if os.path.basename(p) in ("metrics", "samples", "spans", "histograms", "_manifest")]
    assert kind_folders == []
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (30,)  # the views still read every part


def test_a_part_merged_away_while_the_views_are_made_does_not_fail_connect(root, monkeypatch):
    """A rolling merge may swap a live run's parts away between connect()'s scan and the making
    of its views: the views are bound on a file of their own, never on a part of the store, and
    then read what is there."""
    import pyarrow.parquet as pq

    from trackstore.read import views

    make_run(root, "p", "a", steps=5)
    make_run(root, "p", "b", steps=5)
    real_scan = views.scan_parts
    gone = []

    def scan_then_merge_away(*args, **kwargs):
        found = real_scan(*args, **kwargs)
        first = min(found.files["metrics"])  # the part an earlier version bound the views on
        gone.append(pq.read_metadata(first).num_rows)
        os.rename(first, os.path.join(os.path.dirname(first), ".merged-away.tmp"))
        return found

    monkeypatch.setattr(views, "scan_parts", scan_then_merge_away)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedFileWarning)  # a part merged away is not damage
        con = connect(root)
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (20 - gone[0],)


def test_connect_without_a_writable_temp_folder_still_answers(root, monkeypatch):
    """The views' binding file lives in a temp folder; with none writable, connect() binds the
    views on their sources instead (slower to open on a big store, the same answers)."""
    import tempfile

    from trackstore.read import views

    make_run(root, "p", "a", steps=5)

    def no_temp(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(views.tempfile, "TemporaryDirectory", no_temp)
    assert tempfile.TemporaryDirectory is no_temp
    con = connect(root)
    assert con.execute("SELECT count(*) FROM metrics").fetchone() == (10,)
    assert con.execute("SELECT count(*) FROM latest").fetchone() == (2,)
