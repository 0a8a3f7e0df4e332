"""Samples and histograms in MLflow's own forms (translation only; the adapter sends).

* samples -> MLflow tables: one JSON file in MLflow's table layout (``columns``/``data``, as
  ``MlflowClient.log_table`` writes it) per (split, step, batch), listed in the run tag
  ``mlflow.loggedArtifacts`` as ``log_table`` does, so the experiment's *Evaluation* view and the
  artifact viewer show them as tables. Columns are what the user logged: ``sample_index``,
  ``input``, ``output``, ``score``, ``step``, then every extra field as its own column. The order
  is for the Evaluation view (the experiment's *Runs* page, the table icon), which groups rows
  by the first column and compares the ``output`` column across runs: grouped by
  ``sample_index``, every sample of the step is its own row (grouped by ``input``, samples of one
  prompt would share a row and only the first would show).
  A chat (a list of ``{role, content}`` messages) is shown as ``role: content`` lines, any other
  structured value as JSON text; trackstore's own ``ts``/``seq``/``writer``/``json_fields`` are
  left out. A table is named by its step (``step_000000200.json``, and ``step_000000200_2.json``
  for a second table of one step), the names kept in the cursor so a resend overwrites
  (:func:`table_name`); without that record (a lost cursor) the step's tables at the target are
  read and the rows they hold are left out (:func:`sample_tables`).
* histograms -> one bar chart image per (key, step) in MLflow's step-image layout
  (``images/<key>+step+<step>+timestamp+<ms>+<id>.png`` and a ``+compressed.webp``, with the
  run tag ``mlflow.loggedImages``, as ``MlflowClient.log_image(key=..., step=...)`` writes it),
  so the run's *Model metrics* charts draw each histogram with a step slider. ``<id>`` is derived
  from the row's ``(writer, seq)`` (``log_image`` uses a random one): a resend overwrites. The
  exact counts and edges are kept beside them as JSON tables under ``trackstore/histograms/``.

MLflow keeps tag values of at most 8000 characters: a run with more sample tables than fit in
``mlflow.loggedArtifacts`` keeps the files (in Artifacts) but the Evaluation view lists the first
ones only; :func:`listed_tables` says how many did not fit.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any, Callable, Collection

from trackstore.records.samples import decode_row
from trackstore.store.vocab import Kind

from .keys import mlflow_key

LOGGED_ARTIFACTS = "mlflow.loggedArtifacts"
LOGGED_IMAGES = "mlflow.loggedImages"
TABLES = "tables"  # cursor.remote: the sample tables' first rows per split and step (table_name)
# cursor.remote: the record of names began when the run already had sample tables (a lost
# cursor, a run an earlier trackstore sent): every batch is checked against the tables there
PARTIAL = "tables_partial"
SAMPLES_FOLDER = "trackstore/samples"
MAX_TAG_VALUE = 8000
_INTERNAL = ("ts", "seq", "writer", "json_fields", "split")
_IMAGE_KEY_OK = re.compile(r"[a-zA-Z0-9_\-./ ]+")
_NS = uuid.UUID("6f1e3a52-5d0c-4a4e-9b1e-7472616b7374")


def cell(value: Any) -> Any:
    """A table cell as the UI shows it well: text and numbers as they are, a chat as lines."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else (("Infinity" if value > 0 else "-Infinity") if math.isinf(value) else value)
    if isinstance(value, list) and value and all(isinstance(m, dict) and "content" in m for m in value):
        return "\n".join(f"{m.get('role', '?')}: {m['content'] if isinstance(m['content'], str) else json.dumps(m['content'], ensure_ascii=False, default=str)}"
                         for m in value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return json.dumps(value, ensure_ascii=False, default=str)


def sample_tables(rows, given: dict | None = None, existing: Callable[[str], Collection[str]] | None = None,
                  read: Callable[[str], dict] | None = None) -> dict[str, dict]:
    """``{artifact path: {"columns": [...], "data": [[...], ...]}}`` for a batch of sample rows,
    one table per (split, step), named by :func:`table_name`.

    ``existing`` and ``read`` (list a folder of the remote run, read one of its tables) are given
    while the cursor's record of names does not cover the run (:data:`PARTIAL`: it began after a
    lost cursor, or on a run an earlier trackstore sent): batches are then cut anew and may group a step's rows otherwise than the
    tables already there, so the rows those tables hold are left out (:func:`_not_held`) and
    what remains becomes the step's next table: every sample is in its step's tables once."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows.to_pylist():
        groups.setdefault((str(r.get("split") or "val"), int(r.get("step") or 0)), []).append(r)
    given = {} if given is None else given
    out = {}
    for (split, step), rs in groups.items():
        decoded = [decode_row(r) for r in rs]
        columns = ["sample_index", "input", "output", "score", "step"]
        for d in decoded:
            for k in d:
                if k not in columns and k not in _INTERNAL:
                    columns.append(k)
        data = [[cell(d.get(c)) for c in columns] for d in decoded]
        if existing is not None and read is not None:
            keep = _not_held(split, step, columns, data, given, existing, read)
            rs, data = [r for r, k in zip(rs, keep) if k], [row for row, k in zip(data, keep) if k]
            if not rs:
                continue
        out[table_name(split, step, rs[0], given, existing)] = {"columns": columns, "data": data}
    return out


def _table_folder(split: str) -> str:
    return f"{SAMPLES_FOLDER}/{mlflow_key(split)}"


_IDENTITY = ("sample_index", "input", "output", "score")  # what tells two samples of a step apart


def _not_held(split: str, step: int, columns: list[str], data: list[list], given: dict,
              existing: Callable[[str], Collection[str]], read: Callable[[str], dict]) -> list[bool]:
    """Per row of ``data``: True when no table of ``(split, step)`` at the target holds it yet
    (compared on the identity columns both have). The step's numbered tables are entered in
    ``given`` first, so a new table takes the number after the last one there."""
    folder = _table_folder(split)
    prefix = f"{folder}/step_{step:09d}"
    mine = re.compile(re.escape(prefix) + r"(?:_(\d+))?\.json")
    there = [n for n in sorted(existing(folder)) if n == f"{prefix}.json" or (n.startswith(f"{prefix}_") and n.endswith(".json"))]
    numbers = [int(m.group(1) or 1) for n in there if (m := mine.fullmatch(n))]
    firsts = given.setdefault(split, {}).setdefault(str(step), [])
    while len(firsts) < max(numbers, default=0):
        firsts.append(f"held:{len(firsts) + 1}")  # a table at the target this record did not name
    held: list[tuple[list[int], set[tuple]]] = []
    for name in there:
        table = read(name)
        cols = list(table.get("columns") or [])
        shared = [c for c in _IDENTITY if c in cols and c in columns]
        if shared:
            at = [cols.index(c) for c in shared]
            held.append(([columns.index(c) for c in shared],
                         {tuple(json.dumps(row[i], sort_keys=True) for i in at) for row in table.get("data") or []}))
    return [not any(tuple(json.dumps(row[i], sort_keys=True) for i in mine_at) in rows for mine_at, rows in held)
            for row in data]


def table_name(split: str, step: int, first: dict, given: dict, existing: Callable[[str], Collection[str]] | None = None) -> str:
    """The artifact path of the sample table of ``(split, step)`` whose first row is ``first``.

    ``trackstore/samples/<split>/step_<step>.json``, and ``step_<step>_<n>.json`` for the n-th
    table of a step that got rows in several batches (samples logged at that step after it was
    synced). ``given`` (the cursor's record, extended in place) holds, per split and step, the
    first row ``(writer, seq)`` of each table in the order they were named: a resent batch
    starts with the same row, so it gets the same name and overwrites, and a batch whose send
    was in doubt (its record lost with it) gets the same next number again. ``existing(folder)``
    lists the files of a split's folder, asked only for a run this record does not cover yet:
    a table an earlier trackstore named after its first row
    (``step_<step>_<writer>_<seq>.json``) keeps that name, never written twice."""
    folder = _table_folder(split)
    firsts = given.setdefault(split, {}).setdefault(str(step), [])
    key = f"{first['writer']}:{first['seq']}"
    if key not in firsts:
        older = f"{folder}/step_{step:09d}_{first['writer']}_{first['seq']:012d}.json"
        if existing is not None and older in existing(folder):
            return older
        firsts.append(key)
    n = firsts.index(key) + 1
    return f"{folder}/step_{step:09d}.json" if n == 1 else f"{folder}/step_{step:09d}_{n}.json"


def histogram_tables(rows) -> dict[str, dict]:
    """The exact histograms as JSON tables, one file per (key, step, batch)."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows.to_pylist():
        groups.setdefault((r["key"], int(r.get("step") or 0)), []).append(r)
    out = {}
    cols = ["key", "step", "counts", "edges"]
    for (key, step), rs in groups.items():
        first = rs[0]
        name = f"trackstore/histograms/{mlflow_key(key)}/step_{step:09d}_{first['writer']}_{first['seq']:012d}.json"
        out[name] = {"columns": cols, "data": [[r["key"], r["step"], [cell(c) for c in r["counts"]],
                                                [cell(e) for e in r["edges"]]] for r in rs]}
    return out


def image_key(key: str) -> str:
    """A key ``log_image`` accepts (``[a-zA-Z0-9_-./ ]``), distinct per histogram key."""
    k = mlflow_key(key)
    if _IMAGE_KEY_OK.fullmatch(k):
        return k
    import hashlib

    return re.sub(r"[^a-zA-Z0-9_\-./ ]", "_", k)[:200] + "__" + hashlib.sha1(key.encode()).hexdigest()[:8]


def histogram_images(rows, folder) -> list[tuple[str, str]]:
    """Render each histogram row as a bar chart in ``folder``; returns ``(local file, artifact
    dir)`` pairs in MLflow's step-image layout (both the PNG and the compressed WebP)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    files = []
    for r in rows.to_pylist():
        counts = [c if isinstance(c, (int, float)) and math.isfinite(c) else 0 for c in r["counts"]]
        edges = list(r["edges"])
        fig, ax = plt.subplots(figsize=(4, 3), dpi=80)
        widths = [edges[i + 1] - edges[i] for i in range(len(counts))]
        if all(math.isfinite(w) for w in widths) and all(math.isfinite(e) for e in edges):
            ax.bar(edges[:-1], counts, width=widths, align="edge", edgecolor="white")
        else:
            ax.bar(range(len(counts)), counts)
        ax.set_title(f"{r['key']}  step {r['step']}", fontsize=9)
        fig.tight_layout()
        ms = int(r["ts"].timestamp() * 1000)
        ident = uuid.uuid5(_NS, f"{r['writer']}\0{r['seq']}")
        base = f"{image_key(r['key']).replace('/', '~')}+step+{int(r['step'])}+timestamp+{ms}+{ident}"
        png = folder / f"{base}.png"
        fig.savefig(png)
        plt.close(fig)
        with Image.open(png) as im:
            small = im.convert("RGB")
            small.thumbnail((200, 200))
            small.save(folder / f"{base}+compressed.webp")
        files += [(str(png), "images"), (str(folder / f"{base}+compressed.webp"), "images")]
    return files


def listed_tables(current: str | None, paths: list[str]) -> tuple[str | None, int]:
    """The new value of ``mlflow.loggedArtifacts`` with ``paths`` listed as tables (None if
    unchanged), and how many of them did not fit MLflow's tag value limit."""
    try:
        have = json.loads(current or "[]")
        if not isinstance(have, list):
            have = []
    except ValueError:
        have = []
    changed, left_out = False, 0
    for p in paths:
        entry = {"path": p, "type": "table"}
        if entry in have:
            continue
        if len(json.dumps(have + [entry])) > MAX_TAG_VALUE:
            left_out += 1
            continue
        have.append(entry)
        changed = True
    return (json.dumps(have) if changed else None), left_out


def send_records(adapter, rid: str, kind: str, rows, cursor):
    """Log a batch of samples or histograms (``adapter.call`` wraps each client call); the
    sample tables' names are recorded in ``cursor.remote["tables"]`` (:func:`table_name`)."""
    import tempfile
    from functools import cache
    from pathlib import Path

    from .adapter import SendResult

    result = SendResult()
    client = adapter.client
    if kind == Kind.SAMPLES:
        @cache
        def existing(folder: str) -> frozenset[str]:
            return frozenset(f.path for f in adapter.call("list sample tables", client.list_artifacts, rid, folder))

        def read(path: str) -> dict:
            with tempfile.TemporaryDirectory(prefix="trackstore-table-") as tmp:
                local = adapter.call("read a sample table", client.download_artifacts, rid, path, tmp)
                return json.loads(Path(local).read_text(encoding="utf-8"))

        if TABLES not in cursor.remote:  # the record begins: were tables there before it?
            cursor.remote[TABLES] = {}
            if adapter.call("list sample tables", client.list_artifacts, rid, SAMPLES_FOLDER):
                cursor.remote[PARTIAL] = True
        partial = bool(cursor.remote.get(PARTIAL))
        tables = sample_tables(rows, cursor.remote[TABLES], existing if partial else None, read if partial else None)
    else:
        tables = histogram_tables(rows)
    for path, table in tables.items():
        adapter.call(f"log {kind}", client.log_dict, rid, table, path)
    if kind == Kind.SAMPLES:
        run = adapter.call("get run", client.get_run, rid)
        value, left_out = listed_tables(run.data.tags.get(LOGGED_ARTIFACTS), list(tables))
        if value is not None:
            adapter.call("list tables", client.set_tag, rid, LOGGED_ARTIFACTS, value)
        if left_out:
            result.skipped[f"{left_out} sample tables kept in Artifacts but not listed in MLflow's Evaluation view "
                           f"(its tag holds {MAX_TAG_VALUE} characters)"] = 0
        return result
    with tempfile.TemporaryDirectory(prefix="trackstore-hist-") as tmp:
        for local, art_dir in histogram_images(rows, Path(tmp)):
            adapter.call("log histogram image", client.log_artifact, rid, local, art_dir)
    adapter.call("mark images", client.set_tag, rid, LOGGED_IMAGES, "True")
    return result


# ---------------------------------------------------------------------- images (the images kind)
IMAGES_FOLDER = "trackstore/images"  # the stored files, byte for byte, named by their sha256


def step_image_files(rows, run_dir, folder) -> tuple[list[tuple[str, str]], list[dict]]:
    """Each image row as MLflow's step-image layout (what ``MlflowClient.log_image(key=, step=)``
    writes: ``images/<key>+step+<step>+timestamp+<ms>+<id>.png`` and a ``+compressed.webp``), with
    ``<id>`` derived from the row's ``(writer, seq)`` so a resend overwrites, and the stored file
    itself under ``trackstore/images/``. A PNG goes as it is; a JPEG is re-encoded as PNG, as
    ``log_image`` re-encodes everything. Returns ``(local file, artifact dir)`` pairs and the
    rows whose file is not in the store."""
    import shutil

    from PIL import Image

    from .adapter import image_file

    files, missing = [], []
    for r in rows.to_pylist():
        src = image_file(run_dir, r)
        if src is None:
            missing.append(r)
            continue
        ms = int(r["ts"].timestamp() * 1000)
        ident = uuid.uuid5(_NS, f"image\0{r['writer']}\0{r['seq']}")
        base = f"{image_key(r['key']).replace('/', '~')}+step+{int(r['step'])}+timestamp+{ms}+{ident}"
        png = folder / f"{base}.png"
        with Image.open(src) as im:
            if r["format"] == "png":
                shutil.copyfile(src, png)
            else:
                im.save(png, format="PNG")
            small = im.convert("RGBA" if "A" in im.mode else "RGB")
            small.thumbnail((200, 200))
            small.save(folder / f"{base}+compressed.webp")
        files += [(str(png), "images"), (str(folder / f"{base}+compressed.webp"), "images"),
                  (str(src), IMAGES_FOLDER)]
    return files, missing
