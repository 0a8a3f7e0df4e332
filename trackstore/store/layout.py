"""Where everything lives on disk. The one place that derives store paths and file names.

::

    <root>/project=<project>/run=<run_id>/
        run.json                      run metadata, rewritten atomically
        _writers/<writer_id>.json     one heartbeat file per writing process
        _writers/<id>.claim           a process about to join the run (trackstore.store.locks)
        metrics/part-<writer_id>-<first_seq>.parquet              as flushed
        metrics/part-<writer_id>-<first_seq>-<last_seq>.parquet   as merged
        samples/ spans/ histograms/   same naming
        artifacts/<name>/v<version>/  files; their manifest rows live in artifacts/_manifest/
        .compact-<kind>-<token>/      a kind folder being merged and swapped (trackstore.store.merge)
    <root>/_sync/                     per-destination sync state (owned by trackstore.sync)
    <root>/_sync/_gc/                 cursors of runs gc deleted
    <root>/_locks/<name>.lock         cross-process locks (trackstore.store.locks)
    <root>/_trash/                    runs being deleted by gc (invisible to queries)
    <root>/_quarantine/               damaged files moved aside by doctor
    <root>/_import/                   bundles being imported
    <root>/_mlflow/ _wandb/ _swanlab/ the sync targets' own local files, when no other place is given

Temp files (``.<name>.<token>.tmp``, :mod:`trackstore.store.atomic`) never match a reader's
glob. A kind folder may be swapped for a new one by a merge at any moment: :func:`relist` is
the one policy for listing and reading one that stays consistent across such a swap.

The root is ``root=`` / ``--root``, else ``$TRACKSTORE_DIR``, else ``./tsruns`` in the
current working directory (like ``wandb/`` or ``mlruns/``). Writing runs creates it; reading
(``resolve_root(..., must_exist=True)``: ``connect()`` and every CLI command but ``demo``,
``run`` and ``import``) requires a store there, so a mistyped path is an error, never an empty
store: a folder is a store when it is empty (hidden entries aside) or holds a ``project=*``
folder or one of trackstore's own ``_*`` folders (``_sync``, ``_locks``, ...). The error for a
missing root names the stores nearby (:func:`nearby_stores`).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from ..errors import UsageError
from .names import validate_project, validate_run_id
from .vocab import KINDS as KINDS  # re-exported: many modules take KINDS from the layout
from .vocab import Kind

ENV_ROOT = "TRACKSTORE_DIR"
# KINDS (trackstore.store.vocab): the record kinds, in the order of trackstore.store.schema.SCHEMAS
# (which checks it): each is a folder of part files in a run (artifacts: artifacts/_manifest/).
DEFAULT_ROOT = "tsruns"
RUN_FILE = "run.json"
WRITERS_DIR = "_writers"
SYNC_DIR = "_sync"
TRASH_DIR = "_trash"
QUARANTINE_DIR = "_quarantine"
PROJECT_PREFIX = "project="
RUN_PREFIX = "run="
PART_SUFFIX = ".parquet"
PART_PREFIX = "part-"
ARTIFACTS_DIR = "artifacts"
MANIFEST_DIR = "_manifest"  # artifacts/_manifest/: the artifact manifest's part files
ARTIFACT_MANIFEST = "manifest.json"  # artifacts/<name>/v<N>/manifest.json: one version's description
# a team store's root holds this file: it is a replica (docs/format.md section 12)
REPLICA_MARKER = "_replica.json"
REPLICA_FORMAT = "trackstore-replica"
REPLICA_VERSION = 1
# a replica's run.json: "replica" holds the source store, and this, the run's metric facts
# (catalog.part_records.MetricFacts.to_json): what a listing of the team store reads its alerts from
REPLICA_FACTS = "metric_facts"
# and this, its writers' final states (meta.WRITER_SUMMARY): the run page's status history
REPLICA_WRITERS = "writers"
MEDIA_DIR = "media"  # <run>/media/<sha256[:2]>/<sha256>.<ext>: image files, content-addressed (store.media)
ARTIFACT_FILES_DIR = "files"  # artifacts/<name>/v<N>/files/: its files
ARTIFACT_STAGING_PREFIX = ".staging-"  # artifacts/<name>/.staging-<writer>-<token>/: a version being written
ARTIFACT_LOCK = ".lock"  # artifacts/<name>/.lock: flock taken to number a new version
DESTINATION_FILE = "destination.json"  # <root>/_sync/<dest_id>/destination.json: what the destination is
ARCHIVE_DIR = "_gc"  # under <root>/_sync/: cursors of runs gc deleted
LOCKS_DIR = "_locks"
LOCK_SUFFIX = ".lock"
GUARD_SUFFIX = ".guard"
STALE_LOCK_MARK = ".stale-"  # .<name>.lock.stale-<token>: a stale lock moved aside while it is taken over
CLAIM_SUFFIX = ".claim"  # <run>/_writers/<id>.claim: a process about to join the run (not a writer file)
IMPORT_DIR = "_import"
TMP_SUFFIX = ".tmp"
MERGE_STAGING_PREFIX = ".compact-"  # <run>/.compact-<kind>-<token>/: a kind folder's next (or last) content
MERGE_MARKER = ".compact.json"  # written last into a complete staging folder

_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def resolve_root(root: str | os.PathLike | None = None, *, must_exist: bool = False,
                 source: str | None = None, option: str = "root=") -> Path:
    """The store root: explicit argument, then ``$TRACKSTORE_DIR``, then ``./tsruns``.

    With ``must_exist`` the root must be a store (:func:`check_store_root`); ``source`` names
    where the path came from in the error (``--root``; by default ``root=``, the variable or
    the default) and ``option`` how a caller names another root (``--root`` for the CLI).
    """
    origin = "root="
    if root is None or root == "":
        env = os.environ.get(ENV_ROOT)
        default = f"the default ./{DEFAULT_ROOT}, used when neither root nor ${ENV_ROOT} is set"
        root, origin = (env, f"${ENV_ROOT}") if env else (DEFAULT_ROOT, default)
    path = Path(root).expanduser().absolute()
    if must_exist:
        check_store_root(path, source or origin, option=option)
    return path


def store_root_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a store ("does not exist", ...), or None when it can."""
    others = []
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if e.name.startswith((PROJECT_PREFIX, "_")):
                    return None  # trackstore's own entries: a store
                if not e.name.startswith("."):
                    others.append(e.name)
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "is not a directory"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if others:
        return (f"is not a trackstore store: it holds {len(others)} other entries (e.g. {min(others)!r}) "
                f"and no {PROJECT_PREFIX}* or _* folder")
    return None  # empty: a new store


