"""``trackstore.watch(model)``: gradient and parameter histograms of a PyTorch module, like ``wandb.watch``.

::

    handle = trackstore.watch(model, log="all", every=100)
    ...                                  # train as usual; histograms land in the current run
    handle.remove()                      # or trackstore.unwatch(model)

Every ``every``-th backward pass of a parameter logs ``gradients/<name>`` (from a hook on the
parameter, after its gradient is accumulated), and every ``every``-th forward pass of the
module logs ``parameters/<name>`` for all its parameters. Histograms are logged at the run's
current step with ``commit=False``, so they share the step of the metrics that follow (as
wandb does). torch is only used through the module and tensor objects given; this module
never imports it, so importing trackstore stays cheap.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..errors import InvalidValueError, UsageError
from ..records.histogram import MAX_BINS, Histogram

if TYPE_CHECKING:  # pragma: no cover
    from ..write.run import Run

LOG_CHOICES = ("gradients", "parameters", "all")
_ATTR = "_trackstore_watch"


class WatchHandle:
    """The hooks one :func:`watch` call installed. :meth:`remove` takes them all off."""

    def __init__(self, model: Any, run: Run, log: str, every: int, bins: int, prefix: str):
        self.model, self.run, self.log, self.every, self.bins, self.prefix = model, run, log, every, bins, prefix
        self._hooks: list[Any] = []
        self._grad_calls: dict[str, int] = {}
        self._forward_calls = 0
        self._warned = False

    def remove(self) -> None:
        for h in self._hooks:
            try:
                h.remove()
            except Exception:
                pass
        self._hooks.clear()
        if getattr(self.model, _ATTR, None) is self:
            try:
                delattr(self.model, _ATTR)
            except AttributeError:
                pass

    def _log(self, key: str, tensor: Any) -> None:
        run = self.run
        if run.finished:
            return
        try:
            run.log({key: Histogram(tensor, bins=self.bins)}, step=run.step, commit=False)
        except Exception as exc:  # a histogram must never stop a backward pass
            if not self._warned:
                self._warned = True
                sys.stderr.write(f"trackstore: WARNING: watch could not log {key}: {exc}\n")

    def _grad_hook(self, name: str):
        key = f"{self.prefix}gradients/{name}"

        def hook(arg: Any) -> None:
            n = self._grad_calls.get(name, 0)
            self._grad_calls[name] = n + 1
            if n % self.every:
                return
            grad = getattr(arg, "grad", arg)  # post-accumulate hooks get the parameter
            if grad is not None:
                self._log(key, grad)

        return hook

    def _forward_hook(self, module: Any, inputs: Any, output: Any) -> None:
        n = self._forward_calls
        self._forward_calls = n + 1
        if n % self.every:
            return
        for name, p in self.model.named_parameters():
            self._log(f"{self.prefix}parameters/{name}", p)


def watch(model: Any, log: str = "gradients", every: int = 100, run: Run | None = None, *, bins: int = 64,
          prefix: str = "") -> WatchHandle:
    """Log histograms of ``model``'s gradients and/or parameters every ``every`` passes.

    ``log`` is ``"gradients"``, ``"parameters"`` or ``"all"``. ``run`` defaults to the current
    run. Watching a model again replaces the earlier hooks. Returns a :class:`WatchHandle`.
    """
    from ..write.run import current_run

    if log not in LOG_CHOICES:
        raise InvalidValueError(f"watch(log=...) must be one of {', '.join(LOG_CHOICES)}, got {log!r}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise InvalidValueError(f"watch(every=...) must be an integer >= 1, got {every!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise InvalidValueError(f"watch(bins=...) must be an int in 1..{MAX_BINS}, got {bins!r}")
    if not all(callable(getattr(model, m, None)) for m in ("named_parameters", "register_forward_hook")):
        raise InvalidValueError(f"watch expects a torch.nn.Module, got {type(model).__name__}")
    run = run or current_run()
    if run is None:
        raise UsageError("watch needs a run: call trackstore.init(...) first or pass run=")
    old = getattr(model, _ATTR, None)
    if isinstance(old, WatchHandle):
        old.remove()
    handle = WatchHandle(model, run, log, every, bins, prefix)
    if log in ("gradients", "all"):
        for name, p in model.named_parameters():
            if not getattr(p, "requires_grad", False):
                continue
            post = getattr(p, "register_post_accumulate_grad_hook", None)  # torch >= 2.1
            hook = handle._grad_hook(name)
            handle._hooks.append(post(hook) if callable(post) else p.register_hook(hook))
    if log in ("parameters", "all"):
        handle._hooks.append(model.register_forward_hook(handle._forward_hook))
    setattr(model, _ATTR, handle)
    return handle


def unwatch(model: Any) -> None:
    """Remove the hooks :func:`watch` put on ``model`` (no-op if none)."""
    handle = getattr(model, _ATTR, None)
    if isinstance(handle, WatchHandle):
        handle.remove()
