"""verl's rollout traces as trackstore span trees: trace backend ``trackstore``.

``actor_rollout_ref.rollout.trace.backend=trackstore`` turns it on. :func:`patch` (called by
:func:`trackstore.integrations.verl.install`) changes three names of ``verl.utils.rollout_trace``
in place, once:

* ``RolloutTraceConfig.init`` accepts ``backend="trackstore"`` and sets a :class:`TraceClient`;
* ``rollout_trace_attr`` still runs verl's original (which sets verl's own context) and, for
  this backend, opens one trackstore trace per trajectory: a root span (``agent_loop``) with
  step, sample_index, rollout_n and validate;
* ``rollout_trace_op`` wraps verl's decorator: for this backend each decorated call becomes a
  span, nested under the innermost open span of its trajectory (asyncio tasks of one batch
  never mix: parents live in context variables), with inputs, outputs (verl's decoded
  ``prompt_text``/``response_text`` added when ``token2text`` is on), start/end time, and the
  error of a call that raised (re-raised unchanged). For any other backend verl's code runs
  unchanged.

Both functions are replaced before verl's agent-loop modules import them (the plugin runs at
``import verl``); bindings already imported elsewhere are rebound. Recording trouble is logged,
never raised into a rollout. Needs verl >= 0.8.0 (``token2text``: >= 0.9.0).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from typing import Any, Iterator, Mapping

from .verl_runs import BACKEND, activity, log, mark, marked, run_for

# The trajectory (trackstore trace) the current asyncio task is inside, and its innermost span.
_current_trace: contextvars.ContextVar[Any] = contextvars.ContextVar("trackstore_verl_trace", default=None)


class TraceClient:
    """``RolloutTraceConfig.client`` for backend ``trackstore``: opens trajectories lazily."""

    def __init__(self, project_name: str | None, experiment_name: str | None):
        self.project_name = project_name
        self.experiment_name = experiment_name

    @property
    def run(self) -> Any:
        return run_for(self.project_name, self.experiment_name)

    @contextlib.contextmanager
    def trajectory(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
        fields, extra = _trace_fields(attributes)
        try:
            run = self.run
            activity.begin(run)
        except Exception as exc:
            log.warning("trackstore: rollout trace not recorded: %s", exc)
            yield None
            return
        try:
            tr = run.trace(name=name, **fields, **extra)
            tr.__enter__()
        except Exception as exc:
            log.warning("trackstore: rollout trace not recorded: %s", exc)
            tr = None
        if tr is None:
            try:
                yield None
            finally:
                activity.end(run, flush=False)
            return
        token = _current_trace.set(tr)
        exc_info: tuple = (None, None, None)
        try:
            yield tr
        except BaseException as exc:
            exc_info = (type(exc), exc, exc.__traceback__)
            raise
        finally:
            _current_trace.reset(token)
            try:
                tr.__exit__(*exc_info)
            except Exception as exc:
                log.warning("trackstore: closing rollout trace: %s", exc)
            activity.end(run, flush=True)


def _trace_fields(attributes: Mapping[str, Any]) -> tuple[dict, dict]:
    """Split verl's trace attributes into trackstore's trace fields and extra attributes."""
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key in ("step", "sample_index", "rollout_n"):
        value = attributes.get(key)
        if value is None:
            continue
        try:
            fields[key] = int(value.item() if hasattr(value, "item") else value)
        except (TypeError, ValueError):
            extra[f"verl_{key}"] = str(value)  # e.g. a uuid sample index from extra_info.index
    if "validate" in attributes:
        extra["validate"] = bool(attributes["validate"])
    for key, value in attributes.items():
        if key not in ("step", "sample_index", "rollout_n", "validate") and value is not None:
            extra[key] = value if isinstance(value, (str, int, float, bool)) else str(value)
    return fields, extra


# What the trace patch uses of verl.utils.rollout_trace (present since verl 0.8.0).
_TRACE_NEEDS = ("RolloutTraceConfig", "rollout_trace_attr", "rollout_trace_op", "_trace_enabled",
                "_current_trace_attributes")


def patch(rt: Any) -> None:
    """Patch the module ``verl.utils.rollout_trace`` (idempotent; a no-op on verl < 0.8)."""
    missing = [n for n in _TRACE_NEEDS if not hasattr(rt, n)]
    if missing:  # an older verl: metrics and samples work, the trace backend is not offered
        log.info("trackstore: verl's rollout_trace lacks %s; the trackstore trace backend is off", missing)
        return
    config_cls = rt.RolloutTraceConfig
    original_init = config_cls.init.__func__
    if not marked(original_init):

        def init(cls, project_name, experiment_name, backend, token2text=False, max_samples_per_step_per_worker=None):
            if backend != BACKEND:
                return original_init(cls, project_name, experiment_name, backend, token2text,
                                     max_samples_per_step_per_worker)
            config = cls.get_instance()
            if config._initialized:
                return None
            config.backend = BACKEND
            config.token2text = token2text
            config.project_name = project_name
            config.experiment_name = experiment_name
            config.max_samples_per_step_per_worker = max_samples_per_step_per_worker
            config.client = TraceClient(project_name, experiment_name)
            config._initialized = True
            return None

        functools.update_wrapper(init, original_init)
        config_cls.init = classmethod(mark(init, original_init))

    if not marked(rt.rollout_trace_attr):
        original_attr = rt.rollout_trace_attr

        @contextlib.contextmanager
        def rollout_trace_attr(sample_index=None, step=None, rollout_n=None, name="rollout_trace", validate=False,
                               trace: bool = True):
            # verl's original sets its own context (and does nothing else for this backend).
            with original_attr(sample_index=sample_index, step=step, rollout_n=rollout_n, name=name,
                               validate=validate, trace=trace):
                client = config_cls.get_client()
                if not trace or config_cls.get_backend() != BACKEND or not isinstance(client, TraceClient):
                    yield
                    return
                attributes = rt._current_trace_attributes()
                with client.trajectory(name, attributes):
                    yield

        functools.update_wrapper(rollout_trace_attr, original_attr)
        _rebind(rt, "rollout_trace_attr", original_attr, mark(rollout_trace_attr, original_attr))

    if not marked(rt.rollout_trace_op):
        original_op = rt.rollout_trace_op

        def rollout_trace_op(func):
            verl_wrapped = original_op(func)
            sig = inspect.signature(func)

            def active() -> bool:
                return config_cls.get_backend() == BACKEND and rt._trace_enabled.get()

            def inputs_of(self, args, kwargs) -> dict:
                bound = sig.bind(self, *args, **kwargs)
                bound.apply_defaults()
                inputs = dict(bound.arguments)
                inputs.pop("self", None)
                return inputs

            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def async_wrapper(self, *args, **kwargs):
                    if not active():
                        return await verl_wrapped(self, *args, **kwargs)
                    inputs = inputs_of(self, args, kwargs)
                    with _op_span(func.__qualname__, inputs) as record:
                        result = await func(self, *args, **kwargs)
                        record(await _with_text(rt, config_cls, self, inputs, result))
                    return result

                return mark(async_wrapper, verl_wrapped)

            @functools.wraps(func)
            def wrapper(self, *args, **kwargs):
                if not active():
                    return verl_wrapped(self, *args, **kwargs)
                with _op_span(func.__qualname__, inputs_of(self, args, kwargs)) as record:
                    result = func(self, *args, **kwargs)
                    record(result)
                return result

            return mark(wrapper, verl_wrapped)

        functools.update_wrapper(rollout_trace_op, original_op)
        _rebind(rt, "rollout_trace_op", original_op, mark(rollout_trace_op, original_op))


async def _with_text(rt: Any, config_cls: Any, instance: Any, inputs: Mapping[str, Any], result: Any) -> Any:
    """``result`` with verl's token2text fields added (``prompt_text``, ``response_text``) when
    ``token2text`` is on; ``result`` itself if it is off, unavailable (verl < 0.9) or fails."""
    add = getattr(rt, "_add_token2text", None)
    if add is None or not config_cls.enable_token2text():
        return result
    try:
        return await add(instance, inputs, result)
    except Exception as exc:
        log.warning("trackstore: token2text for a span failed: %s", exc)
        return result


def _rebind(module: Any, name: str, original: Any, replacement: Any) -> None:
    """Replace ``module.name`` and every already-imported ``from module import name`` binding."""
    import sys

    setattr(module, name, replacement)
    for mod in list(sys.modules.values()):
        if mod is not None and mod is not module and getattr(mod, "__dict__", {}).get(name) is original:
            try:
                setattr(mod, name, replacement)
            except Exception:
                pass


@contextlib.contextmanager
def _op_span(name: str, inputs: Mapping[str, Any]) -> Iterator[Any]:
    """A span for one traced call, inside the current trajectory (or a trace of its own).

    Yields ``record(outputs)``. An exception of the traced call is recorded on the span and
    re-raised unchanged; trouble recording the span is only logged.
    """
    tr = _current_trace.get()
    owned = None
    outputs: list = []
    try:
        if tr is None:  # a traced call outside any trajectory (e.g. a direct generate call)
            client = _verl_client()
            if client is None:
                raise RuntimeError("no trace client")
            attrs = _verl_attributes()
            fields, extra = _trace_fields(attrs)
            owned = tr = client.run.trace(name=name, **fields, **extra)
            tr.__enter__()
        span_cm = tr.span(name, kind=_span_kind(name), inputs=dict(inputs))
        span = span_cm.__enter__()
    except Exception as exc:
        log.warning("trackstore: span %s not recorded: %s", name, exc)
        yield lambda _outputs: None
        return
    exc_info: tuple = (None, None, None)
    try:
        yield outputs.append
    except BaseException as exc:
        exc_info = (type(exc), exc, exc.__traceback__)
        raise
    finally:
        try:
            if outputs and exc_info[0] is None:
                _set_outputs(span, outputs[-1])
            span_cm.__exit__(*exc_info)
            if owned is not None:
                owned.__exit__(*exc_info)
        except Exception as exc:
            log.warning("trackstore: closing span %s: %s", name, exc)


def _verl_client() -> Any:
    from verl.utils.rollout_trace import RolloutTraceConfig

    client = RolloutTraceConfig.get_client()
    return client if isinstance(client, TraceClient) else None


def _verl_attributes() -> dict:
    from verl.utils import rollout_trace

    return rollout_trace._current_trace_attributes()


def _span_kind(qualname: str) -> str:
    """A coarse span kind from verl's op name: ``llm`` for generation, ``tool`` for tools."""
    lowered = qualname.lower()
    if "generate" in lowered:
        return "llm"
    if "tool" in lowered or "execute" in lowered:
        return "tool"
    if lowered.endswith(".run"):
        return "agent"
    return "other"


def _set_outputs(span: Any, value: Any) -> None:
    setter = getattr(span, "set_outputs", None)
    if callable(setter):
        setter(value)
    else:
        span.outputs = value
