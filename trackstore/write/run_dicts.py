"""``run.config`` and ``run.summary``: dicts that report their changes to the run they belong to.

Values are made JSON-safe as they are set (:func:`trackstore.store.values.json_safe`), so what a
run holds is exactly what run.json will hold. ``Config`` reports each change (and deletion) with
its keys, to be recorded with its time in run.json; ``Summary`` only says that run.json must be
rewritten.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..store.values import json_safe


class Config(dict):
    """``run.config``: a dict whose changes after init are recorded (with their time) in run.json."""

    def __init__(self, on_change: Callable[..., None], data: Mapping[str, Any]):
        super().__init__(data)
        self._on_change = on_change  # on_change(changes, deleted=False): the run records them

    def __setitem__(self, key: str, value: Any) -> None:
        value = json_safe(value)
        super().__setitem__(key, value)
        self._on_change({key: value})

    def update(self, other: Mapping[str, Any] = (), **kw: Any) -> None:  # type: ignore[override,assignment]
        changes = {str(k): json_safe(v) for k, v in dict(other, **kw).items()}
        super().update(changes)
        self._on_change(changes)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._on_change({key: None}, deleted=True)

    def __getattr__(self, name: str) -> Any:  # wandb-style config.lr
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Summary(dict):
    """``run.summary``: user-set values, which override the automatic last-value summary."""

    def __init__(self, on_change: Callable[[], None], data: Mapping[str, Any]):
        super().__init__(data)
        self._on_change = on_change  # the run rewrites run.json at its next flush

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, json_safe(value))
        self._on_change()

    def update(self, other: Mapping[str, Any] = (), **kw: Any) -> None:  # type: ignore[override,assignment]
        super().update({str(k): json_safe(v) for k, v in dict(other, **kw).items()})
        self._on_change()
