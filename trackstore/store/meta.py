"""Run metadata (``run.json``), writer heartbeats, and telling a live run from a crashed one.

Every process writing a run has a heartbeat file ``_writers/<writer_id>.json`` (host, pid,
process start time, ``heartbeat_at``, status). A run's recorded status is what its writers
last wrote. A writer killed with ``kill -9`` never writes again, so readers derive the
*effective* status: a run recorded ``running`` is reported ``crashed`` when none of its
writers is alive. A writer is alive when

* it is on the reader's host: its pid exists and is the same process (its start time
  matches, so a reused pid does not count) and is not a zombie — known at once, or
* it is on another host: its heartbeat is younger than :data:`STALE_AFTER_S` (120 s).

The writer thread rewrites the heartbeat every :data:`HEARTBEAT_INTERVAL_S` (10 s), so a
foreign-host run is reported ``crashed`` between 120 and 130 s after its writer died. The
bound is twelve heartbeats wide so that a slow shared filesystem or a long flush (a busy NFS
server) does not make a live run look dead. A writer whose clock runs more than the bound
behind the reader's is also reported dead; keep hosts NTP-synchronised.

When several writers share a run (ranks, or a resumed attempt), the run ends when the last
of them ends: :func:`ended_status` combines their final states.

Readers never trust ``run.json`` blindly (:func:`load_run_json`): a file written by an older
version or by hand may hold an out-of-range integer, a value of the wrong type, lone
surrogates, or no JSON at all. Every field readers use is checked against ``docs/format.md``
section 4; a value that fails is left out (it reads as missing: NULL in the ``runs`` view) and
named in :attr:`RunJson.problems`, so one bad file never breaks a command for the whole store.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .atomic import read_json, write_json_atomic
from .clock import parse_iso, parse_time
from .host import PID_MAX, hostname, pid_alive
from .layout import RunPaths
from .vocab import RUN_STATUSES, RunStatus

_WRITER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a file name: no "/", no leading "."

HEARTBEAT_INTERVAL_S = 10.0
STALE_AFTER_S = 120.0
META_VERSION = 1

STATUSES = RUN_STATUSES  # running, finished, failed, crashed (trackstore.store.vocab)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def read_run_json(paths: RunPaths) -> dict | None:
    """run.json's usable fields (:func:`load_run_json`); None when it is missing or unreadable.

    Writers merge into what this returns, so a value no reader can use (a step beyond int64,
    a summary that is not an object) is dropped at their next rewrite instead of breaking it.
    """
    doc = load_run_json(paths)
    return None if doc is None or doc.unreadable else doc.meta


# what a run's page shows of each of its writers (_writers/<id>.json), and what a team store's
# run.json carries of them (layout.REPLICA_WRITERS: writer files are not replicated)
WRITER_SUMMARY = ("writer_id", "host", "pid", "started_at", "heartbeat_at", "status", "ended_at", "error", "exit_code")


def replica_field(meta, name: str):
    """What a team store's run.json says under ``replica.<name>`` (docs/format.md section 12:
    ``source``, ``replicated_at``, ``metric_facts``, ``writers``); None for a run of a store, or
    a run.json edited into something else."""
    replica = meta.get("replica") if isinstance(meta, dict) else None
    return replica.get(name) if isinstance(replica, dict) else None


def writer_summaries(writers: list[dict]) -> list[dict]:
    """:data:`WRITER_SUMMARY` of each writer (the fields it has)."""
    return [{k: w[k] for k in WRITER_SUMMARY if w.get(k) is not None} for w in writers if isinstance(w, dict)]


# ---------------------------------------------------------------------- reading run.json defensively
REQUIRED_FIELDS = ("format_version", "project", "run_id", "status", "created_at")


class RunJsonWarning(UserWarning):
    """A run.json (named in the message) held values readers cannot use; they read as missing."""


@dataclass
class RunJson:
    """What readers can use of one run.json.

    ``meta`` holds only values that passed their field's check (so a reader may put them into
    DuckDB or Arrow as they are); ``problems`` says, one phrase each, what was left out and why.
    ``unreadable`` means the file as a whole could not be parsed (``meta`` is then empty);
    ``missing`` lists the :data:`REQUIRED_FIELDS` the file lacks (which readers survive).
    """

    meta: dict
    problems: list[str] = field(default_factory=list)
    unreadable: bool = False

    @property
    def missing(self) -> list[str]:
        return [] if self.unreadable else [f for f in REQUIRED_FIELDS if self.meta.get(f) is None]


def load_run_json(paths: RunPaths) -> RunJson | None:
    """The run's ``run.json`` as readers may use it (see :class:`RunJson`); None when there is none."""
    try:
        raw = paths.run_file.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return RunJson({}, [f"cannot be read: {exc.strerror or exc}"], unreadable=True)
    return parse_run_json(raw)


