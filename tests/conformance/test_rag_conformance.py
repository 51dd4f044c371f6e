"""The shipped RAG conformance suite, run on every backend (one test per check and backend)."""

from __future__ import annotations

import pytest

from prism_memory import HashEmbedder
from prism_memory.rag import InMemoryRagStore
from prism_memory.testing import (
    RAG_CONFORMANCE_CHECKS,
    ConformanceError,
    RagConformanceKit,
    run_rag_conformance,
    run_rag_conformance_check,
)

WIDTH = 64


@pytest.fixture(params=["memory", "postgres"])
async def rag_kit(request: pytest.FixtureRequest) -> RagConformanceKit:
    embedder = HashEmbedder(dimensions=WIDTH)
    if request.param == "memory":
        return RagConformanceKit(InMemoryRagStore(dimension=WIDTH), embedder)
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    stores = await make_postgres_stores(dimension=WIDTH)
    return RagConformanceKit(stores.vector_store, embedder)


@pytest.mark.parametrize("check", list(RAG_CONFORMANCE_CHECKS))
async def test_rag_conformance(rag_kit: RagConformanceKit, check: str) -> None:
    await run_rag_conformance_check(check, lambda: rag_kit)


async def test_run_rag_conformance_reports_a_store_that_ignores_the_acl() -> None:
    class LeakyStore(InMemoryRagStore):
        async def query(self, scope, *, authorization=None, **kwargs):  # type: ignore[override]
            return await super().query(scope, authorization=None, **kwargs)

    kit = RagConformanceKit(LeakyStore(dimension=WIDTH), HashEmbedder(dimensions=WIDTH))
    with pytest.raises(ConformanceError) as caught:
        await run_rag_conformance(lambda: kit, only=["acl_denies_by_default"])
    assert set(caught.value.failures) == {"acl_denies_by_default"}
