"""The store's fixed vocabularies, one enum each: record kinds, run statuses, gc's keep reasons.

What this module promises:

* Every member is a ``str`` (:class:`Word`: :class:`enum.StrEnum`, which Python 3.10 lacks)
  whose value is exactly the word stored on disk, shown to users and written to JSON, so
  ``Kind.METRICS == "metrics"``, a dict keyed by members answers plain strings, and nothing on
  disk or in printed output (``str``, ``format``, ``repr``, JSON) depends on whether a caller
  holds a member or a plain string.
* :data:`KINDS` is the format's order of the record kinds (docs/format.md, the order of
  :data:`trackstore.store.schema.SCHEMAS`); :data:`REPLAY_ORDER` is the order in which sync
  replays them (metrics first; histograms and samples share a step axis with metrics on some
  targets). Both hold every kind once.
* :data:`TERMINAL` is the set of statuses a run ends with; a run in any other status
  (``running``) may still change.
* A :class:`KeepReason` is why gc keeps a run, as a code that logic branches on; its
  :attr:`~KeepReason.text` is the sentence users read (a template filled by
  :meth:`~KeepReason.say`), and :attr:`~KeepReason.summary` is the short form ``gc`` counts kept
  runs by. Code never parses those sentences.

This module imports nothing of trackstore: every layer may use it.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Word", "Kind", "KINDS", "REPLAY_ORDER", "RunStatus", "RUN_STATUSES", "TERMINAL", "ENDED_ORDER", "KeepReason"]


class Word(str, Enum):
    """A str enum whose ``str()`` and ``format()`` are its value, as :class:`enum.StrEnum` (3.11+),
    and whose ``repr()`` is its value's (``'metrics'``), so a message that quotes a word with
    ``!r`` reads the same whether it holds a member or a plain string."""

    def __repr__(self) -> str:
        return str.__repr__(self)

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


class Kind(Word):
    """A record kind: a folder of part files in a run (artifacts: ``artifacts/_manifest/``)."""

    METRICS = "metrics"
    SAMPLES = "samples"
    SPANS = "spans"
    HISTOGRAMS = "histograms"
    ARTIFACTS = "artifacts"
    IMAGES = "images"  # rows naming image files stored under media/ (docs/format.md, section 7)


#: the format's order (folders, schemas, the catalog's per-kind columns)
KINDS: tuple[Kind, ...] = tuple(Kind)
#: the order sync replays a run's kinds in (trackstore.sync.engine)
REPLAY_ORDER: tuple[Kind, ...] = (Kind.METRICS, Kind.HISTOGRAMS, Kind.SAMPLES, Kind.IMAGES, Kind.SPANS,
                                  Kind.ARTIFACTS)


class RunStatus(Word):
    """A run's status, as ``run.json`` and the ``runs`` view hold it."""

    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CRASHED = "crashed"


#: every status, in the order users are shown them
RUN_STATUSES: tuple[RunStatus, ...] = tuple(RunStatus)
#: the statuses a run ends with: it changes no more (unless resumed)
TERMINAL: frozenset[RunStatus] = frozenset((RunStatus.FINISHED, RunStatus.FAILED, RunStatus.CRASHED))
#: the terminal statuses in the order users are shown them (a frozenset has no order)
ENDED_ORDER: tuple[RunStatus, ...] = tuple(s for s in RunStatus if s in TERMINAL)


class KeepReason(Word):
    """Why gc keeps a run (:mod:`trackstore.upkeep.gc`). The value is a stable code."""

    OTHER_PROJECT = "other-project"
    LIVE = "live"
    STATUS_NOT_SELECTED = "status-not-selected"
    NEWER = "newer"
    KEEP_LAST = "keep-last"
    SYNC_UNNAMED = "sync-unnamed"
    BEING_SYNCED = "being-synced"
    CHANGED_WHILE_PLANNING = "changed-while-planning"
    CHANGED_SINCE_PLAN = "changed-since-plan"
    SYNC_STATE_UNREADABLE = "sync-state-unreadable"
    NEVER_SYNCED = "never-synced"
    DAMAGED_PARTS = "damaged-parts"
    NOT_SYNCED_TO_REQUIRED = "not-synced-to-required"
    ONLY_STAGED = "only-staged"
    NOT_FULLY_SYNCED = "not-fully-synced"
    WITHIN_MAX_SIZE = "within-max-size"
    BEING_REPLICATED = "being-replicated"
    ALIASED_ARTIFACTS = "aliased-artifacts"

    @property
    def text(self) -> str:
        """The sentence users read, a :meth:`str.format` template of the reason's details."""
        return _KEEP_TEXT[self][0]

    @property
    def summary(self) -> str:
        """The short form kept runs are counted by (a template of the same details)."""
        return _KEEP_TEXT[self][1]

    def say(self, **details: object) -> str:
        """:attr:`text` filled with ``details``."""
        return self.text.format(**details)


# code -> (text, summary); the texts are exactly what gc printed before these codes existed
_KEEP_TEXT: dict[KeepReason, tuple[str, str]] = {
    KeepReason.OTHER_PROJECT: ("other project", "other project"),
    KeepReason.LIVE: ("live: a writer is running", "live"),
    KeepReason.STATUS_NOT_SELECTED: ("status {status} not selected", "status {status} not selected"),
    KeepReason.NEWER: ("ended {days:.1f} days ago (newer than --older-than)", "newer than --older-than"),
    KeepReason.KEEP_LAST: ("one of the {keep_last} newest runs of its project (--keep-last)",
                           "one of the {keep_last} newest runs of its project"),
    KeepReason.SYNC_UNNAMED: ("a sync is running and did not say which runs ({lock})",
                              "a sync is running and did not say which runs"),
    KeepReason.BEING_SYNCED: ("being synced right now", "being synced right now"),
    KeepReason.CHANGED_WHILE_PLANNING: ("changed while gc was planning; run gc again",
                                        "changed while gc was planning; run gc again"),
    KeepReason.CHANGED_SINCE_PLAN: ("changed since the plan ({why}); run gc again", "changed since the plan"),
    KeepReason.SYNC_STATE_UNREADABLE: ("sync state unreadable: {files}; run `trackstore doctor` "
                                       "(--force deletes anyway)", "sync state unreadable"),
    KeepReason.NEVER_SYNCED: ("never synced (sync it first, or pass --include-unsynced)", "never synced"),
    KeepReason.DAMAGED_PARTS: ("damaged parts: {files}; run `{fix}` to quarantine them (--force deletes anyway)",
                               "damaged parts"),
    KeepReason.NOT_SYNCED_TO_REQUIRED: ("not fully synced to {targets}{staged} (required by --require-synced-to)",
                                        "not fully synced to {targets}"),
    KeepReason.ONLY_STAGED: ("only staged on this machine ({target} {destination}), not uploaded: upload it and "
                             "sync it to the platform, or pass --count-staged", "only staged on this machine"),
    KeepReason.BEING_REPLICATED: ("replicated within the last hour ({minutes} min ago): a sync may still be "
                                  "writing it",
                                  "replicated within the last hour"),
    KeepReason.NOT_FULLY_SYNCED: ("not fully synced to {target} {destination}: {behind} "
                                  "(use --force to delete anyway)", "not fully synced to {target} {destination}"),
    KeepReason.WITHIN_MAX_SIZE: ("store within --max-size", "store within --max-size"),
    KeepReason.ALIASED_ARTIFACTS: ("holds the only copy of an aliased artifact version: {what}, never synced (sync "
                                   "it first, or pass --include-aliased)",
                                   "holds the only copy of an aliased artifact version"),
}
