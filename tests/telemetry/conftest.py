"""An OpenTelemetry SDK tracer and meter provider per test, with in-memory exporter and reader,
handed to prism_memory with :func:`prism_memory.telemetry.configure` (the global providers can be
set only once per process)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prism_memory import InMemoryVectorStore, telemetry
from prism_memory.stores.base import VectorStore


@dataclass
class Telemetry:
    """What the package emitted during a test."""

    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def capture(self, on: bool) -> None:
        """Turn content capture on or off for the rest of the test."""
        telemetry.configure(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=on,
        )

    def finished(self) -> tuple[ReadableSpan, ...]:
        """The spans ended so far."""
        return tuple(self.spans.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        """The ended spans whose name starts with ``prefix``."""
        return [span for span in self.finished() if span.name.startswith(prefix)]

    def exactly(self, name: str) -> list[ReadableSpan]:
        """The ended spans named ``name``."""
        return [span for span in self.finished() if span.name == name]

    def by_function(self, function: str) -> list[ReadableSpan]:
        """The ended spans whose ``code.function.name`` is ``function``."""
        return [
            span
            for span in self.finished()
            if span.attributes is not None and span.attributes.get("code.function.name") == function
        ]

    def metrics(self) -> dict[str, list[object]]:
        """Metric name -> its data points (the reader collects now)."""
        data = self.reader.get_metrics_data()
        found: dict[str, list[object]] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found.setdefault(metric.name, []).extend(metric.data.data_points)
        return found

    def everything(self) -> str:
        """Every span (name, attributes, events, links, status) and every metric, as JSON text."""
        data = self.reader.get_metrics_data()
        parts = [span.to_json() for span in self.finished()]
        parts.append(data.to_json() if data is not None else "")
        return "\n".join(parts)


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """Content capture off; the test may call ``telemetry.configure`` again to turn it on."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield Telemetry(spans, reader, tracer_provider, meter_provider)
    telemetry.configure()
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[VectorStore]:
    """An empty vector store of each backend."""
    if request.param == "memory":
        yield InMemoryVectorStore()
        return
    made = await request.getfixturevalue("make_postgres_stores")()
    yield made.vector_store
