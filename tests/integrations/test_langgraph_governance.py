"""PrismStore keeps prism_memory's governance: tenant binding, consent, hold, real delete, export,
retention -- on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from prism_memory import AccessDeniedError, InMemoryVectorStore, NotFoundError
from prism_memory.integrations.langgraph import PrismStore

pytestmark = pytest.mark.postgres

NS = ("users", "ada", "memories")


async def test_a_namespace_is_one_thread_of_the_store_tenant_and_resource(make_store) -> None:
    async with make_store(tenant_id="acme", resource_id="agent-7") as store:
        scope = store.scope(NS)
        assert (scope.tenant_id, scope.resource_id, scope.thread_id) == (
            "acme",
            "agent-7",
            "users.ada.memories",
        )
        await store.aput(NS, "k", {"food": "pears"})
        async with await store.memory(NS) as memory:
            record = await memory.get("k")
        assert record.text == '{"food": "pears"}'
        assert (record.tenant_id, record.thread_id) == ("acme", "users.ada.memories")


async def test_revoked_items_are_invisible_and_an_overwrite_keeps_them_revoked(make_store) -> None:
    async with make_store() as store:
        await store.aput(NS, "k", {"food": "pears"})
        await store.aput(NS, "other", {"food": "figs"})
        async with await store.memory(NS) as memory:
            await memory.set_consent("k", visible=False)
            assert await store.aget(NS, "k") is None
            assert [item.key for item in await store.asearch(NS)] == ["other"]
            await store.aput(NS, "k", {"food": "plums"})  # a write never loosens governance
            assert await store.aget(NS, "k") is None
            await memory.set_consent("k", visible=True)
        assert (await store.aget(NS, "k")).value == {"food": "plums"}


async def test_a_held_item_survives_delete_and_refuses_overwrite(make_store) -> None:
    async with make_store() as store:
        await store.aput(NS, "k", {"food": "pears"})
        async with await store.memory(NS) as memory:
            assert await memory.forget(ids=["k"], hold=True) == 0
            assert await store.aget(NS, "k") is None
            await store.adelete(NS, "k")
            assert (await memory.get("k")).legal_hold is True  # the body is kept
            with pytest.raises(AccessDeniedError):
                await store.aput(NS, "k", {"food": "plums"})
            with pytest.raises(AccessDeniedError):  # an empty value is a value, not a delete
                await store.aput(NS, "k", {})
            assert (await memory.get("k")).text == '{"food": "pears"}'
            assert await memory.forget(ids=["k"]) == 1  # prism's own forget lifts the hold


async def test_delete_is_a_real_delete(make_store) -> None:
    async with make_store() as store:
        await store.aput(NS, "k", {"food": "pears"})
        await store.adelete(NS, "k")
        async with await store.memory(NS) as memory:
            with pytest.raises(NotFoundError):
                await memory.get("k")
            assert await memory.index_status(["k"]) == {}


async def test_items_with_consent_are_exported(make_store) -> None:
    consent = {"source": "agent", "scope": "thread", "visible": True}
    async with make_store(consent=consent) as store:
        await store.aput(NS, "a", {"food": "pears"})
        await store.aput(NS, "b", {"food": "figs"})
        async with await store.memory(NS) as memory:
            await memory.set_consent("b", visible=False)
            page = await memory.export_memory(identity=store.scope(NS))
        assert [(e["id"], e["text"]) for e in page.entries] == [("a", '{"food": "pears"}')]
        assert page.entries[0]["consent"]["source"] == "agent"


async def test_retention_sweeps_items(make_store) -> None:
    async with make_store() as store:
        await store.aput(NS, "old", {"food": "pears"})
        later = datetime.now(UTC) + timedelta(days=40)
        async with await store.memory(NS, clock=lambda: later) as memory:
            result = await memory.apply_retention(max_age_days=30)
        assert result.deleted == 1
        assert await store.aget(NS, "old") is None
        assert await store.alist_namespaces() == []


async def test_stores_of_two_tenants_on_one_vector_store_never_meet() -> None:
    shared = InMemoryVectorStore()
    acme = PrismStore(tenant_id="acme", vector_store=shared)
    umbrella = PrismStore(tenant_id="umbrella", vector_store=shared)
    await acme.aput(NS, "k", {"secret": "acme's"})
    assert await umbrella.aget(NS, "k") is None
    assert await umbrella.asearch(("users",)) == []
    assert await umbrella.alist_namespaces() == []
    await umbrella.adelete(NS, "k")
    assert (await acme.aget(NS, "k")).value == {"secret": "acme's"}


async def test_bad_input_is_a_typed_error_and_writes_nothing(make_store) -> None:
    from prism_memory import ValidationError

    async with make_store() as store:
        with pytest.raises(ValidationError):
            await store.aput(NS, "k", {"bad": float("nan")})
        with pytest.raises(ValidationError):
            await store.aput(NS, "k", {"bad": "nul\x00"})
        with pytest.raises(ValidationError):
            await store.aput(NS, "", {"ok": 1})
        from langgraph.store.base import PutOp

        with pytest.raises(ValidationError):  # one bad put: the good one is not written either
            await store.abatch(
                [PutOp(NS, "good", {"ok": 1}), PutOp(NS, "bad", {"x": float("inf")})]
            )
        assert await store.aget(NS, "good") is None
        assert await store.alist_namespaces() == []


async def test_items_are_recalled_by_prism_memory_itself(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        await store.aput(NS, "pears", {"text": "Ada likes pears"})
        await store.aput(NS, "quiet", {"text": "not this one"}, index=False)
        async with await store.memory(NS) as memory:
            hits = (await memory.recall("pears", top_k=1)).hits
        assert [hit.record.id for hit in hits] == ["pears"]
        assert hits[0].record.embedding_model is not None


async def test_index_embed_may_be_a_prism_embedder_or_a_function(make_store) -> None:
    from prism_memory import HashEmbedder

    hashing = HashEmbedder(dimensions=32)

    def by_function(texts: list[str]) -> list[list[float]]:
        return [hashing.embed_one(text).tolist() for text in texts]

    for embed in (hashing, by_function):
        async with make_store(index={"dims": 32, "embed": embed, "fields": ["text"]}) as store:
            await store.aput(NS, "a", {"text": "green tea every morning"})
            await store.aput(NS, "b", {"text": "a red bicycle"})
            found = await store.asearch(NS, query="green tea")
            assert [item.key for item in found] == ["a", "b"]
            assert found[0].score == pytest.approx(
                float(
                    hashing.embed_one("green tea") @ hashing.embed_one("green tea every morning")
                ),
                abs=1e-6,
            )
