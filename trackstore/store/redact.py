"""Credentials out of what trackstore stores or prints: URLs and free text (error messages).

The promise: a destination written to the sync ledger, and a message a target's client raised
that reaches a cursor, a log line or the terminal, has gone through :func:`redact_url` or
:func:`redact_text` first, so ``user:password@`` and token-looking values never land on disk or
on screen. Pure string work, no I/O.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit


def redact_url(value: str) -> str:
    """Drop ``user:password@`` from a URL (and token-looking query values) before storing or printing."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if not parts.scheme or not parts.netloc:
        return value
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = re.sub(r"(?i)((?:token|key|secret|password|passwd|auth)[^=&]*=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@:]*(?::[^/\s@]*)?@")
_SECRET_ARG = re.compile(r"(?i)((?:api[_-]?key|token|secret|password|passwd)\s*[=:]\s*)[^\s&,'\"]+")


def redact_text(text: str) -> str:
    """Remove credentials from free text (error messages that quote URLs or headers)."""
    return _SECRET_ARG.sub(r"\1***", _USERINFO.sub(r"\1***@", text))