def parse_run_json(raw: bytes) -> RunJson:
    """Check a run.json document field by field (see :class:`RunJson`)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return RunJson({}, [f"is not valid UTF-8 (byte {exc.start})"], unreadable=True)
    except (ValueError, RecursionError) as exc:
        return RunJson({}, [f"is not valid JSON ({_brief(exc)})"], unreadable=True)
    if not isinstance(doc, dict):
        return RunJson({}, [f"is not a JSON object but {_kind(doc)}"], unreadable=True)
    if _utf8_json(doc):  # the common case: only each known field's type is left to check
        problems = {k: why for k, v in doc.items() if (why := _field_problem(k, v)) is not None}
    else:
        problems = {k: why for k, v in doc.items()
                    if (why := ("holds text that is not valid Unicode" if not _utf8_json({k: v})
                                else _field_problem(k, v))) is not None}
    meta = {k: v for k, v in doc.items() if k not in problems}
    return RunJson(meta, [f"{_show(k)}: {why}" for k, why in problems.items()])


def _field_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be field ``name`` of a run.json (docs/format.md section 4), or None.

    A null is always acceptable (it reads as missing); fields this version does not know are
    accepted as they are (readers ignore them).
    """
    check = _FIELD_CHECKS.get(name)
    return None if value is None or check is None else check(value)


def _int_in(lo: int, hi: int, what: str = "a 64-bit integer") -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{_show(v)} is not an integer"
        return None if lo <= v <= hi else f"{_show(v)} is out of range (not {what})"
    return check


def _of_type(typ: type, what: str) -> Callable[[Any], str | None]:
    return lambda v: None if isinstance(v, typ) else f"{_show(v)} is not {what}"


def _time_check(v: Any) -> str | None:
    return None if parse_time(v) is not None else f"{_show(v)} is not an ISO-8601 time"


def _status_check(v: Any) -> str | None:
    return None if v in STATUSES else f"{_show(v)} is not one of {', '.join(STATUSES)}"


def _strings_check(v: Any) -> str | None:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return None
    return f"{_show(v)} is not a list of strings"


def _objects_check(v: Any) -> str | None:
    if isinstance(v, list) and all(isinstance(x, dict) for x in v):
        return None
    return f"{_show(v)} is not a list of objects"


def _git_check(v: Any) -> str | None:
    if not isinstance(v, dict):
        return f"{_show(v)} is not an object"
    ok = all(v.get(k) is None or isinstance(v.get(k), str) for k in ("commit", "branch"))
    ok = ok and (v.get("dirty") is None or isinstance(v.get("dirty"), bool))
    return None if ok else f"{_show(v)} is not {{commit: string, branch: string, dirty: bool}}"


_text = _of_type(str, "a string")
_object = _of_type(dict, "an object")
_FIELD_CHECKS: dict[str, Callable[[Any], str | None]] = {
    "format_version": _int_in(1, INT64_MAX, "a positive 64-bit integer"), "last_step": _int_in(INT64_MIN, INT64_MAX),
    "exit_code": _int_in(INT64_MIN, INT64_MAX), "pid": _int_in(1, PID_MAX, "a process id"), "status": _status_check,
    **{k: _time_check for k in ("created_at", "ended_at", "updated_at", "heartbeat_at", "resumed_at")},
    **{k: _text for k in ("project", "run_id", "name", "host", "user", "cwd", "python", "trackstore_version",
                          "notes", "group", "job_type", "error", "write_errors")},
    **{k: _object for k in ("config", "summary", "summary_auto", "summary_user")},
    "command": _strings_check, "tags": _strings_check, "git": _git_check,
    "attempts": _objects_check, "config_updates": _objects_check,
}


