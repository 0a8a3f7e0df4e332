"""The hostile-input checks of an import: what a bundle may carry at all.

Promises: :func:`check_member` refuses a tar member that is not a regular file or folder
(symlinks, hard links, devices, FIFOs), has an absolute or unsafe path or ``..``, lies outside
``trackstore-bundle/``, or is not where a run file, a sync cursor or the manifest belongs (with
valid project and run names). :func:`refuse_foreign_or_broken_run` refuses a staged run whose
run.json names another run or one of whose ``.parquet`` files is not a readable part of its
kind; :func:`refuse_repeated_ids` one that holds a row id twice; :func:`refuse_bad_media` one
with a file under ``media/`` that is not named by its content's sha256. Each refusal is a
:class:`~trackstore.errors.BundleError` saying nothing was imported.
"""

from __future__ import annotations

import tarfile
from pathlib import PurePosixPath

from ...errors import BundleError, InvalidNameError
from ...store.atomic import read_json
from ...store.layout import (
    DESTINATION_FILE,
    PROJECT_PREFIX,
    RUN_PREFIX,
    RunPaths,
)
from ...store.names import validate_project, validate_run_id
from .manifest import MANIFEST, TOP
from .row_ids import repeated_row_ids


def check_member(m: tarfile.TarInfo) -> str:
    """The member's path relative to ``trackstore-bundle/``, or BundleError if it is unsafe."""
    name = m.name
    if not (m.isreg() or m.isdir()):
        what = ("a symlink" if m.issym() else "a hard link" if m.islnk() else
                "a device file" if (m.ischr() or m.isblk()) else "a FIFO" if m.isfifo() else "not a regular file")
        raise BundleError(f"refusing bundle: member {name!r} is {what}; nothing was imported")
    if name.startswith("/") or "\\" in name or any(ord(ch) < 32 for ch in name):
        raise BundleError(f"refusing bundle: member {name!r} has an absolute or unsafe path; nothing was imported")
    parts = PurePosixPath(name).parts
    if any(p in ("..", ".") for p in parts) or ".." in name.split("/"):
        raise BundleError(f"refusing bundle: member {name!r} contains '..'; nothing was imported")
    if not parts or parts[0] != TOP:
        raise BundleError(f"refusing bundle: member {name!r} is outside {TOP}/; nothing was imported")
    rel = "/".join(parts[1:])
    if m.isdir() or not rel:
        return rel
    head = parts[1] if len(parts) > 1 else ""
    try:
        if head == "runs":
            if len(parts) < 5 or not parts[2].startswith(PROJECT_PREFIX) or not parts[3].startswith(RUN_PREFIX):
                raise BundleError(f"refusing bundle: member {name!r} is not inside a run folder")
            validate_project(parts[2][len(PROJECT_PREFIX):])
            validate_run_id(parts[3][len(RUN_PREFIX):])
        elif head == "sync":
            if len(parts) == 4 and parts[3] == DESTINATION_FILE:
                pass
            elif (len(parts) == 5 and parts[3].startswith(PROJECT_PREFIX) and parts[4].startswith(RUN_PREFIX)
                  and parts[4].endswith(".json")):
                validate_project(parts[3][len(PROJECT_PREFIX):])
                validate_run_id(parts[4][len(RUN_PREFIX):-len(".json")])
            else:
                raise BundleError(f"refusing bundle: unexpected sync member {name!r}")
            if parts[2].startswith((".", "_")):
                raise BundleError(f"refusing bundle: unexpected sync member {name!r}")
        elif rel != MANIFEST:
            raise BundleError(f"refusing bundle: unexpected member {name!r}")
    except InvalidNameError as exc:
        raise BundleError(f"refusing bundle: member {name!r}: {exc}") from exc
    return rel


def refuse_foreign_or_broken_run(staged: RunPaths) -> None:
    """Refuse a bundled run whose run.json names another run, or one of whose part files is not
    a readable Parquet part of its kind: importing either would plant a run that readers
    attribute to the wrong run, or that every query over the store fails on."""
    from ...store.parts import check_part, find_unreadable, schema_problem
    from ...store.schema import KINDS

    where = f"run {staged.project}/{staged.run_id}"
    try:
        meta = read_json(staged.run_file)
    except (OSError, ValueError) as exc:
        raise BundleError(f"refusing bundle: {where}: its run.json is not valid JSON ({exc}); "
                          "nothing was imported") from None
    if not isinstance(meta, dict):
        raise BundleError(f"refusing bundle: {where}: its run.json is not a JSON object; nothing was imported")
    named = (meta.get("project"), meta.get("run_id"))
    if named != (staged.project, staged.run_id):
        raise BundleError(f"refusing bundle: {where}: its run.json names another run "
                          f"(project {named[0]!r}, run id {named[1]!r}); nothing was imported")
    import pyarrow.parquet as pq

    for kind in KINDS:
        kind_dir = staged.kind_dir(kind)
        if not kind_dir.is_dir():
            continue
        for part in sorted(kind_dir.glob("*.parquet")):
            path = str(part)
            problem = check_part(path) or find_unreadable([path]).get(path)
            if problem is None:
                try:
                    problem = schema_problem(pq.read_schema(path), kind)
                except Exception as exc:
                    problem = f"unreadable schema ({exc})"
            if problem is not None:
                rel = part.relative_to(staged.root.parent).as_posix()  # as the manifest lists it
                raise BundleError(f"refusing bundle: {where}: {rel} is not a valid {kind} part "
                                  f"({' '.join(problem.split())}); nothing was imported")


def refuse_repeated_ids(staged: RunPaths) -> None:
    """Refuse a bundled run whose files hold one row id twice (see :func:`repeated_row_ids`)."""
    from ...store.schema import KINDS

    for kind in KINDS:
        rep = repeated_row_ids(staged.parts(kind), kind)
        if rep:
            raise BundleError(f"refusing bundle: run {staged.project}/{staged.run_id} repeats row ids: "
                              f"{rep.describe()}; nothing was imported")



def refuse_bad_media(staged: RunPaths) -> None:
    """Refuse a bundled run with a file under ``media/`` whose name is not a media file name, or
    whose content's sha256 is not the one its name says (:func:`trackstore.store.media.check_media_file`):
    an image is what its rows' ``sha256`` promise, or nothing is imported."""
    from ...store.layout import MEDIA_DIR
    from ...store.media import check_media_file

    media = staged.dir / MEDIA_DIR
    if not media.is_dir():
        return
    for p in sorted(media.rglob("*")):
        if p.is_dir():
            continue
        rel = p.relative_to(staged.dir).as_posix()
        problem = check_media_file(p, rel)
        if problem is not None:
            raise BundleError(f"refusing bundle: run {staged.project}/{staged.run_id}: {problem}; nothing was imported")
