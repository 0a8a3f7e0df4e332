"""Readers over a team store on S3: a local copy of the replica, kept in step, read like any store.

``trackstore runs|show|sql|plot|compare|samples|trace|ui --root s3://BUCKET/PREFIX`` read a
replica (docs/team-store.md) through :func:`local_copy`, which brings a folder on this machine
in step with it and returns that folder; every reader then works on it unchanged, read-only,
with the SQL guard confining queries to it (it holds the replica and nothing else). Chosen over
querying S3 directly (a pyarrow dataset over ``S3FileSystem``, or s3fs registered with DuckDB,
both measured in docs/performance.md) because every reader, the dashboard included, then works
as on a local store, and a replica's parts never change once written, so each is downloaded
once. What it promises:

* **In step at each call.** One recursive listing of the prefix (a few LIST requests per
  thousand objects); an object whose size and entity tag the copy already has is not fetched
  again; a new or changed one (``run.json`` is rewritten as a run progresses) is downloaded
  to a hidden temp name and renamed into place; one the replica no longer has (gc) is removed.
  A reader therefore sees the replica as it was at the listing, never a half-downloaded file.
* **Only what readers need.** ``metadata_only`` fetches the ``run.json`` files;
  ``for_listing`` (``runs``) those alone too, as a replica's run.json carries the run's metric
  facts (its alerts, a live run's step: :meth:`trackstore.store.catalog.Catalog.metric_facts`),
  and the metrics parts of a run replicated before it did (their footers hold the facts);
  ``kinds`` the run.json files and the parts of these kinds; ``runs`` (the readers of named runs: ``show``, ``plot``, ``compare``, ``samples``,
  ``trace``, ``artifacts``, ``sql --run``) those and the parts of the runs named, from the one
  listing that brought the run.json files in (:func:`replica_objects`); otherwise
  every part file, image file (``media/``) and run.json. Artifact payload files
  (``artifacts/<name>/v<n>/files/...``) are not copied: listings show them from their manifest; fetch one with the
  platform's own tools.
* **Not a replica, refused.** A prefix without ``_replica.json`` (empty, mistyped, or holding
  other things) is a :class:`~trackstore.errors.UsageError` (exit 2), as a local root that is
  not a store is: a mistyped prefix never reads as an empty team store.
* **Brought in as it is read, for the dashboard.** Over a team store the dashboard's copy holds
  the ``run.json`` files (its runs table needs no more); :class:`OnDemand` fetches a run's
  parts when a page first reads that run, and :func:`follow` keeps those in step.
* **Followed, for a reader that stays up.** :func:`follow` brings the copy in step again every
  few seconds, never spending more than a tenth of the time doing it, in a thread of its own
  (the dashboard, ``ui --refresh``): a pass that fails (the link is down, the credentials
  expired) is reported once and the copy stays as the last pass left it, whole; the next pass
  that succeeds is reported too.
* **One updater at a time** per copy (a lock in the copy's ``_locks/``); readers of the copy
  are never blocked. The copy lives under ``$TRACKSTORE_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/trackstore``, else ``~/.cache/trackstore``, in ``replicas/<destination
  id>``: safe to delete at any time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

from ..errors import UsageError
from ..store import locks, objects
from ..store.atomic import write_bytes_atomic
from ..store.cursor import destination_id
from ..store.layout import KINDS, REPLICA_MARKER, RUN_FILE, kind_folder, run_key
from ..store.media import parse_media_path
from ..store.redact import redact_text
from ..store.vocab import Kind

# key -> [size, etag] of each object the copy holds; a run.json's also says, once looked at,
# whether it carries the run's metric facts (1 or 0: see _carries_facts)
INDEX_FILE = "_replica_copy.json"
# downloads at once: most objects are small (run.json files, parts of tens of KB), so over a link
# with a round trip each request is mostly waiting (docs/performance.md: 1,000 run.json files over
# a 100 ms link took 8.2-8.5 s with 16, 3.2-3.3 s with 64; the same on loopback)
FETCH_THREADS = 64
FOLLOW_DUTY = 10  # :func:`follow` waits at least this many times as long as its last pass took

_RUN_FILE = re.compile(r"^project=[^/]+/run=[^/]+/run\.json$")
_IN_RUN = re.compile(r"^(project=[^/]+/run=[^/]+/)(.+)$")  # a run folder's key prefix, and the rest
# each kind's part folder (store.layout.kind_folder) to its kind: every kind the store has
_FOLDER_KIND = {kind_folder(k): str(k) for k in KINDS}
_PART = re.compile("^(" + "|".join(map(re.escape, _FOLDER_KIND)) + r")/[^/.][^/]*\.parquet$")
_ARTIFACT_META = re.compile(r"^artifacts/[^/]+/v\d+/manifest\.json$")


def cache_dir(env=None) -> Path:
    env = os.environ if env is None else env
    if env.get("TRACKSTORE_CACHE_DIR"):
        return Path(env["TRACKSTORE_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trackstore"


def wanted(key: str, metadata_only: bool, runs: frozenset[str] | None = None,
           kinds: frozenset[str] | None = None) -> bool:
    """Whether the local copy holds ``key`` (see the module docstring); ``runs``: only the parts
    of runs whose folder (``project=P/run=R/``, :func:`~trackstore.store.layout.run_key`) is in
    it; ``kinds``: only the parts of these kinds (an artifact's manifest.json is ``artifacts``)."""
    if key == REPLICA_MARKER or _RUN_FILE.match(key):
        return True
    in_run = _IN_RUN.match(key)
    if metadata_only or in_run is None:
        return False
    run, rel = in_run.groups()
    part = _PART.match(rel)
    if part is not None:
        kind = _FOLDER_KIND[part.group(1)]
    elif _ARTIFACT_META.match(rel):
        kind = Kind.ARTIFACTS
    elif parse_media_path(rel) is not None:
        kind = Kind.IMAGES  # an image file (content-addressed) that image or sample rows name
    else:
        return False
    return (kinds is None or kind in kinds) and (runs is None or run in runs)


def replica_objects(uri: str, *, env=None) -> dict[str, objects.ObjectInfo]:
    """The objects of replica ``uri``, by key, from one recursive listing; a prefix that is not a
    replica is a :class:`~trackstore.errors.UsageError` (see the module docstring)."""
    folder = objects.open_location(uri, env=env)
    objects.check_reachable(folder)
    return _listing(folder)


def _listing(folder) -> dict[str, objects.ObjectInfo]:
    listing = {o.key: o for o in folder.listing()}
    if REPLICA_MARKER not in listing:
        held = f"it holds {min(listing)}" if listing else "it is empty"
        raise UsageError(f"{folder.url} is not a trackstore replica (no {REPLICA_MARKER}; {held}): "
                         "--root s3://... reads what sync --to store --uri s3://... wrote")
    return listing


def local_copy(uri: str, *, metadata_only: bool = False, runs: Iterable[tuple[str, str]] | None = None,
               kinds: Iterable[str] | None = None, for_listing: bool = False, env=None,
               on_fetch: Callable[[int], Callable[[str], None] | None] | None = None,
               listing: Mapping[str, objects.ObjectInfo] | None = None) -> Path:
    """The folder of this machine holding replica ``uri`` in step (see the module docstring).
    ``runs`` (``(project, run_id)`` pairs): the parts of these runs only, with every run.json;
    ``kinds``: the parts of these kinds only. ``for_listing``: what a listing reads, every
    run.json, and the metrics parts of the runs whose run.json does not carry their facts
    (:data:`~trackstore.store.layout.REPLICA_FACTS`); with ``runs``, and those runs' parts.
    ``on_fetch(n)`` is told how many objects are about to be downloaded and may return a
    callable called with each one's key as it lands (a progress bar).
    ``listing``: the replica's objects as :func:`replica_objects` listed them moments before in
    this process (a reader of named runs brings in every run.json, resolves its references,
    then the parts of the runs named): not listed again, and the copy is in step with it."""
    folder = objects.open_location(uri, env=env)
    if listing is None:
        objects.check_reachable(folder)
    with _held(folder, env) as (copy, index):
        if listing is None:
            listing = _listing(folder)
        only = None if runs is None else frozenset(run_key(p, r) for p, r in runs)
        of_kinds = None if kinds is None else frozenset(kinds)
        for key in [k for k in index if k not in listing]:  # gone from the replica (gc)
            _remove(copy, key)
            del index[key]

        def bring(want: dict[str, objects.ObjectInfo]) -> None:
            _fetch(folder, copy, index, want, on_fetch)

        if for_listing:
            bring({k: o for k, o in listing.items() if wanted(k, True)})
            # replicated before run.json carried the facts: the parts they are read from
            bare = frozenset(k[:-len(RUN_FILE)] for k in listing
                             if _RUN_FILE.match(k) and not _carries_facts(copy, index, k))
            metrics = frozenset((Kind.METRICS,))
            bring({k: o for k, o in listing.items()
                   if (bare and wanted(k, False, bare, metrics)) or (only and wanted(k, False, only))})
        else:
            bring({k: o for k, o in listing.items() if wanted(k, metadata_only, only, of_kinds)})
    return copy


def bring_runs(uri: str, runs: Iterable[tuple[str, str]], *, env=None) -> Path:
    """The local copy of replica ``uri`` with the files of these ``(project, run_id)`` runs in
    step (their parts, image files and artifact manifests), each run's folder listed alone: one
    request a run, whatever the size of the team store (:func:`local_copy` lists it whole).
    What the replica no longer holds is left to the next :func:`local_copy`."""
    folder = objects.open_location(uri, env=env)
    with _held(folder, env) as (copy, index):
        for project, run_id in runs:
            base = run_key(project, run_id)
            only = frozenset((base,))
            _fetch(folder, copy, index, {o.key: o for o in folder.listing(base) if wanted(o.key, False, only)}, None)
    return copy


@contextlib.contextmanager
def _held(folder, env) -> Iterator[tuple[Path, dict[str, list]]]:
    """The local copy of ``folder``'s replica and its index, under the copy's lock (one updater
    at a time); the index is written back on the way out, with whatever landed before a failure."""
    copy = cache_dir(env) / "replicas" / destination_id("store", folder.url)
    copy.mkdir(parents=True, exist_ok=True)
    with locks.acquire(copy, "replica-copy", wait=True, timeout=600, info={"replica": folder.url}):
        index = _load_index(copy)
        try:
            yield copy, index
        finally:
            write_bytes_atomic(copy / INDEX_FILE, json.dumps(index).encode(), durable=False)


def _fetch(folder, copy: Path, index: dict[str, list], want: Mapping[str, objects.ObjectInfo],
           on_fetch: Callable[[int], Callable[[str], None] | None] | None) -> None:
    """Download the objects of ``want`` that the copy (``index``) does not hold as they are,
    each to a temp name renamed into place, from :data:`FETCH_THREADS` threads; ``index`` is
    updated with each one that landed."""

    def get(o):
        data = folder.get(o.key)
        if data is None:  # deleted between the listing and now: the next call removes it
            return o, False
        write_bytes_atomic(_local(copy, o.key), data, durable=False)
        return o, True

    fetch = [o for k, o in want.items() if index.get(k, [])[:2] != [o.size, o.etag] or not (copy / k).exists()]
    if fetch:
        tick = on_fetch(len(fetch)) if on_fetch is not None else None
        with ThreadPoolExecutor(min(FETCH_THREADS, len(fetch))) as pool:
            for o, ok in pool.map(get, fetch):
                if ok:
                    index[o.key] = [o.size, o.etag]
                if tick is not None:
                    tick(o.key)


def _carries_facts(copy: Path, index: dict[str, list], key: str) -> bool:
    """Whether the copy's run.json ``key`` carries the run's metric facts (:data:`~trackstore.store.layout.REPLICA_FACTS`):
    read once per version of the file and kept in its ``index`` entry, not parsed again at every
    listing (an in-step call over a 1,000-run replica: 0.12 s, against 0.17-0.21 s reading them all)."""
    from ..store.catalog.part_records import carried_facts

    entry = index.get(key)
    if entry is not None and len(entry) == 3:
        return bool(entry[2])
    try:
        found = carried_facts(json.loads((copy / key).read_bytes())) is not None
    except OSError:
        return False  # not here (gone between the listing and its download): nothing to keep
    except ValueError:
        found = False
    if entry is not None:
        entry.append(int(found))
    return found


class OnDemand:
    """The runs a reader that stays up (the dashboard) has read from the local copy of replica
    ``uri``, which holds the ``run.json`` files (``for_listing``): :meth:`bring` fetches a run's
    parts before its first read (:func:`bring_runs`: a listing of that run's folder and its
    files), and :meth:`runs` names them
    for :func:`follow`, which keeps them in step. Safe to call from many threads."""

    def __init__(self, uri: str, *, env=None):
        self.uri, self.env = uri, env
        self._runs: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def bring(self, runs: Iterable[tuple[str, str]]) -> None:
        """Make sure the copy holds these ``(project, run_id)`` runs' files (a run already read: nothing)."""
        wanted_now = set(runs)
        if wanted_now <= self._runs:
            return
        with self._lock:  # one fetch at a time; a run another request brought meanwhile is not fetched again
            new = wanted_now - self._runs
            if new:
                bring_runs(self.uri, sorted(new), env=self.env)
                self._runs |= new

    def runs(self) -> list[tuple[str, str]]:
        return sorted(self._runs)


def follow(uri: str, every: float, *, report: Callable[[str], None], env=None,
           runs: Callable[[], Iterable[tuple[str, str]]] | None = None) -> threading.Event:
    """Bring the local copy of replica ``uri`` in step every ``every`` seconds (:func:`local_copy`)
    in a daemon thread, until the returned event is set; after a pass that took long (a listing
    of a large replica), :data:`FOLLOW_DUTY` times that. ``runs`` (:meth:`OnDemand.runs`): the
    copy is the ``run.json`` files and these runs' parts (``for_listing``), else everything. ``report`` is told, in one line, when a
    pass fails (once, until one succeeds again: a link that stays down is not a line every pass)
    and when one succeeds after a failure. Never raises: a reader that stays up keeps serving
    the copy as the last pass left it."""
    stop = threading.Event()

    def loop() -> None:
        failing: str | None = None
        wait = every
        while not stop.wait(wait):
            started = time.monotonic()
            try:
                if runs is None:
                    local_copy(uri, env=env)
                else:
                    local_copy(uri, for_listing=True, runs=list(runs()), env=env)
            except Exception as exc:  # noqa: BLE001 - any failure: keep the copy, keep serving, say so once
                text = redact_text(str(exc) or type(exc).__name__)
                if text != failing:
                    report(f"the team store could not be brought in step ({text}); still serving the copy "
                           f"as the last pass left it, trying again every {every:g} s")
                failing = text
            else:
                if failing is not None:
                    report(f"the team store is in step again ({uri})")
                failing = None
            # a pass (a listing of the whole replica) takes at most a tenth of the time: a team
            # store of many thousands of runs is followed less often, not by a busy loop
            wait = max(every, FOLLOW_DUTY * (time.monotonic() - started))

    threading.Thread(target=loop, name="replica-follow", daemon=True).start()
    return stop


def _local(copy: Path, key: str) -> Path:
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise UsageError(f"replica object {key!r} cannot be a path")
    path = copy.joinpath(*parts)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _remove(copy: Path, key: str) -> None:
    path = copy.joinpath(*key.split("/"))
    try:
        path.unlink()
    except FileNotFoundError:
        return
    folder = path.parent
    while folder != copy:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def _load_index(copy: Path) -> dict[str, list]:
    try:
        data = json.loads((copy / INDEX_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    # an entry that is not a list (the file edited, or of another version) is as none: fetched again
    return {k: v for k, v in data.items() if isinstance(v, list)} if isinstance(data, dict) else {}
