"""The SQL guard: which statements a read-only trackstore query may run.

The promise: :func:`check_read_only` lets through exactly one statement that only reads (a
SELECT or WITH query, DESCRIBE, SHOW, SUMMARIZE, an EXPLAIN of a query, a few harmless
PRAGMAs) and refuses everything else (COPY, ATTACH, CREATE, INSERT, INSTALL/LOAD, SET, several
statements, an EXPLAIN ANALYZE of any of these, ...) with a :class:`~trackstore.errors.QueryError`
that says so, before DuckDB runs anything. It is one of two walls: the connection itself is
also confined to the store root (:func:`trackstore.read.views.confine`).
"""

from __future__ import annotations

import re

from ..errors import QueryError

# Statement types a read-only query may use. DESCRIBE, SHOW and SUMMARIZE parse as SELECT;
# EXPLAIN is allowed when what it explains is a SELECT.
_ALLOWED_STATEMENTS = ("SELECT",)
_ALLOWED_PRAGMAS = re.compile(r"^\s*PRAGMA\s+(table_info|show|show_tables|show_tables_expanded|version)\b",
                              re.IGNORECASE)


def check_read_only(sql: str) -> None:
    """Raise :class:`QueryError` unless ``sql`` is one read-only statement (a query)."""
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {clean_error(exc)}") from None
    if not statements:
        raise QueryError("empty query")
    if len(statements) > 1:
        raise QueryError(f"one statement at a time, got {len(statements)} (remove the ';'-separated extras)")
    st = statements[0]
    kind = st.type.name
    if kind == "EXPLAIN":  # EXPLAIN ANALYZE runs what it explains: that must be a query too
        if not _explains_a_query(st.query):
            raise QueryError("refused: EXPLAIN may only explain a query (EXPLAIN ANALYZE runs the statement "
                             "it explains); trackstore SQL is read-only")
        return
    if kind in _ALLOWED_STATEMENTS:
        return
    if kind == "PRAGMA" and _ALLOWED_PRAGMAS.match(st.query):
        return
    raise QueryError(f"refused: {kind} statements are not allowed; trackstore SQL is read-only "
                     "(SELECT, WITH, EXPLAIN, DESCRIBE, SHOW, SUMMARIZE, PRAGMA table_info)")


def _explains_a_query(sql: str) -> bool:
    """Whether an ``EXPLAIN [ANALYZE] [(options)] <statement>`` wraps one SELECT.

    The wrapped statement starts right after EXPLAIN/ANALYZE, or after the parenthesized
    option list (a query may start with a parenthesis too): it is a query if either parses
    as exactly one SELECT (no option list parses as a query).
    """
    import duckdb

    found = duckdb.tokenize(sql)
    ends = [pos for pos, _t in found[1:]] + [len(sql)]
    words = [(pos, sql[pos:end].strip()) for (pos, typ), end in zip(found, ends)
             if typ != duckdb.token_type.comment]
    i = 1  # words[0] is EXPLAIN
    if i < len(words) and words[i][1].lower() in ("analyze", "analyse"):
        i += 1
    starts = [i]
    depth = 0
    while i < len(words) and (depth or words[i][1].startswith("(")):  # skip an option list
        depth += words[i][1].count("(") - words[i][1].count(")")
        i += 1
        if not depth:
            starts.append(i)
            break
    for start in starts:
        if start >= len(words):
            continue
        try:
            inner = duckdb.extract_statements(sql[words[start][0]:])
        except duckdb.Error:
            continue
        if len(inner) == 1 and inner[0].type.name == "SELECT":
            return True
    return False


def mentions_sync_state(sql: str) -> bool:
    """Whether a query can reference the ``sync_state`` view (so it must be filled)."""
    return "sync_state" in sql.lower()


def mentions_runs(sql: str) -> bool:
    """Whether a query can reference the ``runs`` view (so it must be filled): any mention of
    the word, in a name, a string or a comment, counts (no other view reads it)."""
    return "runs" in sql.lower()


def clean_error(exc: BaseException) -> str:
    """A DuckDB error's message, trimmed for people (no blank lines)."""
    return str(exc).strip().replace("\n\n", "\n")
