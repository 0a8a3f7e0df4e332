"""Validation of every user-chosen name that becomes part of a path, and of metric keys.

Project names and run ids become hive partition folders (``project=<p>/run=<id>``), so
they must be a single, safe path component that every reader (DuckDB, Polars, Spark) parses
back to the same string. Rather than encode names, trackstore refuses the few characters that
are dangerous or ambiguous there, and says so before anything touches the disk. Unicode
(Chinese project names, accents, emoji) is fine.
"""

from __future__ import annotations

import re

from ..errors import InvalidNameError, InvalidValueError

MAX_NAME_CHARS = 128
MAX_NAME_BYTES = 200  # filesystem components are limited to 255 bytes; "project=" eats 8
MAX_RUN_ID_CHARS = 64
MAX_KEY_CHARS = 1000

# Control characters break terminals, log files and CSV output: the C0 and C1 ranges, DEL,
# the Unicode line and paragraph separators, and the bidirectional overrides that make a name
# display as something else ("trojan source").
_CONTROL_CHARS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
# '/' and '\\' split paths; '=' and '%' confuse hive-partition parsers (which split on '=' and
# percent-decode values).
_FORBIDDEN_IN_NAME = re.compile(f"[/\\\\=%{_CONTROL_CHARS}]")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_CONTROL = re.compile(f"[{_CONTROL_CHARS}]")


def validate_project(name: object) -> str:
    """Return ``name`` if it is a valid project name, else raise :class:`InvalidNameError`."""
    return _validate_component(name, "project name")


def validate_artifact_name(name: object) -> str:
    """Artifact names become folder names under ``artifacts/``: same rules as projects."""
    return _validate_component(name, "artifact name")


def _validate_component(name: object, what: str) -> str:
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidNameError(f"{what} must not be empty")
    if name != name.strip():
        raise InvalidNameError(f"{what} {name!r} has leading or trailing whitespace")
    if name.startswith("."):
        raise InvalidNameError(f"{what} {name!r} must not start with '.' (no hidden folders, no '..')")
    bad = _FORBIDDEN_IN_NAME.search(name)
    if bad:
        raise InvalidNameError(
            f"{what} {name!r} contains {bad.group()!r} (U+{ord(bad.group()):04X}); path separators, "
            "'=', '%' and control characters are not allowed"
        )
    _check_utf8(name, what)
    _check_length(name, what)
    return name


def _check_length(name: str, what: str) -> None:
    """At most MAX_NAME_CHARS characters and MAX_NAME_BYTES bytes of UTF-8 (what the folder name
    costs the filesystem): the message says which limit the name passed, with both counts."""
    chars, size = len(name), len(name.encode("utf-8"))
    if chars <= MAX_NAME_CHARS and size <= MAX_NAME_BYTES:
        return
    counts = f"{chars} characters, {size} bytes in UTF-8"
    if size > MAX_NAME_BYTES:
        raise InvalidNameError(
            f"{what} {name[:20]!r}... is too long: {counts}; the limit is {MAX_NAME_BYTES} bytes "
            f"(and {MAX_NAME_CHARS} characters). Characters beyond ASCII take 2 to 4 bytes each "
            "(a Chinese character takes 3): shorten the name"
        )
    raise InvalidNameError(
        f"{what} {name[:20]!r}... is too long: {counts}; the limit is {MAX_NAME_CHARS} characters "
        f"(and {MAX_NAME_BYTES} bytes): shorten the name"
    )


def _check_utf8(text: str, what: str, error: type = InvalidNameError) -> None:
    """A lone surrogate (e.g. from a badly decoded file name) cannot be stored as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(f"{what} {text!r} is not valid Unicode text ({exc.reason} at position {exc.start})") from None


def _bounded_text(value: object, what: str, error: type[Exception], limit: int, *, shown: int, why: str,
                  with_value: bool = False) -> str:
    """``value`` if it is a non-empty string of at most ``limit`` characters, else ``error``
    saying which rule it breaks (its first ``shown`` characters when too long)."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}" + (f" {value!r}" if with_value else ""))
    if not value:
        raise error(f"{what} must not be empty")
    if len(value) > limit:
        raise error(f"{what} {value[:shown]!r}... is too long: {len(value)} characters; the limit is {limit} "
                    f"characters ({why})")
    return value


def validate_run_id(run_id: object) -> str:
    """Run ids are ASCII ``[A-Za-z0-9._-]``, at most 64 characters, starting alphanumeric.

    They are stricter than project names because every sync target derives its own remote id
    from them, and wandb and SwanLab ids forbid most punctuation.
    """
    run_id = _bounded_text(run_id, "run id", InvalidNameError, MAX_RUN_ID_CHARS, shown=20,
                           why="run ids are ASCII: one byte each")
    if not _RUN_ID.match(run_id):
        raise InvalidNameError(
            f"run id {run_id!r} is not valid: use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return run_id


def validate_key(key: object) -> str:
    """Metric keys are free text (``actor/entropy``, ``val-core/gsm8k/acc@1``) with limits."""
    key = _bounded_text(key, "metric key", InvalidValueError, MAX_KEY_CHARS, shown=40, with_value=True,
                        why="of any script: keys are stored as text, not as paths")
    _check_utf8(key, "metric key", InvalidValueError)
    bad = _CONTROL.search(key)
    if bad:
        raise InvalidValueError(f"metric key {key!r} contains a control character (U+{ord(bad.group()):04X})")
    return key
