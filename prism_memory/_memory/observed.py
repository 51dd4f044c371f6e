"""A public call of :class:`~prism_memory.memory.Memory` as telemetry sees it: one span named and
attributed per the GenAI memory conventions, the recall latency and refusal metrics -- and, only
with content capture on, the scrubbed query and records of a recall or a remember.

Nothing about an entry a call forgets, revokes or reads by id is captured (only ``remember`` and
``recall`` carry content, and a recall returns visible entries only)."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Concatenate, ParamSpec, TypeVar

from .. import _telemetry as otel
from .._results import MemoryRecord, WorkingMemoryRecord
from ..errors import CapExceededError, PrismMemoryError, ValidationError
from .core import MemoryContext, S

__all__ = ["observed", "public_call"]

T = TypeVar("T")
P = ParamSpec("P")


def public_call(
    operation: str,
) -> Callable[
    [Callable[Concatenate[S, P], Coroutine[Any, Any, T]]],
    Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
]:
    """A public call of the facade: its :class:`PrismMemoryError` messages pass through the
    memory's scrubber (its ``secrets`` and ``redactor``, like the text it stores) and,
    when a tracer or meter provider is configured, observed as ``operation``
    (``gen_ai.operation.name``); without one it costs two attribute reads."""

    def decorate(
        method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, T]]:
        name = method.__name__

        @functools.wraps(method)
        async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
            if not otel.observing():
                try:
                    return await method(self, *args, **kwargs)
                except PrismMemoryError as exc:
                    self._ctx.scrub_error(exc)
                    raise
            result: T = await observed(
                self._ctx, operation, name, lambda: method(self, *args, **kwargs), args, kwargs
            )
            return result

        return call

    return decorate


async def observed(
    ctx: MemoryContext,
    operation: str,
    name: str,
    call: Callable[[], Awaitable[Any]],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> Any:
    """Run ``call`` (``Memory.<name>``, a ``gen_ai.operation.name`` of ``operation``) observed."""
    meters = otel.instruments()
    store = ctx.store_id
    tracing = otel.tracer() is not None
    started = time.perf_counter()
    manager: Any = (
        otel.start(
            otel.span_name(operation, store),
            {
                "gen_ai.operation.name": operation,
                "gen_ai.memory.store.id": store,
                "code.function.name": f"Memory.{name}",
            },
        )
        if tracing
        else nullcontext()
    )
    error: str | None = None
    try:
        with manager as span:
            try:
                result = await call()
            except BaseException as exc:
                error = type(exc).__name__
                if isinstance(exc, PrismMemoryError):
                    ctx.scrub_error(exc)
                    if meters is not None:
                        _count_refusal(meters, exc, name)
                if span is not None:
                    otel.set_error(span, exc)
                raise
            if span is not None and span.is_recording():
                _describe(span, ctx, name, args, kwargs, result)
            return result
    finally:
        if meters is not None and name == "recall":
            attributes = {"gen_ai.memory.store.id": store}
            if error is not None:
                attributes["error.type"] = error
            meters.recall_duration.record(time.perf_counter() - started, attributes)


def _count_refusal(meters: otel.Instruments, exc: PrismMemoryError, name: str) -> None:
    kind = (
        "cap"
        if isinstance(exc, CapExceededError)
        else "validation"
        if isinstance(exc, ValidationError)
        else None
    )
    if kind is not None:
        meters.refusals.add(
            1,
            {
                "prism_memory.refusal": kind,
                "error.type": type(exc).__name__,
                "code.function.name": f"Memory.{name}",
            },
        )


def _count(result: object) -> int | None:
    """``gen_ai.memory.record.count``: the records a call returned or attempted to change (one
    for a call on one record: ``set_consent``, ``correct``, ``update_working``, ``get``)."""
    if isinstance(result, bool):
        return None
    if isinstance(result, int):
        return result
    if isinstance(result, MemoryRecord | WorkingMemoryRecord):
        return 1
    for field in ("hits", "accepted", "entries", "source_ids"):
        value = getattr(result, field, None)
        if isinstance(value, tuple):
            return len(value)
    for field in ("deleted", "rebuilt"):
        value = getattr(result, field, None)
        if isinstance(value, int):
            return value
    if isinstance(result, Mapping):
        return len(result)
    return None


def _describe(
    span: Any,
    ctx: MemoryContext,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    result: object,
) -> None:
    count = _count(result)
    if count is not None:
        span.set_attribute("gen_ai.memory.record.count", count)
    if name == "recall":
        top_k = kwargs.get("top_k")
        span.set_attribute("gen_ai.request.top_k", ctx.limits.resolve("top_k", top_k))
    if not otel.capture_content():
        return
    scrub = ctx.scrubber.text
    if name == "recall":
        query = args[0] if args else kwargs.get("query")
        if isinstance(query, str):
            span.set_attribute("gen_ai.memory.query.text", scrub(query))
        hits = getattr(result, "hits", ())
        span.set_attribute(
            "gen_ai.memory.records",
            otel.records_json(((h.record.id, h.record.text, h.score) for h in hits), scrub),
        )
    elif name == "remember":
        accepted = getattr(result, "accepted", ())
        raw = args[0] if args else kwargs.get("entries")
        items = raw if isinstance(raw, Sequence) and not isinstance(raw, str) else [raw]
        texts = [_text(item) for item in items]
        span.set_attribute(
            "gen_ai.memory.records",
            otel.records_json(((i, t, None) for i, t in zip(accepted, texts, strict=False)), scrub),
        )


def _text(item: object) -> str:
    text = item.get("text") if isinstance(item, Mapping) else getattr(item, "text", "")
    return text if isinstance(text, str) else ""
