"""Read what a framework integration wrote, straight from the run's Parquet parts (pyarrow only)."""

from __future__ import annotations

import json
from pathlib import Path

from trackstore.read import listing
from trackstore.store.layout import RunPaths


def only_run(root: Path, project: str | None = None) -> listing.RunInfo:
    runs = listing.list_runs(root, project=project)
    assert len(runs) == 1, [(r.project, r.run_id, r.name) for r in runs]
    return runs[0]


def rows(info_or_paths, kind: str) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths: RunPaths = getattr(info_or_paths, "paths", info_or_paths)
    parts = paths.parts(kind)
    if not parts:
        return []
    tables = [pq.read_table(p) for p in parts]
    out = pa.concat_tables(tables, promote_options="default").to_pylist()
    return sorted(out, key=lambda r: (r["writer"], r["seq"]))


def metrics(info) -> list[tuple[int, str, float]]:
    return sorted((r["step"], r["key"], r["value"]) for r in rows(info, "metrics"))


def spans(info) -> list[dict]:
    from trackstore.records.trace import latest_rows

    out = latest_rows(rows(info, "spans"))
    for r in out:
        for f in ("inputs", "outputs", "attributes"):
            r[f] = json.loads(r[f]) if r[f] is not None else None
    return out


def checkpoints(info) -> tuple[list, dict[str, int]]:
    """The run's artifact versions (from their manifests) and who holds each alias now (the
    store's own ``artifact_aliases`` view)."""
    import trackstore
    from trackstore.records.artifacts import list_versions

    con = trackstore.connect(info.paths.root)
    holders = dict(con.execute("SELECT alias, version FROM artifact_aliases WHERE run_id = $r",
                               {"r": info.run_id}).fetchall())
    return list_versions(info.paths.dir), holders
