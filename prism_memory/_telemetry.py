"""The OpenTelemetry shim: spans and metrics in the GenAI memory conventions, or nothing at all.

``opentelemetry-api`` is optional (the ``otel`` extra). Without it, or without a configured tracer
or meter provider (the API's default proxy), :func:`tracer` and :func:`instruments` return ``None``
and every instrumented call takes its uninstrumented path: no span, no attribute dict. A provider
is the global one (``opentelemetry.trace.set_tracer_provider``) or one given to
:func:`prism_memory.telemetry.configure`.

What may leave in telemetry is decided here too: never a text, query, metadata, id or
working-memory value unless content capture is on (:func:`capture_content`), and then only what
the memory's scrubber returns. Span statuses name an error's type, never its message.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

try:  # the `otel` extra: without it every function here is a no-op
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised by a subprocess test
    _metrics = None  # type: ignore[assignment]
    _trace = None  # type: ignore[assignment]

__all__ = [
    "CAPTURE_ENV",
    "Instruments",
    "capture_content",
    "configure",
    "db_span",
    "instruments",
    "link_for",
    "observing",
    "operation_span",
    "records_json",
    "remember_links",
    "set_error",
    "span_name",
    "start",
    "store_id",
    "traced",
    "tracer",
]

T = TypeVar("T")
P = ParamSpec("P")

CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI conventions' content-capture switch (``true`` to opt in)."""
SCOPE = "prism_memory"
_LINKS_KEPT = 4096
_RECHECK_SECONDS = 1.0
"""A global provider set after the first instrumented call is picked up within this long."""
_NULL: AbstractContextManager[None] = nullcontext()


@dataclass(frozen=True, slots=True)
class Instruments:
    """The package's metric instruments, made once per meter provider."""

    recall_duration: Any
    embed_duration: Any
    pending: Any
    retries: Any
    failures: Any
    import_rows: Any
    refusals: Any


class _State:
    __slots__ = (
        "capture",
        "instruments",
        "links",
        "meter_provider",
        "meters_retry",
        "tracer",
        "tracer_provider",
        "tracer_retry",
    )

    def __init__(self) -> None:
        self.tracer_provider: Any = None
        self.meter_provider: Any = None
        self.capture: bool | None = None
        self.tracer: Any = None
        self.instruments: Instruments | None = None
        self.links: OrderedDict[tuple[object, str], Any] = OrderedDict()
        self.tracer_retry = 0.0
        """When to ask the API for a global tracer provider again (none was set at the last look):
        at most once per :data:`_RECHECK_SECONDS`, so the unconfigured path stays a clock read."""
        self.meters_retry = 0.0


_state = _State()


def configure(
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool | None = None,
) -> None:
    """See :func:`prism_memory.telemetry.configure`."""
    _state.tracer_provider = tracer_provider
    _state.meter_provider = meter_provider
    _state.capture = capture_content
    _state.tracer = None
    _state.instruments = None
    _state.tracer_retry = _state.meters_retry = 0.0
    _state.links.clear()


def _unset(provider: object) -> bool:
    """Whether ``provider`` is the API's default (a proxy with nothing behind it) or a no-op."""
    return type(provider).__name__ in {
        "ProxyTracerProvider",
        "NoOpTracerProvider",
        "_ProxyMeterProvider",
        "NoOpMeterProvider",
    }


def observing() -> bool:
    """Whether anything would record a span or a measurement (a tracer or the meters): a call
    that is neither traced nor measured skips its telemetry at once."""
    return tracer() is not None or instruments() is not None


def tracer() -> Any:
    """The package's tracer, or ``None`` when nothing would record a span."""
    found = _state.tracer
    if found is not None or _trace is None:
        return found
    now = time.monotonic()
    if now < _state.tracer_retry:
        return None
    provider = _state.tracer_provider or _trace.get_tracer_provider()
    if _unset(provider):
        _state.tracer_retry = now + _RECHECK_SECONDS
        return None
    found = _state.tracer = provider.get_tracer(SCOPE)
    return found


def instruments() -> Instruments | None:
    """The package's metric instruments, or ``None`` when no meter provider is configured."""
    found = _state.instruments
    if found is not None or _metrics is None:
        return found
    now = time.monotonic()
    if now < _state.meters_retry:
        return None
    provider = _state.meter_provider or _metrics.get_meter_provider()
    if _unset(provider):
        _state.meters_retry = now + _RECHECK_SECONDS
        return None
    meter = provider.get_meter(SCOPE)
    found = _state.instruments = Instruments(
        recall_duration=meter.create_histogram(
            "prism_memory.recall.duration", unit="s", description="Duration of Memory.recall"
        ),
        embed_duration=meter.create_histogram(
            "prism_memory.embed.duration", unit="s", description="Duration of one embedder call"
        ),
        pending=meter.create_up_down_counter(
            "prism_memory.indexing.pending",
            unit="{entry}",
            description="Entries stored and awaiting their vector (handed over minus settled)",
        ),
        retries=meter.create_counter(
            "prism_memory.indexing.retries", unit="{entry}", description="Embeddings to retry"
        ),
        failures=meter.create_counter(
            "prism_memory.indexing.failures",
            unit="{entry}",
            description="Entries marked failed (no more retries)",
        ),
        import_rows=meter.create_counter(
            "prism_memory.import.rows", unit="{entry}", description="Rows a bulk import handled"
        ),
        refusals=meter.create_counter(
            "prism_memory.refusals",
            unit="{call}",
            description="Calls refused by a cap or a validation rule",
        ),
    )
    return found


