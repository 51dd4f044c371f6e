"""LangChain's standard VectorStore suite (langchain-tests, sync and async) against PrismVectorStore,
on the in-memory RAG store and on PostgreSQL.

One class per backend runs the suite's sync and its async tests together: a class with
``has_async=False`` (or ``has_sync=False``) skips the other half, and the suite's own
``test_no_overrides_DO_NOT_OVERRIDE`` fails a class that leaves tests out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from prism_memory.integrations.langchain import PrismVectorStore, run_sync

pytestmark = pytest.mark.postgres


class TestPrismVectorStoreInMemory(VectorStoreIntegrationTests):
    """Every test of the suite, sync and async, on the in-memory RAG store."""

    @pytest.fixture
    def vectorstore(self) -> VectorStore:
        return PrismVectorStore(self.get_embeddings())


class TestPrismVectorStorePostgres(VectorStoreIntegrationTests):
    """Every test of the suite, sync and async, on PostgreSQL (a fresh schema per test, on an
    engine without a pool, so the sync methods' private loops each open their own connection)."""

    @pytest.fixture
    async def vectorstore(self, make_postgres_stores) -> AsyncIterator[VectorStore]:
        # opened and closed on a private loop (the sync methods' own), in a worker thread, so the
        # session loop keeps running meanwhile: a transaction a background task of an earlier test
        # left open on the session loop would otherwise never end, and the migrations' CREATE
        # INDEX CONCURRENTLY waits for every open transaction (a hang seen in the full suite)
        stores = await asyncio.to_thread(run_sync, make_postgres_stores())
        try:
            yield PrismVectorStore(self.get_embeddings(), store=stores.vector_store)
        finally:
            await asyncio.to_thread(run_sync, stores.close())