# the folders a store holds besides its projects: one of them (or a project=* folder) in a folder
# is evidence enough to suggest it as a store (an empty folder is a valid store, but no evidence)
STORE_MARKERS = frozenset({SYNC_DIR, LOCKS_DIR, TRASH_DIR, QUARANTINE_DIR, IMPORT_DIR})
NEARBY_LIMIT = 5  # stores named in a missing root's error
_NEARBY_SCAN = 1000  # folders looked into, at most, in each place searched


def _store_evidence(path: Path) -> int:
    """How surely the folder ``path`` is a store: 2 it holds a ``project=*`` folder, 1 only some of
    :data:`STORE_MARKERS`, 0 neither (an empty folder is a valid store, but no evidence of one)."""
    found = 0
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if e.name.startswith(PROJECT_PREFIX):
                    return 2
                if e.name in STORE_MARKERS:
                    found = 1
    except OSError:
        return 0
    return found


def nearby_stores(path: Path, cwd: Path | None = None) -> list[Path]:
    """The stores near a root that is not one: the working directory and ``path``'s parent, and
    the folders directly in them, that show a store's own entries; those holding runs first,
    then the names closest to ``path``'s (``tsrun`` suggests ``tsruns``), then alphabetical."""
    import difflib

    cwd = Path.cwd() if cwd is None else cwd
    found: dict[Path, int] = {}
    for place in dict.fromkeys([cwd, path.parent]):
        candidates = [place]
        try:
            with os.scandir(place) as entries:
                for e in entries:
                    if len(candidates) > _NEARBY_SCAN:
                        break
                    if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
                        candidates.append(Path(e.path))
        except OSError:
            continue
        for c in candidates:
            c = Path(os.path.normpath(c))  # as a person would write it: no "sub/.."
            if c != path and c not in found:
                found[c] = _store_evidence(c)
    stores = [c for c, evidence in found.items() if evidence]
    return sorted(stores, key=lambda c: (-found[c], -difflib.SequenceMatcher(None, path.name, c.name).ratio(), str(c)))


