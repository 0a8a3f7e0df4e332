"""SwanLab's own run files, read with SwanLab's own reader: what an experiment holds.

A SwanLab run folder (``run-<YYYYmmdd_HHMMSS>-<id>/run-<id>.swanlab``) is a LevelDB-log framed
file of ``record_pb2.Record`` (start, column, scalar, media, log, save, finish). Offline and
local sessions each write a new folder, so "what the target holds" for an experiment is the
union of all its folders. A file cut by a kill yields its records up to the last whole one; an
empty or foreign file yields none. Used by the SwanLab adapter to check re-sent rows and to
confirm a session, by ``--verify``, and by the tests.
"""

from __future__ import annotations

from pathlib import Path

from .swanlab_media import counts_as


def read_session_files(logdir: Path, exp_id: str):
    """Every record SwanLab wrote for experiment ``exp_id`` under ``logdir``, oldest session
    first, as ``(session_dir, record)`` pairs (``record`` a ``record_pb2.Record``). Empty or
    cut files (a killed session) yield what they hold up to the last whole record."""
    for d in sorted(Path(logdir).glob(f"run-*-{exp_id}")):
        for rec in read_session_file(d / f"run-{exp_id}.swanlab"):
            yield d, rec


def read_session_file(path: Path):
    """The whole records of one ``run-<id>.swanlab`` file (none if it is empty or foreign)."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    try:
        if not path.is_file() or path.stat().st_size < 7:
            return
        reader = DataStoreReader()
        reader.open(path)
    except Exception:  # header cut or foreign version: nothing readable in it
        return
    try:
        for raw in reader:
            rec = Record()
            try:
                rec.ParseFromString(raw)
            except Exception:
                break
            yield rec
    finally:
        reader.close()


class Held:
    """What earlier sessions of one experiment wrote: (key, step) pairs and saved file names."""

    def __init__(self, logdir: Path, exp_id: str, skip_dir: Path | None):
        self.points: set[tuple[str, int]] = set()
        self.saves: set[str] = set()
        for d, rec in read_session_files(logdir, exp_id):
            if skip_dir is not None and d == skip_dir:
                continue
            kind = rec.WhichOneof("record_type")
            if kind in ("scalar", "media"):
                m = getattr(rec, kind)
                self.points.add((m.key, int(m.step)))
            elif kind == "save":
                self.saves.add(rec.save.name)


def count_points(logdir: Path, exp_id: str) -> dict[str, int]:
    """What the SwanLab files of one experiment hold, in trackstore's units: metric points,
    samples and traces (the Text rows that head one, :func:`~trackstore.sync.swanlab_media.counts_as`)
    histograms (charts) and images."""
    out = {"metrics": 0, "samples": 0, "histograms": 0, "traces": 0, "images": 0}
    for _d, rec in read_session_files(logdir, exp_id):
        kind = rec.WhichOneof("record_type")
        if kind == "scalar":
            out["metrics"] += 1
        elif kind == "media":
            key = rec.media.key
            if key.startswith("samples/") or key == "trajectories":
                for item in rec.media.value.items:
                    unit = counts_as(item.caption)
                    if unit is not None:
                        out[unit + "s"] += 1
            elif rec.media.value.items and all(it.filename.endswith(_IMAGE_FILES) for it in rec.media.value.items):
                out["images"] += len(rec.media.value.items)
            else:
                out["histograms"] += 1
    return out


_IMAGE_FILES = (".png", ".jpg", ".jpeg")  # what swanlab.Image items are named (histograms are echarts JSON)
