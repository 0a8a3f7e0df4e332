"""Text the store can hold: every string on disk is valid UTF-8, and undecodable bytes stay readable.

Python represents bytes it could not decode (a non-UTF-8 ``sys.argv`` entry or working
directory, a file name in another encoding) as *lone surrogates* (U+D800 to U+DFFF, see
PEP 383), which no UTF-8 file, JSON reader or Parquet column accepts. trackstore stores such
text *escaped*, by :func:`escape_surrogates` alone: each lone surrogate becomes the six
characters ``\\udcff`` (a backslash, ``u`` and four lower-case hex digits, as Python's
``backslashreplace`` writes it); all other text is stored unchanged. The escaped text holds no
surrogate, so escaping twice changes nothing. :func:`unescape_surrogates` undoes it: for text
that came from undecodable bytes, ``os.fsencode(unescape_surrogates(text))`` gives the
original bytes back (``\\udcff`` stands for the byte ``0xff``). It is exact unless the
original text also held such a six-character sequence literally (docs/format.md, "Text").

Names that become paths (project names, artifact names) are refused instead, by
:mod:`trackstore.store.names`: a folder must be named exactly what the caller gave.
"""

from __future__ import annotations

import re
from typing import Any

_ESCAPED = re.compile(r"\\u(d[89a-f][0-9a-f]{2})")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as ``\\udXXX``: valid UTF-8 text, else unchanged."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def unescape_surrogates(text: str) -> str:
    """The text :func:`escape_surrogates` was given (see the module docstring for the one exception)."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text)


def storable(obj: Any) -> Any:
    """``obj`` (str, or dicts and lists of them, as JSON holds) with every string and key escaped."""
    if isinstance(obj, str):
        return escape_surrogates(obj)
    if isinstance(obj, dict):
        return {storable(k) if isinstance(k, str) else k: storable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [storable(v) for v in obj]
    return obj
