"""Import against crafted bundles: every member is checked against the manifest (the bundle's first
member) before and while it is written, the total is bounded by the manifest and the free disk,
and a run repeating ``(writer, seq)`` row ids is refused (``doctor --deep`` finds such runs).

Bundles that could fill the disk if the checks failed are imported in a child process whose
files may not grow past a few MiB (RLIMIT_FSIZE), so a regression fails fast and small.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.fixtures.stores import make_run, store_snapshot
from tests.helpers import python_child, run_cli
from trackstore.errors import BundleError, WriteError
from trackstore.read.listing import list_runs
from trackstore.upkeep import bundle as B
from trackstore.upkeep import compact as C
from trackstore.upkeep import doctor as D

MiB = 1 << 20
ZEROS_GZ = gzip.compress(bytes(MiB), compresslevel=9, mtime=0)  # one gzip member: 1 MiB of zeros in ~1 KiB


@pytest.fixture
def two(tmp_path):
    a, b = tmp_path / "cluster", tmp_path / "online"
    a.mkdir()
    b.mkdir()
    return a, b


def tree(root):
    """Every file under a store (path -> sha256), minus lock bookkeeping."""
    out = {}
    for dirpath, _d, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if not rel.startswith("_locks"):
                out[rel] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def exported(a, tmp_path, name="good.tar"):
    out = tmp_path / name
    B.export_runs(a, list_runs(a), out)
    return out


def read_bundle(path):
    """``(manifest, [(TarInfo, bytes), ...])`` of a bundle: its manifest and its other members."""
    with tarfile.open(path) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    (manifest,) = [data for m, data in members if m.name == f"{B.TOP}/{B.MANIFEST}"]
    return json.loads(manifest), [(m, data) for m, data in members if m.name != f"{B.TOP}/{B.MANIFEST}"]


def blocks(members):
    """Tar blocks (headers, data, padding) of ``[(TarInfo, bytes), ...]``, no end marker."""
    return b"".join(m.tobuf(tarfile.PAX_FORMAT) + data + bytes(-len(data) % 512) for m, data in members)


def tar_bytes(manifest, members):
    """A tar stream (no end marker) of the manifest, then ``members``."""
    return blocks([member(B.MANIFEST, json.dumps(manifest).encode()), *members])


def run_rel(members):
    """``runs/project=<p>/run=<id>`` of the bundle's first run."""
    return "/".join(members[0][0].name.split("/")[1:4])


def write_bundle(path, manifest, members):
    path.write_bytes(tar_bytes(manifest, members) + bytes(1024))


def member(rel, data):
    info = tarfile.TarInfo(f"{B.TOP}/{rel}")
    info.size = len(data)
    return info, data


