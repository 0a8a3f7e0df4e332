"""``trackstore ingest``: bring runs in from wandb offline folders, SwanLab logdirs, MLflow
stores and TensorBoard event files (:mod:`trackstore.sync.ingest`).

Exit codes: 0 every run read whole and written (or, with --dry-run, planned); 2 bad options, an
unknown source or a SOURCE path that does not exist; 3 no run of that kind at a SOURCE; 6
another gc, compact, import or ingest holds the store's maintenance lock; 8 some runs failed,
or were read only in part (a damaged source: the message names the file), and the others were
written.
"""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from .common import Format, FormatOpt, NewRootOpt, Steps, console, emit, literal, one_line, plural

KIND_COLUMNS = ("metrics", "samples", "spans", "histograms")


def ingest(
    sources: Annotated[List[str], typer.Argument(
        metavar="SOURCE",
        help="Where the runs are: wandb: a wandb/ folder, offline-run-* folders or .wandb files; swanlab: a "
             "swanlog/ folder or run folders; mlflow: sqlite:///mlflow.db, an mlruns/ folder or http://host:port; "
             "tensorboard: a logdir (every folder with events.out.tfevents.* files is a run).")],
    source: Annotated[str, typer.Option("--from", metavar="wandb|swanlab|mlflow|tensorboard",
                                        help="The tool that wrote SOURCE.")] = ...,
    root: NewRootOpt = None,
    project: Annotated[Optional[str], typer.Option(
        "--project", "-p", help="Put every run into this project (default: the source's own project, MLflow "
                                "experiment, or 'tensorboard').")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Read the sources and print what would be added; "
                                                           "write nothing.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Read runs another tracker wrote and add each as a run of the store.

    Each source run becomes one run whose id is derived from the source's own id
    (wandb-<id>, swanlab-<id>, mlflow-<id>, tb-<folder>-<hash>), so ingesting again adds only
    what is new, and a run that grew since brings just its new points. Steps and original
    timestamps are kept; config, summary, tags, notes, status and times go into run.json, which
    also records where the run came from. What the store cannot hold yet (images, audio, video)
    is counted and shown, never dropped silently; a damaged source gives what is readable and
    names what was not. Then `trackstore sync --to ...` sends the runs anywhere.
    """
    from trackstore.errors import EXIT_PARTIAL
    from trackstore.sync import ingest as ingest_pkg

    ingest_pkg.source_module(source)  # an unknown --from fails before any SOURCE is looked at
    total: dict[str, int] = {}
    step_box: list[Steps] = []

    def on_found(found) -> None:
        sized = all(f.size > 0 for f in found)
        total["by_size"] = int(sized)
        step = Steps("ingest" + (" (dry run)" if dry_run else ""),
                     total=sum(f.size for f in found) if sized else len(found), quiet=fmt is not Format.table)
        step.__enter__()
        step_box.append(step)

    def progress(found, n: int) -> None:
        if step_box and total.get("by_size"):
            step_box[0](found.label, n)

    def on_result(result) -> None:
        if step_box and not total.get("by_size"):
            step_box[0](f"{result.project}/{result.run_id}")

    try:
        report = ingest_pkg.ingest(source, sources, root=root, project=project, dry_run=dry_run,
                                   on_found=on_found, progress=progress, on_result=on_result)
    finally:
        if step_box:
            step_box[0].__exit__(None, None, None)
    rows = []
    for r in report.results:
        if r.dry_run:
            action = "would create" if r.created else "would add" if any(r.added.values()) else "nothing new"
        else:
            action = "created" if r.created else "added" if r.changed else "unchanged"
        rows.append({
            "project": r.project, "run_id": r.run_id, "action": action,
            **{k: r.added.get(k, 0) for k in KIND_COLUMNS},
            "artifacts": r.artifacts_added,
            "not_mapped": ", ".join(f"{k} {n}" for k, n in sorted(r.unmapped.items())) or None,
            "problems": len(r.problems) or None,
        })
    err = console(stderr=True)
    if fmt is Format.table:
        title = (f"{'would ingest' if dry_run else 'ingested'} {plural(len(report.results), 'run')} from {source}"
                 + (f", {len(report.failed)} failed" if report.failed else ""))
        emit(rows, fmt, title=title, labels={"not_mapped": "not mapped"})
    else:
        emit(rows, fmt, columns=["project", "run_id", "action", *KIND_COLUMNS, "artifacts", "not_mapped", "problems"])
    for r in report.results:
        for p in r.problems:
            err.print(literal(f"{r.project}/{r.run_id}: {one_line(p, 300)}"))
        if r.unmapped and fmt is Format.table:
            err.print(literal(f"{r.project}/{r.run_id}: not mapped (the store has no such kind yet): "
                              + ", ".join(f"{n} {k}" for k, n in sorted(r.unmapped.items()))))
    for found, why in report.failed:
        err.print(literal(f"failed: {found.label} ({found.location}): {one_line(why, 300)}"))
    if not report.complete:
        raise typer.Exit(EXIT_PARTIAL)
