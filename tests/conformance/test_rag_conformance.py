"""The shipped RAG conformance suite, run on every backend (one test per check and backend)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from prism_memory import HashEmbedder
from prism_memory.postgres import create_postgres_vector_store
from prism_memory.rag import InMemoryRagStore
from prism_memory.testing import (
    RAG_CONFORMANCE_CHECKS,
    ConformanceError,
    RagConformanceKit,
    run_rag_conformance,
    run_rag_conformance_check,
)

WIDTH = 64


async def _kit(
    request: pytest.FixtureRequest, backend: str, width: int | None
) -> RagConformanceKit:
    embedder = HashEmbedder(dimensions=WIDTH)
    if backend == "memory":
        return RagConformanceKit(InMemoryRagStore(dimension=width), embedder)
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    store = (await make_postgres_stores(dimension=width)).vector_store
    if backend == "postgres-hnsw":
        # Every vector query takes the HNSW path (iterative scan, exact fallback only if short).
        store.rag_exact_scan_max_rows = 0
    return RagConformanceKit(store, embedder)


@pytest.fixture(params=["memory", "postgres", "postgres-hnsw", "postgres-pgbouncer"])
async def rag_kit(request: pytest.FixtureRequest) -> AsyncIterator[RagConformanceKit]:
    """``postgres-pgbouncer`` reopens a fresh schema through a real PgBouncer in transaction mode
    (``pooling="transaction"``)."""
    if request.param != "postgres-pgbouncer":
        yield await _kit(request, request.param, WIDTH)
        return
    fresh = (await _kit(request, "postgres", WIDTH)).store
    pooled = await create_postgres_vector_store(
        request.getfixturevalue("pgbouncer_url"),
        schema=fresh.tables.names.schema,
        dimension=WIDTH,
        pooling="transaction",
        skip_migrations=True,
    )
    try:
        yield RagConformanceKit(pooled, HashEmbedder(dimensions=WIDTH))
    finally:
        await pooled.close()


@pytest.fixture(params=["memory", "postgres"])
async def unpinned_rag_kit(request: pytest.FixtureRequest) -> RagConformanceKit:
    return await _kit(request, request.param, None)


@pytest.mark.parametrize("check", list(RAG_CONFORMANCE_CHECKS))
async def test_rag_conformance(rag_kit: RagConformanceKit, check: str) -> None:
    await run_rag_conformance_check(check, lambda: rag_kit)


@pytest.mark.parametrize(
    "check", ["bad_vectors_write_nothing", "authorised_chunk_survives_crowding"]
)
async def test_rag_conformance_unpinned(unpinned_rag_kit: RagConformanceKit, check: str) -> None:
    """A store without a pinned width learns it from the first vectors and holds every write to it."""
    await run_rag_conformance_check(check, lambda: unpinned_rag_kit)


async def test_run_rag_conformance_reports_a_store_that_ignores_the_acl() -> None:
    class LeakyStore(InMemoryRagStore):
        async def query(self, scope, *, authorization=None, **kwargs):  # type: ignore[override]
            return await super().query(scope, authorization=None, **kwargs)

    kit = RagConformanceKit(LeakyStore(dimension=WIDTH), HashEmbedder(dimensions=WIDTH))
    with pytest.raises(ConformanceError) as caught:
        await run_rag_conformance(lambda: kit, only=["acl_denies_by_default"])
    assert set(caught.value.failures) == {"acl_denies_by_default"}