def listing(rel, data):
    return {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def gzip_bomb(good, out, *, declared_mib, listed_size=None):
    """``good`` with a member of ``declared_mib`` MiB of zeros right after the manifest, as a gzip
    bundle of about ``declared_mib`` KiB. ``listed_size``: list it in the manifest with that size."""
    manifest, members = read_bundle(good)
    rel = f"{run_rel(members)}/artifacts/bomb.bin"
    if listed_size is not None:
        manifest["files"].append(listing(rel, bytes(listed_size)))
    bomb = tarfile.TarInfo(f"{B.TOP}/{rel}")
    bomb.size = declared_mib * MiB
    with open(out, "wb") as f:
        f.write(gzip.compress(tar_bytes(manifest, []) + bomb.tobuf(tarfile.PAX_FORMAT), mtime=0))
        for _ in range(declared_mib):  # gzip members concatenate: the stream inflates to declared_mib MiB
            f.write(ZEROS_GZ)
        f.write(gzip.compress(blocks(members) + bytes(1024), mtime=0))
    return rel


LIMITED_IMPORT = textwrap.dedent("""
    import json, resource, signal, sys
    sys.path.insert(0, {repo!r})
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, like a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    from trackstore.upkeep import bundle as B
    try:
        B.import_bundle({root!r}, {bundle!r})
        print(json.dumps({{"error": None}}))
    except Exception as exc:
        print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}))
""")


def import_with_file_limit(root, bundle, limit):
    """Import in a child whose files may not grow past ``limit`` bytes; its error as a dict."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = python_child(LIMITED_IMPORT.format(repo=repo, limit=limit, root=str(root), bundle=str(bundle)))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- size and manifest checks
@pytest.mark.parametrize("listed", [None, 1000], ids=["unlisted", "listed-smaller"])
def test_gzip_bomb_member_is_refused_at_its_header(two, tmp_path, listed):
    """A 1 GiB member in a 1 MiB gzip bundle: refused from its tar header, before a byte of it is
    written or inflated, as hostile (not as damage)."""
    a, b = two
    make_run(a)
    bomb = tmp_path / "bomb.tar.gz"
    rel = gzip_bomb(exported(a, tmp_path), bomb, declared_mib=1024, listed_size=listed)
    assert bomb.stat().st_size < 2 * MiB
    mine = make_run(b, "mine")
    before = tree(b)
    got = import_with_file_limit(b, bomb, 4 * MiB)
    assert got["error"] == "BundleError", got
    why = "is not listed in its manifest" if listed is None else f"holds {1024 * MiB} bytes but its manifest lists 1000"
    assert why in got["message"] and rel in got["message"] and "refusing bundle" in got["message"]
    assert tree(b) == before and not (b / B.IMPORT_DIR).exists()
    assert [r.run_id for r in list_runs(b)] == [mine.run_id]


def test_bundle_larger_than_the_free_disk_is_refused_up_front(two, tmp_path):
    a, b = two
    make_run(a)
    manifest, members = read_bundle(exported(a, tmp_path))
    rel = f"{run_rel(members)}/artifacts/huge.bin"
    manifest["files"].append({"path": rel, "size": 1 << 60, "sha256": "0" * 64})  # an exabyte
    huge = tmp_path / "huge.tar"
    write_bundle(huge, manifest, members)
    with pytest.raises(WriteError, match="not enough space to import") as err:
        B.import_bundle(b, huge)
    assert "nothing was imported" in str(err.value)
    assert tree(b) == {} and not (b / B.IMPORT_DIR).exists()
    cli = run_cli("import", str(huge), root=b)
    assert cli.returncode == 4 and "not enough space" in cli.stderr, cli.stderr


def test_disk_full_while_importing_says_so(two, tmp_path):
    """Not 'damaged bundle': the disk (here a file-size limit) refused a write."""
    import trackstore

    a, b = two
    run = trackstore.init("p", root=a)
    ckpt = tmp_path / "ckpt.bin"
    ckpt.write_bytes(os.urandom(512 * 1024))
    run.log_artifact(ckpt, name="ckpt")
    run.finish()
    good = exported(a, tmp_path)
    got = import_with_file_limit(b, good, 256 * 1024)
    assert got["error"] == "WriteError", got
    assert "disk is full" in got["message"] and "nothing was imported" in got["message"]
    assert "damaged" not in got["message"]
    assert tree(b) == {} and not (b / B.IMPORT_DIR).exists()
    B.import_bundle(b, good)  # with room, the same bundle imports
    assert store_snapshot(b) == store_snapshot(a)


def test_manifest_must_come_first(two, tmp_path):
    """Bundles are checked against a manifest read before anything else (format 2)."""
    a, b = two
    make_run(a)
    manifest, members = read_bundle(exported(a, tmp_path))
    last = tmp_path / "manifest-last.tar"
    data = json.dumps(manifest).encode()
    last.write_bytes(blocks([*members, member(B.MANIFEST, data)]) + bytes(1024))
    with pytest.raises(BundleError, match="does not start with trackstore-bundle/manifest.json"):
        B.import_bundle(b, last)
    assert tree(b) == {}
    assert manifest["version"] == B.BUNDLE_VERSION == 2


# ---------------------------------------------------------------------------- repeated row ids
def _metrics_parts(members):
    return [(m, d) for m, d in members if "/metrics/" in m.name and m.name.endswith(".parquet")]


def test_import_refuses_a_run_repeating_ids_across_parts(two, tmp_path):
    a, b = two
    p = make_run(a)
    manifest, members = read_bundle(exported(a, tmp_path))
    first, data = _metrics_parts(members)[0]
    copy = first.name.rsplit("-", 1)[0] + "-999999999999.parquet"  # same rows, another name
    rel = copy.split("/", 1)[1]
    manifest["files"].append(listing(rel, data))
    crafted = tmp_path / "repeat.tar"
    write_bundle(crafted, manifest, [*members, member(rel, data)])
    with pytest.raises(BundleError) as err:
        B.import_bundle(b, crafted)
    msg = str(err.value)
    ids = pq.read_table(io.BytesIO(data))
    writer = ids.column("writer")[0].as_py()
    assert f"run {p.project}/{p.run_id} repeats row ids: {ids.num_rows} metrics row ids" in msg
    assert f"writer {writer} seq 0 in " in msg and os.path.basename(copy) in msg
    assert tree(b) == {}
    cli = run_cli("import", str(crafted), root=b)
    assert cli.returncode == 9 and "repeats row ids" in cli.stderr


def test_import_refuses_a_part_repeating_ids_within_itself(two, tmp_path):
    a, b = two
    make_run(a)
    manifest, members = read_bundle(exported(a, tmp_path))
    first, data = _metrics_parts(members)[0]
    table = pq.read_table(io.BytesIO(data))
    twice = io.BytesIO()
    pq.write_table(pa.concat_tables([table, table.slice(2, 1)]), twice)  # one row id twice
    twice = twice.getvalue()
    rel = first.name.split("/", 1)[1]
    manifest["files"] = [f if f["path"] != rel else listing(rel, twice) for f in manifest["files"]]
    crafted = tmp_path / "twice.tar"
    write_bundle(crafted, manifest, [member(rel, twice) if m is first else (m, d) for m, d in members])
    with pytest.raises(BundleError, match=r"repeats row ids: 1 metrics row ids .* seq 2 in "):
        B.import_bundle(b, crafted)
    assert tree(b) == {}


def test_doctor_deep_finds_repeated_ids(root, tmp_path):
    p = make_run(root)
    compacted = make_run(root, "q")
    C.compact(root, [compacted])  # merged files keep their ids: no repeats there
    parts = p.parts("samples")
    shutil.copyfile(parts[1], parts[1].with_name(parts[1].name.replace(".parquet", "0.parquet")))
    assert not [f for f in D.diagnose(root).findings if f.check == "repeated_rows"]  # only --deep reads rows
    report = D.diagnose(root, deep=True)
    (f,) = [f for f in report.findings if f.check == "repeated_rows"]
    assert f.path == p.kind_dir("samples") and f.severity == "error" and not report.healthy
    assert f.problem.startswith("1 samples row ids (writer, seq) are held by more than one row, e.g. writer ")
    assert parts[1].name in f.problem and "move the files repeating rows" in f.advice
    cli = run_cli("doctor", "--deep", root=root)
    assert cli.returncode == 4 and "repeated_rows" in cli.stdout + cli.stderr


# ---------------------------------------------------------------------------- malformed manifests
def _with_manifest(good, out, change):
    manifest, members = read_bundle(good)
    change(manifest, members)
    write_bundle(out, manifest, members)
    return out


def _drop_version(m, _members):
    del m["version"]


def _text_version(m, _members):
    m["version"] = "two"


def _runs_not_a_list(m, _members):
    m["runs"] = {"project": "p"}


def _run_without_project(m, _members):
    del m["runs"][0]["project"]


def _run_entry_a_list(m, _members):
    m["runs"][0] = ["p", "r"]


def _run_not_listed(m, _members):
    m["runs"] = []


@pytest.mark.parametrize("change", [_drop_version, _text_version, _runs_not_a_list, _run_without_project,
                                    _run_entry_a_list, _run_not_listed])
def test_malformed_manifest_is_refused_with_nothing_imported(two, tmp_path, change):
    a, b = two
    make_run(a)
    bad = _with_manifest(exported(a, tmp_path), tmp_path / "bad.tar", change)
    with pytest.raises(BundleError, match="nothing was imported"):
        B.import_bundle(b, bad)
    assert tree(b) == {}
    res = run_cli("import", str(bad), root=b)
    assert res.returncode == 9 and "Traceback" not in res.stderr, res.stderr


def test_receipt_with_a_malformed_cursor_is_refused_whole(two, tmp_path):
    """One bad cursor in a receipt: no cursor of it is merged (not even the good ones before it)."""
    a, b = two
    run = make_run(a)
    good_cursor = {"version": 1, "target": "mlflow", "destination": "http://127.0.0.1:1", "project": run.project,
                   "run_id": run.run_id, "acked": {"metrics": [[0, 0]]}}
    manifest = {"format": B.FORMAT, "version": B.BUNDLE_VERSION, "kind": "receipt", "files": []}
    members = []
    for dest, data in (("mlflow-aaaaaaaaaaaa", json.dumps(good_cursor).encode()), ("mlflow-bbbbbbbbbbbb", b"[]")):
        rel = f"sync/{dest}/project={run.project}/run={run.run_id}.json"
        manifest["files"].append(listing(rel, data))
        members.append(member(rel, data))
    bad = tmp_path / "receipt.tar"
    write_bundle(bad, manifest, members)
    before = tree(a)
    with pytest.raises(BundleError, match="nothing was imported"):
        B.import_bundle(a, bad)
    assert tree(a) == before


def _receipt(tmp_path, run, acked, name="receipt.tar"):
    """A receipt of one cursor of ``run`` acknowledging ``acked`` (kind -> row-id set)."""
    cursor = {"version": 1, "target": "mlflow", "destination": "http://127.0.0.1:1", "project": run.project,
              "run_id": run.run_id, "acked": acked, "synced_status": "finished",
              "last_sync_at": "2026-12-01T00:00:00+00:00"}
    data = json.dumps(cursor).encode()
    rel = f"sync/mlflow-aaaaaaaaaaaa/project={run.project}/run={run.run_id}.json"
    manifest = {"format": B.FORMAT, "version": B.BUNDLE_VERSION, "kind": "receipt", "files": [listing(rel, data)]}
    out = tmp_path / name
    write_bundle(out, manifest, [member(rel, data)])
    return out, rel


def test_receipt_acknowledging_rows_past_int64_is_refused(two, tmp_path):
    a, _b = two
    run = make_run(a)
    bad, rel = _receipt(tmp_path, run, {"metrics": {"vm-1-abc": [[0, 2**70]]}})
    before = tree(a)
    with pytest.raises(BundleError) as err:
        B.import_bundle(a, bad, expect="receipt")
    msg = str(err.value)
    assert f"refusing receipt: its cursor {rel} is unreadable: acked.metrics['vm-1-abc']: " in msg
    assert "1180591620717411303424 is not a row sequence number" in msg and "nothing was imported" in msg
    assert tree(a) == before
    cli = run_cli("import", "--receipt", str(bad), root=a)
    assert cli.returncode == 9 and "is not a row sequence number" in cli.stderr and "Traceback" not in cli.stderr
    assert run_cli("status", root=a).returncode == 0


def test_receipt_whose_union_with_the_local_cursor_overflows_is_refused(two, tmp_path):
    """Each cursor alone holds at most 2**63-1 rows; their union would hold more."""
    a, _b = two
    run = make_run(a)
    first, _rel = _receipt(tmp_path, run, {"metrics": {"w1": [[0, 2**63 - 2]]}}, "first.tar")
    assert B.import_bundle(a, first).cursors_merged == 1
    second, _rel = _receipt(tmp_path, run, {"metrics": {"w2": [[0, 2**63 - 2]]}}, "second.tar")
    before = tree(a)
    with pytest.raises(BundleError, match=r"cannot be merged: acked\.metrics \(its number of rows\)"):
        B.import_bundle(a, second)
    assert tree(a) == before


def test_manifest_row_counts_must_be_counts(two, tmp_path):
    a, b = two
    make_run(a)

    def negative_rows(m, _members):
        m["runs"][0]["rows"] = {"metrics": -3}

    bad = _with_manifest(exported(a, tmp_path), tmp_path / "bad.tar", negative_rows)
    with pytest.raises(BundleError, match=r"rows\.metrics: -3 is not a count .* nothing was imported"):
        B.import_bundle(b, bad)
    assert tree(b) == {}


# ---------------------------------------------------------------------------- runs that are not what they claim
def _replace_member(manifest, members, rel, data):
    manifest["files"] = [f if f["path"] != rel else listing(rel, data) for f in manifest["files"]]
    return [member(rel, data) if m.name == f"{B.TOP}/{rel}" else (m, d) for m, d in members]


@pytest.mark.parametrize("junk", [b"not parquet at all, just text\n" * 4,
                                  b"PAR1" + bytes(40) + (8).to_bytes(4, "little") + b"PAR1"],
                         ids=["text", "parquet-framed-garbage"])
def test_import_refuses_a_listed_part_that_is_not_parquet(two, tmp_path, junk):
    a, b = two
    make_run(a)
    manifest, members = read_bundle(exported(a, tmp_path))
    first, _data = _metrics_parts(members)[0]
    rel = first.name.split("/", 1)[1]
    crafted = tmp_path / "junk.tar"
    write_bundle(crafted, manifest, _replace_member(manifest, members, rel, junk))
    with pytest.raises(BundleError, match=f"{rel} is not a valid metrics part .*nothing was imported"):
        B.import_bundle(b, crafted)
    assert tree(b) == {}
    cli = run_cli("import", str(crafted), root=b)
    assert cli.returncode == 9 and "is not a valid metrics part" in cli.stderr


def test_import_refuses_a_part_of_another_kind(two, tmp_path):
    a, b = two
    make_run(a)
    manifest, members = read_bundle(exported(a, tmp_path))
    first, _data = _metrics_parts(members)[0]
    (samples,) = [d for m, d in members if "/samples/" in m.name][:1]
    rel = first.name.split("/", 1)[1]
    crafted = tmp_path / "kind.tar"
    write_bundle(crafted, manifest, _replace_member(manifest, members, rel, samples))
    with pytest.raises(BundleError, match="is not a valid metrics part"):
        B.import_bundle(b, crafted)
    assert tree(b) == {}


@pytest.mark.parametrize("field", ["run_id", "project"])
def test_import_refuses_a_run_json_naming_another_run(two, tmp_path, field):
    a, b = two
    p = make_run(a)
    other = make_run(a, "q")
    B.import_bundle(b, exported(a, tmp_path, "first.tar"))  # both runs already here: a merge too is refused
    before = tree(b)
    manifest, members = read_bundle(exported(a, tmp_path))
    rel = f"runs/project={p.project}/run={p.run_id}/run.json"
    (data,) = [d for m, d in members if m.name == f"{B.TOP}/{rel}"]
    meta = json.loads(data)
    meta[field] = getattr(other, field)
    crafted = tmp_path / "foreign.tar"
    write_bundle(crafted, manifest, _replace_member(manifest, members, rel, json.dumps(meta).encode()))
    with pytest.raises(BundleError, match=f"run {p.project}/{p.run_id}: its run.json names another run"):
        B.import_bundle(b, crafted)
    assert tree(b) == before
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    cli = run_cli("import", str(crafted), root=fresh)
    assert cli.returncode == 9 and "names another run" in cli.stderr
    assert tree(fresh) == {}
