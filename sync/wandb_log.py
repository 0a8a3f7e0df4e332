"""Reading wandb's run transaction log (``run-<id>.wandb``) back, incrementally.

Why: the wandb client hands records to its ``wandb-core`` process, which buffers them and
writes the log every ``x_transaction_log_flush_interval`` seconds; ``run.log`` returning proves
nothing (a SIGKILL loses what is still buffered). The wandb target therefore acknowledges a
batch only once the batch's marker record is *in this file*, and an interrupted batch is
reconciled against what the files hold. wandb 0.31 ships no Python reader (``wandb leet
inspect`` is Go), so this module reads the framing itself and parses each record with wandb's
own protobuf class (``wandb.proto.wandb_internal_pb2.Record``).

Framing (LevelDB log format, as wandb writes it): a 7-byte header ``:W&B`` + magic ``0xBEE1``
+ version ``0``; then 32 KiB blocks of chunks ``crc32(type+data) u32 | length u16 | type u8 |
data``, type FULL=1, FIRST=2, MIDDLE=3, LAST=4; a block tail shorter than a chunk header is
zero padding. A torn tail (a chunk cut short or failing its CRC) ends the readable part: the
reader stops there and resumes from the last complete record on the next call.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

HEADER = b":W&B" + struct.pack("<H", 0xBEE1) + b"\x00"
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class LogReader:
    """Reads complete records appended to one ``.wandb`` file since the previous call."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.pos = 0  # offset just after the last complete record returned

    def records(self) -> Iterator[Any]:
        """New complete records (``wandb_internal_pb2.Record``), in file order."""
        from wandb.proto import wandb_internal_pb2 as pb

        try:
            with open(self.path, "rb") as f:
                if self.pos == 0:
                    head = f.read(len(HEADER))
                    if len(head) < len(HEADER) or head[:4] != HEADER[:4]:
                        return
                    self.pos = len(HEADER)
                base = self.pos  # only the part after the last complete record is read again
                f.seek(base)
                data = f.read()
        except FileNotFoundError:
            return
        pos = base  # absolute offsets: blocks are aligned to the start of the file
        parts: list[bytes] = []
        while True:
            left = BLOCK - pos % BLOCK
            if left < CHUNK_HEADER:  # zero padding at a block's end
                pos += left
                continue
            i = pos - base
            if i + CHUNK_HEADER > len(data):
                return
            crc, length, kind = struct.unpack_from("<IHB", data, i)
            end = i + CHUNK_HEADER + length
            if kind == 0 and length == 0 or end > len(data):
                return  # not written yet (or torn): stop at the last complete record
            chunk = data[i + CHUNK_HEADER:end]
            if zlib.crc32(bytes([kind]) + chunk) != crc:
                return
            pos = base + end
            if kind == FULL:
                parts = [chunk]
            elif kind == FIRST:
                parts = [chunk]
                continue
            elif kind == MIDDLE:
                parts.append(chunk)
                continue
            elif kind == LAST:
                parts.append(chunk)
            rec = pb.Record()
            rec.ParseFromString(b"".join(parts))
            parts = []
            self.pos = pos
            yield rec


def _item_key(item) -> str:
    # wandb-core writes ``nested_key`` (one element per level of a nested dict), older ones ``key``
    return ".".join(item.nested_key) if item.nested_key else item.key


def _put(row: dict, item) -> None:
    """Rebuild nested values: a histogram arrives as items ``h._type``, ``h.values``, ``h.bins``."""
    path = list(item.nested_key) or [item.key]
    node = row
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = json.loads(item.value_json)


@dataclass
class LogContents:
    """What the transaction logs of one wandb run hold, as the wandb target needs it."""

    history: dict[int, dict[str, Any]] = field(default_factory=dict)  # step -> {key: value}
    markers: set[str] = field(default_factory=set)  # trackstore batch ids seen in summaries
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    artifacts: list[dict] = field(default_factory=list)  # {name, type, digest, metadata, aliases}
    tables: dict[tuple[int, str], Path] = field(default_factory=dict)  # (step, key) -> local table file

    @property
    def last_step(self) -> int:
        return max(self.history, default=-1)

    def add(self, rec, marker_key: str, folder: Path | None = None) -> None:
        """Take one record of the transaction log in the run folder ``folder``."""
        what = rec.WhichOneof("record_type")
        if what == "history":
            row: dict[str, Any] = {}
            for i in rec.history.item:
                _put(row, i)
            step = rec.history.step.num if rec.history.HasField("step") else int(row.get("_step", 0))
            self.history.setdefault(step, {}).update(row)
            if folder is not None:
                for key, value in row.items():
                    if isinstance(value, dict) and value.get("_type") == "table-file" and value.get("path"):
                        self.tables[(step, key)] = folder / "files" / value["path"]
        elif what == "summary":
            for i in rec.summary.update:
                _put(self.summary, i)
                if _item_key(i) == marker_key:
                    self.markers.add(json.loads(i.value_json))
            for i in rec.summary.remove:
                self.summary.pop(_item_key(i), None)
        elif what == "config":
            for i in rec.config.update:
                _put(self.config, i)
        elif what == "exit":
            self.exit_code = rec.exit.exit_code
        elif what == "artifact":
            a = rec.artifact
            self.artifacts.append({"name": a.name, "type": a.type, "digest": a.digest, "aliases": list(a.aliases),
                                   "metadata": json.loads(a.metadata) if a.metadata else {}})


def read_logs(paths, marker_key: str) -> LogContents:
    """Merge the records of several ``.wandb`` files of one run (in the order given)."""
    out = LogContents()
    for p in paths:
        for rec in LogReader(Path(p)).records():
            out.add(rec, marker_key, Path(p).parent)
    return out
