"""Images in the store: ``trackstore.Image`` in ``run.log``, in sample rows and through the wandb
drop-in; files content-addressed beside the rows, byte-exact for PNG/JPEG paths, carried by
bundles (checked against their sha256 on import) and kept by compaction."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
import zlib

import numpy as np
import pytest

import trackstore
import trackstore.compat.wandb as wandb_dropin
from trackstore.errors import BundleError, InvalidValueError
from trackstore.read.listing import list_runs
from trackstore.records.samples import decode_row
from trackstore.store import media
from trackstore.upkeep import bundle as B

PIL = pytest.importorskip("PIL.Image", reason="Pillow makes the JPEG and PIL fixtures")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def pics(tmp_path):
    """A PNG (with a text chunk, so a re-encode would change its bytes) and a JPEG on disk."""
    from PIL import PngImagePlugin

    png, jpg = tmp_path / "red.png", tmp_path / "blue.jpg"
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", "kept as is")
    PIL.new("RGB", (20, 10), (255, 0, 0)).save(png, pnginfo=info)
    PIL.new("RGB", (7, 9), (0, 0, 255)).save(jpg, quality=83)
    return png, jpg


def images(root):
    con = trackstore.connect(root=root)
    cols = "step, key, index, path, sha256, size, width, height, format, caption"
    names = cols.split(", ")
    return [dict(zip(names, r)) for r in con.sql(f"SELECT {cols} FROM images ORDER BY step, key, index").fetchall()]


def stored(run, row) -> bytes:
    return (run.dir / row["path"]).read_bytes()


# ---------------------------------------------------------------------------- run.log
def test_png_and_jpeg_files_keep_their_exact_bytes(root, pics):
    png, jpg = pics
    run = trackstore.init(project="p", root=root)
    run.log({"val/pic": trackstore.Image(png, caption="red <b>square</b>"), "loss": 0.5}, step=3)
    run.log({"val/pic": trackstore.Image(str(jpg))}, step=4)
    run.finish()
    rows = images(root)
    assert [(r["step"], r["key"], r["format"], r["width"], r["height"]) for r in rows] == [
        (3, "val/pic", "png", 20, 10), (4, "val/pic", "jpeg", 7, 9)]
    assert rows[0]["caption"] == "red <b>square</b>"
    for r, src in zip(rows, (png, jpg)):
        data = src.read_bytes()
        assert stored(run, r) == data and r["sha256"] == sha(data) and r["size"] == len(data)
        assert r["path"] == media.media_path(sha(data), r["format"])
    assert trackstore.connect(root=root).sql("SELECT value FROM metrics WHERE key = 'loss'").fetchall() == [(0.5,)]


def test_the_same_bytes_logged_twice_are_one_file(root, pics):
    png, _ = pics
    arr = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    run = trackstore.init(project="p", root=root)
    for step in range(3):
        run.log({"a": trackstore.Image(png), "b": trackstore.Image(arr), "c": trackstore.Image(arr.copy())}, step=step)
    run.finish()
    rows = images(root)
    assert len(rows) == 9 and len({r["path"] for r in rows}) == 2
    files = [p for p in (run.dir / "media").rglob("*") if p.is_file()]
    assert len(files) == 2 and not [p for p in files if p.name.startswith(".")]


def test_arrays_and_pil_images_become_deterministic_pngs(root):
    grey = np.linspace(0, 1, 12).reshape(3, 4)
    chw = np.zeros((3, 5, 6), dtype=np.uint8)
    chw[0] = 255
    rgba = np.full((2, 2, 4), 7, dtype=np.int64)
    pil = PIL.new("P", (3, 2))
    run = trackstore.init(project="p", root=root)
    run.log({"grey": trackstore.Image(grey), "chw": trackstore.Image(chw), "rgba": trackstore.Image(rgba),
             "mask": trackstore.Image(np.eye(3, dtype=bool)), "pil": trackstore.Image(pil)}, step=0)
    run.finish()
    by_key = {r["key"]: r for r in images(root)}
    assert {k: (r["width"], r["height"], r["format"]) for k, r in by_key.items()} == {
        "grey": (4, 3, "png"), "chw": (6, 5, "png"), "rgba": (2, 2, "png"), "mask": (3, 3, "png"), "pil": (3, 2, "png")}
    back = np.asarray(PIL.open(io.BytesIO(stored(run, by_key["chw"]))))
    assert back.shape == (5, 6, 3) and (back[..., 0] == 255).all() and (back[..., 1:] == 0).all()
    back = np.asarray(PIL.open(io.BytesIO(stored(run, by_key["grey"]))))
    assert back.tolist() == np.rint(grey * 255).astype(np.uint8).tolist()
    # the same pixels always make the same bytes (content addressing needs it), whatever made them
    assert trackstore.Image(grey).sha256 == by_key["grey"]["sha256"]
    assert trackstore.Image(PIL.fromarray(np.rint(grey * 255).astype(np.uint8))).sha256 == by_key["grey"]["sha256"]


def test_a_list_of_images_is_one_row_each_in_order(root, pics):
    png, jpg = pics
    run = trackstore.init(project="p", root=root)
    run.log({"gen": [trackstore.Image(jpg, caption="0"), trackstore.Image(png, caption="1")]}, step=5)
    run.finish()
    assert [(r["index"], r["caption"], r["format"]) for r in images(root)] == [(0, "0", "jpeg"), (1, "1", "png")]


@pytest.mark.parametrize("make, message", [
    (lambda t: t / "missing.png", "does not exist"),
    (lambda t: t, "is a folder"),
    (lambda t: _write(t / "truncated.png", _png_bytes()[:-20]), "truncated PNG"),
    (lambda t: _write(t / "crc.png", _png_bytes()[:30] + b"\x00" + _png_bytes()[31:]), "CRC"),
    (lambda t: _write(t / "cut.jpg", _jpeg_bytes()[:-50]), "truncated JPEG"),
    (lambda t: _write(t / "notes.png", b"hello, I am text"), "neither a PNG nor a JPEG"),
    (lambda t: _write(t / "empty.png", b""), "an empty file"),
])
def test_a_bad_path_is_refused_when_the_image_is_made(tmp_path, make, message):
    with pytest.raises(InvalidValueError, match=message):
        trackstore.Image(make(tmp_path))


@pytest.mark.parametrize("value, message", [
    (np.zeros((2, 3, 5), dtype=np.uint8), "shape"),
    (np.zeros((2, 3, 4, 1), dtype=np.uint8), "shape"),
    (np.zeros((0, 3), dtype=np.uint8), "shape"),
    (np.full((2, 2), 1.5), r"\[0, 1\]"),
    (np.full((2, 2), np.nan), "NaN"),
    (np.full((2, 2), 300, dtype=np.int32), r"\[0, 255\]"),
    (np.zeros((2, 2), dtype=np.complex64), "dtype"),
    (np.array([["a", "b"]]), "dtype"),
    ({"not": "an image"}, "file path, a numpy array or a PIL image"),
])
def test_a_bad_array_is_refused_with_what_is_wrong(value, message):
    with pytest.raises(InvalidValueError, match=message):
        trackstore.Image(value)


def test_a_bad_value_in_a_call_records_nothing_of_it(root, pics):
    png, _ = pics
    run = trackstore.init(project="p", root=root)
    with pytest.raises(InvalidValueError, match="'mixed' has type list"):
        run.log({"ok": trackstore.Image(png), "mixed": [trackstore.Image(png), 3], "x": 1.0}, step=0)
    with pytest.raises(InvalidValueError, match="caption must be text"):
        trackstore.Image(png, caption=3)
    run.finish()
    assert images(root) == [] and not (run.dir / "media").exists()


def test_disk_trouble_warns_and_never_raises_into_training(root, pics, capfd):
    png, _ = pics
    run = trackstore.init(project="p", root=root)
    (run.dir / "media").write_text("a file where the media folder belongs")
    run.log({"pic": trackstore.Image(png), "loss": 1.0}, step=0)
    run.finish()
    assert "could not write image file" in capfd.readouterr().err
    assert images(root) == []  # no row names a file that is not there
    assert trackstore.connect(root=root).sql("SELECT count(*) FROM metrics").fetchall() == [(1,)]


# ---------------------------------------------------------------------------- samples
def test_images_in_sample_rows_are_files_and_references(root, pics):
    png, jpg = pics
    run = trackstore.init(project="p", root=root)
    prompt = [{"role": "user", "content": [{"type": "image", "image": trackstore.Image(jpg)}, "what colour?"]}]
    run.log_samples([{"input": prompt, "output": "blue", "score": 1.0, "render": trackstore.Image(png, caption="c")}],
                    step=2)
    run.finish()
    con = trackstore.connect(root=root)
    (row,) = con.sql("SELECT * FROM samples").fetchall()
    names = [d[0] for d in con.sql("SELECT * FROM samples").description]
    back = decode_row(dict(zip(names, row)))
    ref_in = back["input"][0]["content"][0]["image"]
    ref_extra = back["render"]
    assert ref_in["_type"] == ref_extra["_type"] == "image" and ref_extra["caption"] == "c"
    assert (run.dir / ref_in["path"]).read_bytes() == jpg.read_bytes() and ref_in["sha256"] == sha(jpg.read_bytes())
    assert (run.dir / ref_extra["path"]).read_bytes() == png.read_bytes()
    # SQL finds them by their JSON fields
    assert con.sql("SELECT extra->>'$.render.sha256' FROM samples").fetchall() == [(sha(png.read_bytes()),)]
    assert images(root) == []  # sample images are not images rows: the sample row names them


# ---------------------------------------------------------------------------- the wandb drop-in
def test_wandb_image_works_through_the_drop_in(root, pics, monkeypatch):
    png, _ = pics
    monkeypatch.setenv("TRACKSTORE_DIR", str(root))
    run = wandb_dropin.init(project="p")
    wandb_dropin.log({"pic": wandb_dropin.Image(str(png), caption="hello"),
                      "floats": wandb_dropin.Image(np.full((2, 2, 3), -1.0)),
                      "many": [wandb_dropin.Image(np.full((2, 2), 300.0))]}, step=1)
    table = wandb_dropin.Table(columns=["prompt", "completion", "picture"],
                               data=[["p", "c", wandb_dropin.Image(str(png))]])
    wandb_dropin.log({"val": table}, step=1)
    with pytest.raises(wandb_dropin.NotSupportedError, match="boxes"):
        wandb_dropin.Image(str(png), boxes={"predictions": {}})
    run.finish()
    by_key = {r["key"]: r for r in images(root)}
    assert (run.trackstore_run.dir / by_key["pic"]["path"]).read_bytes() == png.read_bytes()
    assert by_key["pic"]["caption"] == "hello"
    pix = np.asarray(PIL.open(io.BytesIO(stored(run.trackstore_run, by_key["floats"]))))
    assert (pix == 0).all()  # -1 maps to 0, as wandb normalises [-1, 1]
    pix = np.asarray(PIL.open(io.BytesIO(stored(run.trackstore_run, by_key["many"]))))
    assert (pix == 255).all()  # clipped to 255
    extra = trackstore.connect(root=root).sql("SELECT extra->>'$.picture.sha256' FROM samples").fetchall()
    assert extra == [(sha(png.read_bytes()),)]


# ---------------------------------------------------------------------------- bundles, compaction
def _logged(root, png):
    run = trackstore.init(project="p", root=root, compact=False)
    for step in range(3):
        run.log({"pic": trackstore.Image(np.full((2, 2), step, dtype=np.uint8)), "same": trackstore.Image(png)},
                step=step)
        run.flush()
    run.finish()
    return run


def test_bundles_carry_image_files_byte_for_byte(tmp_path, pics):
    a, b = tmp_path / "a", tmp_path / "b"
    run = _logged(a, pics[0])
    out = tmp_path / "x.tar"
    B.export_runs(a, list_runs(a), out)
    B.import_bundle(b, out)
    assert images(b) == images(a) and len(images(b)) == 6
    for r in images(b):
        assert (b / run.dir.relative_to(a) / r["path"]).read_bytes() == (run.dir / r["path"]).read_bytes()


def test_an_image_file_whose_content_is_not_its_name_is_refused_on_import(tmp_path, pics):
    a, b = tmp_path / "a", tmp_path / "b"
    _logged(a, pics[0])
    good = tmp_path / "good.tar"
    B.export_runs(a, list_runs(a), good)
    with tarfile.open(good) as tf:
        members = [(m, tf.extractfile(m).read() if m.isreg() else None) for m in tf.getmembers()]
    manifest = next(json_of(d) for m, d in members if m.name.endswith("/manifest.json") and "/runs/" not in m.name)
    victim = next(m.name for m, _ in members if "/media/" in m.name)
    forged = _png_bytes()  # a valid PNG, listed honestly in the manifest, but not the bytes its name says
    for f in manifest["files"]:
        if victim.endswith(f["path"]):
            f["size"], f["sha256"] = len(forged), sha(forged)
    bad = tmp_path / "bad.tar"
    with tarfile.open(bad, "w") as tf:
        for m, d in members:
            if m.name.endswith("/manifest.json") and "/runs/" not in m.name:
                d = __import__("json").dumps(manifest).encode()
            elif m.name == victim:
                d = forged
            if d is not None:
                m.size = len(d)
                tf.addfile(m, io.BytesIO(d))
            else:
                tf.addfile(m)
    with pytest.raises(BundleError, match="sha256 is .* not the one its name says"):
        B.import_bundle(b, bad)
    assert not list(b.glob("project=*"))


def json_of(data):
    import json

    return json.loads(data)


def test_compaction_keeps_every_image_row_and_file(root, pics):
    from trackstore.upkeep import compact as C

    run = _logged(root, pics[0])
    before = images(root)
    assert len(list((run.dir / "images").glob("*.parquet"))) == 3
    C.compact(root, [run.paths])
    assert len(list((run.dir / "images").glob("*.parquet"))) == 1
    assert images(root) == before and all((run.dir / r["path"]).is_file() for r in before)


# ---------------------------------------------------------------------------- the format
def test_media_paths_are_the_only_ones_parsed():
    good = media.media_path("ab" + "0" * 62, "png")
    assert media.parse_media_path(good) == ("ab" + "0" * 62, "png")
    for bad in ("media/ab/../../run.json", "/etc/passwd", "media/cd/ab" + "0" * 62 + ".png",
                "media/ab/ab" + "0" * 62 + ".gif", "media/AB/AB" + "0" * 62 + ".png", None, 3):
        assert media.parse_media_path(bad) is None, bad


def _write(path, data):
    path.write_bytes(data)
    return path


def _png_bytes() -> bytes:
    return media.encode_png(bytes(range(12)), 2, 2, 3)


def _jpeg_bytes() -> bytes:
    buf = io.BytesIO()
    PIL.new("RGB", (16, 16), (1, 2, 3)).save(buf, format="JPEG")
    return buf.getvalue()


def test_encode_png_is_a_valid_png_pillow_reads():
    data = media.encode_png(bytes(range(24)), 4, 2, 3)
    assert media.sniff(data) == ("png", 4, 2)
    assert np.asarray(PIL.open(io.BytesIO(data))).reshape(-1).tolist() == list(range(24))
    ihdr = data[8:33]
    assert struct.unpack(">I", ihdr[-4:])[0] == zlib.crc32(ihdr[4:-4])
    assert os.path.basename(media.media_path(sha(data), "png")) == sha(data) + ".png"


def test_show_counts_a_runs_images(root, pics):
    from tests.helpers import run_cli

    run = trackstore.init(project="p", root=root)
    run.log({"a": trackstore.Image(pics[0]), "b": [trackstore.Image(pics[1]), trackstore.Image(pics[0])]}, step=0)
    run.finish()
    res = run_cli("show", run.id, root=root)
    assert res.returncode == 0 and "3 images of 2 keys" in res.stdout, res.stdout + res.stderr


def test_an_image_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path, pics, monkeypatch):
    from trackstore.records import images as I

    monkeypatch.setattr(I, "MAX_IMAGE_BYTES", pics[0].stat().st_size - 1)
    with pytest.raises(InvalidValueError, match="log it as an artifact"):
        trackstore.Image(pics[0])


def test_doctor_deep_finds_an_image_file_changed_on_disk(root, pics):
    from tests.helpers import run_cli

    run = trackstore.init(project="p", root=root)
    run.log({"a": trackstore.Image(pics[0])}, step=0)
    run.finish()
    assert run_cli("doctor", "--deep", root=root).returncode == 0
    [row] = images(root)
    f = run.dir / row["path"]
    f.chmod(0o644)
    f.write_bytes(_png_bytes())  # a valid PNG, but not the bytes its name says
    res = run_cli("doctor", "--deep", root=root)
    assert res.returncode == 4 and "damaged_media" in res.stdout + res.stderr, res.stdout + res.stderr
    assert run_cli("doctor", root=root).returncode == 0  # only --deep reads the images