def _shown(store: Path, cwd: Path) -> str:
    """``store`` relative to ``cwd`` when inside it (``.`` for ``cwd`` itself), else absolute."""
    try:
        return str(store.relative_to(cwd)) or "."
    except ValueError:
        return str(store)


def root_choice(store: Path, option: str, cwd: Path | None = None) -> str:
    """How to name ``store`` as the root: ``--root demo-store or export TRACKSTORE_DIR=/abs/demo-store``
    (relative to the working directory where it is inside it; quoted for a shell)."""
    import shlex

    shown = _shown(store, Path.cwd() if cwd is None else cwd)
    value = f" {shlex.quote(shown)}" if option.startswith("-") else repr(shown)
    return f"{option}{value} or export {ENV_ROOT}={shlex.quote(str(store))}"


def check_store_root(path: Path, source: str, *, option: str = "root=") -> Path:
    """``path`` if it is a store; else a UsageError (one line) naming the path, where it came from
    and, when it does not exist, the stores nearby (:func:`nearby_stores`) and how to use one
    (``option``: ``root=`` for the library, ``--root`` for the CLI)."""
    problem = store_root_problem(path)
    if problem is None:
        return path
    stores = nearby_stores(path) if problem == "does not exist" else []
    if stores:
        cwd = Path.cwd()
        names = [_shown(s, cwd) for s in stores[:NEARBY_LIMIT]]
        more = f" and {len(stores) - NEARBY_LIMIT} more" if len(stores) > NEARBY_LIMIT else ""
        advice = f"Stores nearby: {', '.join(names)}{more}; use {root_choice(stores[0], option, cwd)}"
    else:
        advice = ("Check the path; an empty folder is a valid new store, and writing runs (trackstore.init, "
                  "trackstore demo, trackstore import) creates one")
    raise UsageError(f"store root {path} {problem} (from {source}). {advice}")


RUN_ID_RANDOM_CHARS = 8  # the random end of a generated run id
# what new_run_id makes (matched by trackstore.read.refs, whose handle of such a run is its random end)
GENERATED_RUN_ID = re.compile(rf"^\d{{8}}-\d{{9}}-[{_ID_ALPHABET}]{{{RUN_ID_RANDOM_CHARS}}}$")


def new_run_id(now: float | None = None) -> str:
    """A run id sortable by creation time (ms) and unique across hosts: ``20261202-175630123-k3j9x2ab``."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + f"{int(now * 1000) % 1000:03d}"
    suffix = "".join(secrets.choice(_ID_ALPHABET) for _ in range(RUN_ID_RANDOM_CHARS))
    return f"{stamp}-{suffix}"


def _host_tag() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "", socket.gethostname().split(".")[0])[:16]
    return host or "host"


def new_writer_id() -> str:
    """Unique per writing process; readable (host and pid) so a file tells who wrote it."""
    return f"{_host_tag()}-{os.getpid()}-{secrets.token_hex(3)}"


def part_file_name(writer_id: str, first_seq: int) -> str:
    """A part as flushed: named by its writer and its first row's seq."""
    return f"{PART_PREFIX}{writer_id}-{first_seq:012d}{PART_SUFFIX}"


