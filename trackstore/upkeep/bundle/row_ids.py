"""Row ids ``(writer, seq)`` held by more than one row of a run's files of one kind.

Promises: :func:`repeated_row_ids` finds them reading only the two id columns (an unreadable
part is left out), and says how many and where the first few are (:class:`RepeatedIds`).
Import refuses such a run; ``doctor --deep`` reports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass
class RepeatedIds:
    """Row ids ``(writer, seq)`` that more than one row of one kind of a run holds."""

    kind: str
    count: int                                  # ids held by two rows or more
    examples: list[tuple[str, int, list[str]]]  # (writer, seq, files holding it) for the first few

    def describe(self) -> str:
        shown = "; ".join(f"writer {w} seq {s} in {', '.join(files)}" for w, s, files in self.examples)
        return f"{self.count} {self.kind} row ids (writer, seq) are held by more than one row, e.g. {shown}"


def repeated_row_ids(parts: Sequence[Path], kind: str, *, examples: int = 3) -> RepeatedIds | None:
    """The ``(writer, seq)`` ids held by more than one row of ``parts`` (a run's files of ``kind``).

    Every row keeps its id for ever (compaction and import included), so a repeat is damage or a
    crafted run, and queries and sync would count those rows twice: import refuses such a run
    and ``doctor --deep`` reports it. Reads only the two id columns (a part they cannot be read
    from is left out: no query reads it either, and doctor reports it as damaged). Per writer,
    ids in increasing order across its files (a live run's parts) are seen in one pass; others
    (a compacted part is ordered by key) are counted in one pass over their dense seq range.
    """
    by_writer: dict[str, list[tuple[Any, int]]] = {}
    for i, path in enumerate(parts):
        for writer, seqs in _ids_by_writer(path):
            by_writer.setdefault(writer, []).append((seqs, i))
    count = 0
    found: list[tuple[str, int, list[str]]] = []
    for writer, chunks in by_writer.items():
        repeated = _repeated([seqs for seqs, _i in chunks])
        count += len(repeated)
        for seq in repeated[: max(0, examples - len(found))].tolist():
            files = sorted({parts[i].name for seqs, i in chunks if (seqs == seq).any()})
            found.append((writer, seq, files))
    return RepeatedIds(kind, count, found) if count else None


def _ids_by_writer(path: Path) -> list[tuple[str, Any]]:
    """``[(writer, seqs as a numpy array), ...]`` of one part file (none if it cannot be read)."""
    import numpy as np
    import pyarrow.parquet as pq

    try:  # writer ids as stored: dictionary-encoded, no hashing of strings
        table = pq.ParquetFile(path, read_dictionary=["writer"]).read(columns=["writer", "seq"])
    except Exception:  # unreadable, or gone (a compaction swapped the folder): no query reads it
        return []
    writers = table.column("writer").unify_dictionaries().combine_chunks()
    seqs = np.asarray(table.column("seq").to_numpy(), dtype=np.int64)
    names = writers.dictionary.to_pylist()
    if len(names) == 1:
        return [(names[0], seqs)]
    codes = writers.indices.to_numpy(zero_copy_only=False)
    return [(w, seqs[codes == c]) for c, w in enumerate(names)]


def _repeated(chunks: list[Any]) -> Any:
    """The values occurring more than once in the numpy arrays ``chunks`` (sorted)."""
    import numpy as np

    chunks = sorted((c for c in chunks if len(c)), key=lambda c: c[0])
    if all(len(c) < 2 or bool(np.all(c[1:] > c[:-1])) for c in chunks) and all(
            a[-1] < b[0] for a, b in zip(chunks, chunks[1:])):
        return np.empty(0, np.int64)  # increasing across the files: no repeats
    seqs = np.concatenate(chunks)
    lo = int(seqs.min())
    if int(seqs.max()) - lo <= 4 * len(seqs) + (1 << 20):  # seqs are dense from 0: count each
        return np.flatnonzero(np.bincount(seqs - lo) > 1) + lo
    ordered = np.sort(seqs)
    return np.unique(ordered[1:][ordered[1:] == ordered[:-1]])

