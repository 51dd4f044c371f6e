"""The telemetry shim's own bookkeeping (``prism_memory._telemetry``; issue 47's mutation run): the
instrumentation scope every span and metric carries, the bounded map of pending links, and
``configure`` resetting what was cached for the previous providers."""

from __future__ import annotations

from opentelemetry import trace

from prism_memory import HashEmbedder, create_memory, telemetry
from prism_memory import _telemetry as otel_shim

from .conftest import Telemetry


async def test_spans_and_metrics_carry_the_package_scope(otel: Telemetry) -> None:
    async with create_memory(
        tenant_id="t", resource_id="r", thread_id="th", embedder=HashEmbedder(dimensions=16)
    ) as memory:
        await memory.recall("bees")
    assert {span.instrumentation_scope.name for span in otel.finished()} == {"prism_memory"}
    data = otel.reader.get_metrics_data()
    assert data is not None
    scopes = {s.scope.name for r in data.resource_metrics for s in r.scope_metrics}
    assert scopes == {"prism_memory"}


def test_pending_links_are_bounded_oldest_first(otel: Telemetry) -> None:
    tracer = otel.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("remember"):
        otel_shim.remember_links("scope", (f"id-{n}" for n in range(4100)))
    links = otel_shim._state.links
    assert len(links) == 4096
    assert ("scope", "id-3") not in links
    assert ("scope", "id-4") in links
    assert ("scope", "id-4099") in links
    telemetry.configure()
    assert len(otel_shim._state.links) == 0


def test_no_current_span_remembers_no_link(otel: Telemetry) -> None:
    assert not trace.get_current_span().get_span_context().is_valid
    otel_shim.remember_links("scope", ["a"])
    assert len(otel_shim._state.links) == 0


def test_no_op_providers_record_nothing(otel: Telemetry) -> None:
    from opentelemetry import metrics

    telemetry.configure(
        tracer_provider=trace.NoOpTracerProvider(), meter_provider=metrics.NoOpMeterProvider()
    )
    assert otel_shim.tracer() is None
    assert otel_shim.instruments() is None
    telemetry.configure(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    assert otel_shim.tracer() is not None
    assert otel_shim.instruments() is not None


def test_the_metric_instruments(otel: Telemetry) -> None:
    found = otel_shim.instruments()
    assert found is not None
    described = {
        (i.name, i.unit, i.description)  # type: ignore[attr-defined]
        for i in (
            found.recall_duration,
            found.embed_duration,
            found.pending,
            found.retries,
            found.failures,
            found.import_rows,
            found.refusals,
        )
    }
    assert described == {
        ("prism_memory.recall.duration", "s", "Duration of Memory.recall"),
        ("prism_memory.embed.duration", "s", "Duration of one embedder call"),
        (
            "prism_memory.indexing.pending",
            "{entry}",
            "Entries stored and awaiting their vector (handed over minus settled)",
        ),
        ("prism_memory.indexing.retries", "{entry}", "Embeddings to retry"),
        ("prism_memory.indexing.failures", "{entry}", "Entries marked failed (no more retries)"),
        ("prism_memory.import.rows", "{entry}", "Rows a bulk import handled"),
        ("prism_memory.refusals", "{call}", "Calls refused by a cap or a validation rule"),
    }
    assert otel_shim.instruments() is found  # made once per provider