def merged_part_name(writer_id: str, first_seq: int, last_seq: int) -> str:
    """A part merged from one writer's parts: named by its writer and its first and last seq."""
    return f"{PART_PREFIX}{writer_id}-{first_seq:012d}-{last_seq:012d}{PART_SUFFIX}"


# part-<writer>-<first seq>[-<last seq>].parquet: as flushed (part_file_name) or merged (merged_part_name)
_PART_NAME = re.compile(r"^" + re.escape(PART_PREFIX) + r"(?P<writer>.+?)-(?P<first>\d{12})(?:-(?P<last>\d{12}))?"
                        + re.escape(PART_SUFFIX) + "$")


def parse_part_name(name: str) -> tuple[str, int, int | None] | None:
    """``(writer, first_seq, last_seq)`` from a part file name; ``last_seq`` is None for a part
    as flushed (its name says only where it starts); None for a name of another form."""
    m = _PART_NAME.match(name)
    if m is None:
        return None
    last = m.group("last")
    return m.group("writer"), int(m.group("first")), None if last is None else int(last)


def is_part_name(name: str) -> bool:
    """Whether a file name in a kind folder is a complete part (temp files and hidden files are not)."""
    return name.endswith(PART_SUFFIX) and not name.startswith(".")


def target_dir(root: str | os.PathLike, target: str) -> Path:
    """``<root>/_<target>``: where a sync target keeps its own local files when told no other place."""
    return Path(root) / f"_{target}"


# ---------------------------------------------------------------------------- relisting
RELIST_ATTEMPTS = 8
RELIST_BACKOFF_S = 0.002  # first pause between attempts; doubled each time (2, 4, ... 128 ms)
T = TypeVar("T")


def relist(kind_dir: Path, read: Callable[[Path], T] | None = None) -> tuple[list, list[Path]]:
    """``read(part)`` for every complete part in ``kind_dir``, in name order, from one consistent
    listing: ``(results, vanished)``. Without ``read``, the results are the parts' paths.

    This is the store's one relist policy for a kind folder that a merge may swap for a new
    one at any moment (:mod:`trackstore.store.merge` swaps the folder, then empties the old one):

    * a listing during which the folder changed identity (it may have come back short) is
      taken again;
    * a part that vanished between the listing and ``read`` (``read`` raised
      :class:`FileNotFoundError`) means its rows are in other files now: the whole folder is
      listed and read again, never a mix of old and new files;
    * at most :data:`RELIST_ATTEMPTS` (8) attempts, pausing 2 ms, 4 ms, ... 128 ms between them
      (a swap is over in microseconds; about 0.25 s in all);
    * when the folder still changes at the last attempt, that attempt's listing is read to the
      end and ``vanished`` names the parts that were gone: each caller says what that means
      (:meth:`RunPaths.parts` returns the listing, :func:`trackstore.store.parts.each_part`
      raises, :func:`trackstore.store.ledger.read_row_ids` counts them as unreadable).

    A folder that does not exist is an empty listing. Nothing is cached.
    """
    results: list = []
    vanished: list[Path] = []
    for attempt in range(RELIST_ATTEMPTS):
        last = attempt == RELIST_ATTEMPTS - 1
        if attempt:
            time.sleep(RELIST_BACKOFF_S * 2 ** (attempt - 1))
        try:
            before = os.stat(kind_dir)
            found = sorted(p for p in kind_dir.iterdir() if is_part_name(p.name))
            after = os.stat(kind_dir)
        except FileNotFoundError:
            return [], []
        if (before.st_dev, before.st_ino) != (after.st_dev, after.st_ino) and not last:
            continue  # the listing straddled a swap
        if read is None:
            return found, []
        results, vanished = [], []
        for part in found:
            try:
                results.append(read(part))
            except FileNotFoundError:
                vanished.append(part)
                if not last:
                    break  # swapped meanwhile: list again
        if not vanished:
            return results, []
    return results, vanished