def capture_content() -> bool:
    """Whether content (texts, queries, ids) may go into spans: :func:`configure`'s
    ``capture_content``, else the environment's :data:`CAPTURE_ENV` (``true``); off by default."""
    if _state.capture is not None:
        return _state.capture
    return os.environ.get(CAPTURE_ENV, "").strip().lower() == "true"


def store_id(store: object) -> str:
    """``gen_ai.memory.store.id`` of a store: its ``telemetry_id`` or its class name (never a
    tenant, resource or thread)."""
    named = getattr(store, "telemetry_id", None)
    return named if isinstance(named, str) else type(store).__name__


def set_error(span: Any, exc: BaseException) -> None:
    """Mark ``span`` failed, naming ``exc``'s type only (its message may quote a caller's value)."""
    name = type(exc).__name__
    span.set_attribute("error.type", name)
    if _trace is not None:
        span.set_status(_trace.StatusCode.ERROR, name)


def start(
    name: str, attributes: dict[str, Any], *, kind: str = "INTERNAL", links: Any = None
) -> AbstractContextManager[Any]:
    """A current span (a context manager) of the package's tracer; the caller checked
    :func:`tracer`. Exceptions are not recorded (their messages may hold content)."""
    found = tracer()
    if _trace is None or found is None:
        return _NULL
    manager: AbstractContextManager[Any] = found.start_as_current_span(
        name,
        kind=getattr(_trace.SpanKind, kind),
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    )
    return manager


@contextmanager
def _failing(manager: AbstractContextManager[Any]) -> Iterator[Any]:
    with manager as span:
        try:
            yield span
        except BaseException as exc:
            set_error(span, exc)
            raise


def operation_span(
    operation: str, store: object, function: str, **attributes: Any
) -> AbstractContextManager[Any]:
    """The span of a public call (``gen_ai.operation.name`` ``operation`` on ``store``), failed
    with the error's type only; the null context when nothing records spans."""
    if tracer() is None:
        return _NULL
    named = store_id(store)
    attributes.update(
        {
            "gen_ai.operation.name": operation,
            "gen_ai.memory.store.id": named,
            "code.function.name": function,
        }
    )
    if operation == "retrieval":
        attributes["gen_ai.data_source.id"] = named
    return _failing(start(span_name(operation, named), attributes))


def span_name(operation: str, store: str) -> str:
    """A GenAI span's name: a memory operation's is its ``gen_ai.operation.name`` alone; a
    retrieval's is ``retrieval {gen_ai.data_source.id}`` (the store's id)."""
    return f"{operation} {store}" if operation == "retrieval" else operation


def traced(
    operation: str, function: str, *, count: Callable[[Any], int] | None = None
) -> Callable[
    [Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]],
    Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
]:
    """A module function whose first argument is a store, traced as :func:`operation_span`
    (``gen_ai.request.top_k`` from a ``top_k`` keyword, the record count from ``count``)."""

    def decorate(
        function_: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
    ) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
        @functools.wraps(function_)
        async def call(store: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
            if tracer() is None:
                return await function_(store, *args, **kwargs)
            top_k = kwargs.get("top_k")
            extra = {"gen_ai.request.top_k": top_k} if isinstance(top_k, int) else {}
            with operation_span(operation, store, function, **extra) as span:
                result = await function_(store, *args, **kwargs)
                if count is not None:
                    span.set_attribute("gen_ai.memory.record.count", count(result))
                return result

        return call

    return decorate


def db_span(action: str) -> AbstractContextManager[Any]:
    """A client span around one database round trip, named by its statement name ``action``
    (``db.operation.name``) -- never the SQL text or its parameters."""
    if tracer() is None:
        return _NULL
    return start(
        action,
        {"db.system.name": "postgresql", "db.operation.name": action},
        kind="CLIENT",
    )


def remember_links(scope: object, ids: Iterable[str]) -> None:
    """Remember the current span as the origin of ``scope``'s rows ``ids`` handed to the indexing
    queue, so the batch that embeds them links to it (a bounded side map, oldest dropped)."""
    if _trace is None:
        return
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return
    links = _state.links
    for entry_id in ids:
        links[(scope, entry_id)] = context
    while len(links) > _LINKS_KEPT:
        links.popitem(last=False)


def link_for(items: Sequence[Any]) -> list[Any]:
    """The links of a batch of claimed rows to the calls that handed them over (one per call)."""
    if _trace is None or not _state.links:
        return []
    seen: dict[int, Any] = {}
    for item in items:
        context = _state.links.pop((item.scope, item.id), None)
        if context is not None:
            seen.setdefault(context.span_id, _trace.Link(context))
    return list(seen.values())


def records_json(
    records: Iterable[tuple[str, str, float | None]], scrub: Callable[[str], str]
) -> str:
    """``gen_ai.memory.records``: a JSON array of ``{id, content, score}``, every string scrubbed."""
    items = []
    for entry_id, text, score in records:
        item: dict[str, Any] = {"id": scrub(entry_id), "content": scrub(text)}
        if score is not None:
            item["score"] = score
        items.append(item)
    return json.dumps(items, ensure_ascii=False)