def _utf8_json(value: Any) -> bool:
    """Whether ``value`` can be written back as UTF-8 JSON (no lone surrogates anywhere)."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=True).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        return False
    return True


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _show(value: Any, limit: int = 60) -> str:
    """A short, printable rendering of a value for a message."""
    try:
        text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    except (ValueError, TypeError, RecursionError):
        text = _kind(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _brief(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:120]


def write_run_json(paths: RunPaths, meta: dict, *, durable: bool = True) -> None:
    paths.dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.run_file, meta, durable=durable)


def write_writer_file(paths: RunPaths, info: dict, *, durable: bool = False) -> None:
    """Write a writer's heartbeat file, ``_writers/<writer_id>.json``.

    ``writer_id`` may come from a file on disk (a resume rewriting a dead writer's record), so it
    must be a plain file name: ``ValueError`` otherwise, never a path outside ``_writers/``.
    """
    writer_id = info.get("writer_id")
    if not (isinstance(writer_id, str) and _WRITER_ID.fullmatch(writer_id)):
        raise ValueError(f"not a writer id: {str(writer_id)[:80]!r}")
    paths.writers_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.writer_file(writer_id), info, durable=durable)


def read_writer_files(paths: RunPaths) -> list[dict]:
    out: list[dict] = []
    try:
        entries = sorted(paths.writers_dir.glob("*.json"))
    except OSError:
        return out
    for p in entries:
        try:
            data = read_json(p)
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            out.append(data)
    return out


def writer_alive(info: dict, now: float | None = None, this_host: str | None = None) -> bool:
    """Is the process behind this heartbeat file still writing? See the module docstring."""
    if info.get("status", RunStatus.RUNNING) != RunStatus.RUNNING:
        return False
    now = time.time() if now is None else now
    this_host = hostname() if this_host is None else this_host
    if info.get("host") == this_host and isinstance(info.get("pid"), int):
        return pid_alive(info["pid"], info.get("pid_start"))
    beat = parse_iso(info.get("heartbeat_at"))
    return beat is not None and now - beat < STALE_AFTER_S


def ended_status(writers: list[dict]) -> str | None:
    """The run's status once every writer has ended, or None while one is still alive.

    ``crashed`` writer files are earlier attempts that a resume superseded and do not count,
    unless nothing else is left. A writer that died while others went on makes the run
    ``crashed``; otherwise any ``failed`` writer makes it ``failed``, else ``finished``.
    """
    if not writers or any(writer_alive(w) for w in writers):
        return None
    states = [w.get("status", RunStatus.RUNNING) for w in writers]
    if RunStatus.RUNNING in states:  # recorded running but dead: it died without finishing
        return RunStatus.CRASHED
    states = [s for s in states if s != RunStatus.CRASHED]
    if not states:
        return RunStatus.CRASHED
    return RunStatus.FAILED if RunStatus.FAILED in states else RunStatus.FINISHED


def effective_status(meta: dict, writers: list[dict], now: float | None = None) -> str:
    """The status a reader should report: ``crashed`` for a running run with no live writer."""
    status = meta.get("status") or RunStatus.RUNNING
    if status != RunStatus.RUNNING:
        return status
    if isinstance(meta.get("replica"), dict):
        # a team store's copy (docs/format.md section 12): the status the source's readers saw at
        # replication; no heartbeat here says more (the writer runs on another machine)
        return status
    if writers:
        if any(writer_alive(w, now) for w in writers):
            return RunStatus.RUNNING
        return ended_status(writers) or RunStatus.CRASHED
    return RunStatus.RUNNING if writer_alive({"status": RunStatus.RUNNING, **meta}, now) else RunStatus.CRASHED


def run_status(paths: RunPaths) -> str | None:
    meta = read_run_json(paths)
    if meta is None:
        return None
    return effective_status(meta, read_writer_files(paths))


def any_writer_alive(paths: RunPaths) -> bool:
    return any(writer_alive(w) for w in read_writer_files(paths))

