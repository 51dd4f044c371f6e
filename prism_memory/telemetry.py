"""OpenTelemetry traces and metrics of prism_memory (the ``otel`` extra: ``opentelemetry-api``).

Nothing to do for the default: spans and metrics go to the global tracer and meter providers
once the host sets them up (``opentelemetry-sdk``, an OTLP exporter...); without them, or without
``opentelemetry-api``, nothing is recorded and nothing is built. :func:`configure` hands the
package its own providers instead (tests, or a host keeping the library's telemetry apart) and
switches content capture. docs/observability.md lists every span and metric.
"""

from __future__ import annotations

from typing import Any

from . import _telemetry
from ._telemetry import CAPTURE_ENV

__all__ = ["CAPTURE_ENV", "configure"]


def configure(
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool | None = None,
) -> None:
    """Use these providers (``None``: the global ones) and this content-capture setting.

    ``capture_content=None`` follows the environment variable
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true`` turns it on); it is off by
    default. With it on, recall queries and the records a recall returns or a remember stores
    (id, text, score) go into spans -- each string through the memory's own redactor and
    ``secrets`` first, as stored. Never captured: working-memory values, metadata, and anything
    about an entry a call forgets, revokes or reads by id. Each call replaces the previous
    configuration.
    """
    _telemetry.configure(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
    )