@dataclass(frozen=True)
class RunPaths:
    """Paths of one run folder."""

    root: Path
    project: str
    run_id: str

    @property
    def dir(self) -> Path:
        return self.root / f"{PROJECT_PREFIX}{self.project}" / f"{RUN_PREFIX}{self.run_id}"

    @property
    def run_file(self) -> Path:
        return self.dir / RUN_FILE

    @property
    def writers_dir(self) -> Path:
        return self.dir / WRITERS_DIR

    def writer_file(self, writer_id: str) -> Path:
        return self.writers_dir / f"{writer_id}.json"

    def kind_dir(self, kind: str) -> Path:
        return self.dir / kind_folder(kind)

    @property
    def artifacts_dir(self) -> Path:
        return self.dir / ARTIFACTS_DIR

    @property
    def media_dir(self) -> Path:
        """``<run>/media/``: the run's image files (:mod:`trackstore.store.media`)."""
        return self.dir / MEDIA_DIR

    def parts(self, kind: str) -> list[Path]:
        """Complete part files of one kind, sorted by name (temp files never match).

        Compaction swaps a kind folder for a new one and then empties the old one: a listing
        that began on the old folder could come back short, so a listing that straddled a swap
        is taken again (:func:`relist`).
        """
        return relist(self.kind_dir(kind))[0]


def run_key(project: str, run_id: str) -> str:
    """A run folder as an object-key prefix relative to a store's root (``project=P/run=ID/``):
    how a team store on S3 names it."""
    return f"{PROJECT_PREFIX}{project}/{RUN_PREFIX}{run_id}/"


def kind_folder(kind: str) -> str:
    """A kind's part folder inside a run folder, with ``/`` between folders (artifacts: their
    manifest's, ``artifacts/_manifest``): the one place that says where each kind's parts are
    (:meth:`RunPaths.kind_dir`, object keys, the catalog's and the part scan's folder names)."""
    return f"{ARTIFACTS_DIR}/{MANIFEST_DIR}" if kind == Kind.ARTIFACTS else str(kind)


def run_paths(root: Path, project: str, run_id: str) -> RunPaths:
    return RunPaths(Path(root), validate_project(project), validate_run_id(run_id))


def outside_store(path: str | os.PathLike, real_root: str) -> str | None:
    """Why ``path`` is not read, because a symbolic link on the way leads outside the store whose
    real path is ``real_root`` (``os.path.realpath`` of the root); None when it stays inside.

    Readers never follow such a link: not for run folders (a project or run folder that is a
    link to elsewhere is not a run of this store, and its run.json is not read), and not for
    part files (:mod:`trackstore.read.views`). Links inside the store are followed.
    """
    real = os.path.realpath(path)
    if real.startswith(real_root.rstrip(os.sep) + os.sep):
        return None
    return f"a symbolic link to {real}, outside the store (only the store's own files are read)"


def iter_run_dirs(root: Path) -> Iterator[tuple[str, str, Path]]:
    """Yield ``(project, run_id, run_dir)`` for every run folder under ``root``."""
    root = Path(root)
    try:
        projects = sorted(root.iterdir())
    except FileNotFoundError:
        return
    for pdir in projects:
        if not pdir.name.startswith(PROJECT_PREFIX) or not pdir.is_dir():
            continue
        project = pdir.name[len(PROJECT_PREFIX):]
        try:
            runs = sorted(pdir.iterdir())
        except OSError:
            continue
        for rdir in runs:
            if rdir.name.startswith(RUN_PREFIX) and rdir.is_dir():
                yield project, rdir.name[len(RUN_PREFIX):], rdir
