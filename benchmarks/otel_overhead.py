"""What OpenTelemetry costs per recall: the same recalls, side by side in one run, in three modes.

* **API absent** -- the shim as without the ``otel`` extra (``opentelemetry`` not importable):
  every instrumented call takes its uninstrumented path at once; the baseline;
* **API, no provider** -- ``opentelemetry-api`` installed and nothing configured (the API's
  default proxy provider): what every user of the extra who has not set up an SDK pays;
* **SDK provider** -- an ``opentelemetry-sdk`` tracer provider (batch processor, an exporter that
  drops what it gets) and meter provider (an in-memory reader): what tracing and metrics cost.

Each round runs ``--queries`` recalls per mode, the first mode rotating between rounds, on a
thread of ``--entries`` entries (the hash embedder, so embedding costs next to nothing and the
instrumentation's share is as large as it can be). In memory by default; ``--postgres`` adds the
same on the embedded PostgreSQL (or ``--url``).

    .venv/bin/python benchmarks/otel_overhead.py
    .venv/bin/python benchmarks/otel_overhead.py --postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks._common import database
from prism_memory import HashEmbedder, IndexingPolicy, _telemetry, create_memory, telemetry
from prism_memory.memory import Memory
from prism_memory.stores.base import VectorStore

MODES = ("API absent", "API, no provider", "SDK provider")
WORDS = [
    "ada",
    "bees",
    "boats",
    "hives",
    "honey",
    "sails",
    "wind",
    "river",
    "orchard",
    "garden",
    "kettle",
    "lamp",
]


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@contextlib.contextmanager
def mode(name: str, tracer: TracerProvider, meter: MeterProvider) -> Iterator[None]:
    trace_api, metrics_api = _telemetry._trace, _telemetry._metrics
    if name == "API absent":
        _telemetry._trace = _telemetry._metrics = None  # type: ignore[assignment]
        telemetry.configure()
    elif name == "API, no provider":
        telemetry.configure()
    else:
        telemetry.configure(tracer_provider=tracer, meter_provider=meter)
    try:
        yield
    finally:
        _telemetry._trace, _telemetry._metrics = trace_api, metrics_api
        telemetry.configure()


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(8))


async def fill(memory: Memory, entries: int, rng: random.Random) -> None:
    for start in range(0, entries, 250):
        batch = [{"text": f"{text(rng)} {n}"} for n in range(start, min(entries, start + 250))]
        await memory.remember(batch, wait=True)


async def run(store: VectorStore, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    rng = random.Random(7)
    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(_Drop()))
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    times: dict[str, list[float]] = {m: [] for m in MODES}
    memory = create_memory(
        tenant_id="bench",
        resource_id="r",
        thread_id="t",
        embedder=HashEmbedder(dimensions=384),
        vector_store=store,
        indexing=IndexingPolicy(),
    )
    async with memory:
        await fill(memory, args.entries, rng)
        queries = [text(rng) for _ in range(args.queries)]
        for query in queries[:20]:  # warm-up
            await memory.recall(query)
        gc.freeze()
        for round_ in range(args.rounds):
            order = MODES[round_ % 3 :] + MODES[: round_ % 3]
            for name in order:
                with mode(name, tracer, meter):
                    for query in queries:
                        started = time.perf_counter()
                        await memory.recall(query)
                        times[name].append(time.perf_counter() - started)
    tracer.shutdown()
    meter.shutdown()
    base = statistics.median(times[MODES[0]])
    return {
        name: {
            "p50_ms": round(statistics.median(values) * 1000, 4),
            "p95_ms": round(sorted(values)[int(0.95 * len(values))] * 1000, 4),
            "p50_ratio": round(statistics.median(values) / base, 4),
        }
        for name, values in times.items()
    }


def table(title: str, results: dict[str, dict[str, float]]) -> str:
    lines = [f"### {title}", "", "| mode | recall p50 (ms) | p95 (ms) | p50 vs API absent |"]
    lines.append("| --- | ---: | ---: | ---: |")
    for name, row in results.items():
        lines.append(f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {row['p50_ratio']:.3f} |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from prism_memory import InMemoryVectorStore

    out: dict[str, Any] = {"in memory": await run(InMemoryVectorStore(), args)}
    if args.postgres or args.url:
        from prism_memory.postgres import create_postgres_memory_stores

        with database(args.url) as (url, _):
            stores = await create_postgres_memory_stores(url, schema="prism_bench_otel")
            try:
                out["PostgreSQL"] = await run(stores.vector_store, args)
            finally:
                await stores.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--url", default=None)
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{platform.python_version()}, {args.entries} entries, {args.queries} queries x "
        f"{args.rounds} rounds per mode\n"
    )
    for title, result in results.items():
        print(table(title, result) + "\n")


if __name__ == "__main__":
    main()
