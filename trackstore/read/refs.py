"""Run handles and nearest matches: the short names a person reads in a listing and types back.

A generated run id (``20261202-175630123-k3j9x2ab``, :func:`trackstore.store.layout.new_run_id`)
starts with its creation time, so a short prefix of it is a date every run of that day shares.
The **handle** of such a run is its random end, ``k3j9x2ab``: recognisable, the same however
many runs the store gains, and unique in practice. Should another id end the same way or start
with it, the handle takes as many more characters of the id, from the right, as make it unique
(``7-k3j9x2ab``). A run id chosen by its caller (``grpo-baseline-lr1e-6``) reads from its start:
its handle is its shortest unique prefix of at least :data:`HANDLE_CHARS` characters. An id with
no shorter unique form is its own handle.

Listings that shorten run ids show :func:`handles`; :class:`IdIndex` says which ids a typed
reference names, by prefix or by handle, and the run resolver
(:func:`trackstore.read.listing.resolve_run`) asks it, so every handle shown names its run.

:func:`closest` orders names by how near they are to something typed that names nothing: the
"did you mean" of run references, metric keys and projects.
"""

from __future__ import annotations

import bisect
import difflib
from typing import Iterable

from ..store.layout import GENERATED_RUN_ID, RUN_ID_RANDOM_CHARS

HANDLE_CHARS = RUN_ID_RANDOM_CHARS  # a handle has at least this many characters (git shows 7)
SIMILAR = 0.6  # difflib's similarity ratio from which a name counts as close (its own default)


def is_generated(run_id: str) -> bool:
    """Whether ``run_id`` has the shape :func:`~trackstore.store.layout.new_run_id` gives."""
    return GENERATED_RUN_ID.match(run_id) is not None


class IdIndex:
    """The run ids of a store, to find the ones a reference names: every id it is a prefix of,
    and every generated id it is a handle of (an end of at least :data:`HANDLE_CHARS`
    characters). Each lookup costs a binary search."""

    def __init__(self, ids: Iterable[str]):
        self.ids = sorted(set(ids))
        self._tails = sorted(i[::-1] for i in self.ids if is_generated(i))  # reversed: an end is a prefix

    @staticmethod
    def _starting(items: list[str], prefix: str, most: int | None) -> list[str]:
        out: list[str] = []
        for i in range(bisect.bisect_left(items, prefix), len(items)):
            if not items[i].startswith(prefix) or (most is not None and len(out) >= most):
                break
            out.append(items[i])
        return out

    def matching(self, ref: str, most: int | None = None) -> list[str]:
        """The ids ``ref`` names by prefix or by handle (sorted; at most ``most`` + the other way)."""
        if not ref:
            return []
        found = self._starting(self.ids, ref, most)
        if len(ref) >= HANDLE_CHARS:
            found += [t[::-1] for t in self._starting(self._tails, ref[::-1], most)]
        return sorted(set(found))

    def handle(self, run_id: str) -> str:
        """The handle of ``run_id`` among these ids (see the module's docstring)."""
        if is_generated(run_id):
            forms = (run_id[-n:] for n in range(HANDLE_CHARS, len(run_id)) if run_id[-n] != "-")
        else:
            forms = (run_id[:n] for n in range(min(HANDLE_CHARS, len(run_id)), len(run_id)))
        for form in forms:
            if self.matching(form, most=2) == [run_id]:
                return form
        return run_id  # a whole id names its run before any prefix or handle does


def handles(ids: Iterable[str], universe: Iterable[str] = ()) -> dict[str, str]:
    """The handle of each of ``ids``, unique among ``universe`` (every run id of the store) and
    ``ids``: what a listing shows for a run id, and what every run reference accepts."""
    ids = list(ids)
    index = IdIndex([*universe, *ids])
    return {rid: index.handle(rid) for rid in ids}


def closest(word: str, choices: Iterable[str], *, n: int | None = None, everything: bool = False) -> list[str]:
    """``choices`` nearest ``word`` first, case ignored: those starting with it (or that it starts
    with), then those containing it, then the rest by similarity (difflib's ratio). Without
    ``everything``, only those close enough (a prefix, a part, or a ratio of at least
    :data:`SIMILAR`); at most ``n``."""
    typed = word.casefold()
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(typed)
    ranked = []
    for choice in dict.fromkeys(choices):
        text = choice.casefold()
        group = 0 if text.startswith(typed) or typed.startswith(text) else 1 if typed in text else 2
        matcher.set_seq1(text)
        if group == 2 and not everything and (matcher.real_quick_ratio() < SIMILAR or matcher.quick_ratio() < SIMILAR):
            continue
        ratio = matcher.ratio()
        if group == 2 and not everything and ratio < SIMILAR:
            continue
        ranked.append((group, -ratio, choice))
    ranked.sort()
    return [choice for _group, _ratio, choice in ranked[:n]]
