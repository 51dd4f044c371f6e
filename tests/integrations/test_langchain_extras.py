"""PrismVectorStore beyond the standard suite (filters, ACL, hybrid search, vectors given, the
retriever), the memory retriever, a retriever chain, and the embedding bridges."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory
from prism_memory.errors import CapExceededError, ValidationError
from prism_memory.integrations.langchain import (
    LangChainEmbedder,
    PrismEmbeddings,
    PrismMemoryRetriever,
    PrismVectorStore,
)
from prism_memory.rag import AccessConstraint, InMemoryRagStore

pytestmark = pytest.mark.postgres


class SameVector(Embeddings):
    """Every text gets the same vector, so only the lexical leg can tell documents apart."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0]


@pytest.fixture(params=["memory", "postgres"])
async def rag_store(request: pytest.FixtureRequest):
    if request.param == "memory":
        return InMemoryRagStore()
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    return (await make_postgres_stores()).vector_store


async def test_equality_metadata_filters(rag_store) -> None:
    store = PrismVectorStore(SameVector(), store=rag_store)
    await store.aadd_texts(
        ["one", "two", "three"],
        [{"kind": "a", "n": 1}, {"kind": "b", "n": 2}, {"kind": "a", "n": 3}],
        ids=["1", "2", "3"],
    )
    found = await store.asimilarity_search("x", k=3, filter={"kind": "a"})
    assert sorted(doc.id for doc in found) == ["1", "3"]
    found = await store.asimilarity_search("x", k=3, filter={"kind": "a", "n": 3})
    assert [doc.id for doc in found] == ["3"]


async def test_access_control_applies_to_search_and_get_by_ids(rag_store) -> None:
    writer = PrismVectorStore(SameVector(), store=rag_store)
    await writer.aadd_texts(["public plan", "secret plan"], ids=["pub", "sec"])
    await rag_store.set_source_access(writer.scope, "pub", group_ids=["staff"], access_version=1)
    await rag_store.set_source_access(writer.scope, "sec", principal_ids=["boss"], access_version=1)

    alice = PrismVectorStore(
        SameVector(), store=rag_store, authorization=AccessConstraint("alice", ("staff",))
    )
    assert [doc.id for doc in await alice.asimilarity_search("plan", k=2)] == ["pub"]
    assert [doc.id for doc in await alice.aget_by_ids(["sec", "pub"])] == ["pub"]
    assert [doc.id for doc in await alice.asimilarity_search("plan", k=2, hybrid=True)] == ["pub"]

    nobody = PrismVectorStore(SameVector(), store=rag_store, authorization="acl")
    assert await nobody.asimilarity_search("plan", k=2) == []
    assert await nobody.aget_by_ids(["pub"]) == []


async def test_hybrid_search_lets_the_words_decide_when_vectors_tie(rag_store) -> None:
    store = PrismVectorStore(SameVector(), store=rag_store)
    await store.aadd_texts(
        ["apple pie recipe", "banana bread recipe", "car engine repair"], ids=["a", "b", "c"]
    )
    hybrid = await store.asimilarity_search_with_score("banana bread", k=3, hybrid=True)
    assert hybrid[0][0].id == "b"
    assert hybrid[0][1] > hybrid[1][1]
    # without it the three tie on cosine 1.0 and come by id
    plain = await store.asimilarity_search_with_score("banana bread", k=3)
    assert [(doc.id, score) for doc, score in plain] == [("a", 1.0), ("b", 1.0), ("c", 1.0)]
    retriever = store.as_retriever(search_kwargs={"k": 1, "hybrid": True})
    assert [doc.id for doc in await retriever.ainvoke("car repair")] == ["c"]


async def test_vectors_given_and_search_by_vector(rag_store) -> None:
    store = PrismVectorStore(SameVector(), store=rag_store)
    ids = await store.aadd_embeddings(
        [("east", [1.0, 0.0]), ("north", [0.0, 1.0])], [{"d": "e"}, {"d": "n"}], ids=["e", None]
    )
    assert ids[0] == "e"
    assert len(ids[1]) == 36  # a UUID for the document without an id
    found = await store.asimilarity_search_with_score_by_vector([1.0, 0.0], k=2)
    assert [(doc.page_content, score) for doc, score in found] == [("east", 1.0), ("north", 0.0)]
    assert found[0][0] == Document(id="e", page_content="east", metadata={"d": "e"})
    assert [d.page_content for d in await store.asimilarity_search_by_vector([0.0, 1.0], k=1)] == [
        "north"
    ]
    assert [d.page_content for d in store.similarity_search_by_vector([0.0, 1.0], k=1)] == ["north"]


def test_bad_input_is_a_typed_error() -> None:
    store = PrismVectorStore(SameVector())
    with pytest.raises(ValidationError):
        store.add_embeddings([("nan", [float("nan"), 0.0])])
    with pytest.raises(CapExceededError):
        store.similarity_search("x", k=33)
    with pytest.raises(ValidationError):
        store.delete()
    assert store.similarity_search("x", k=1) == []


async def test_a_retriever_chain_answers_from_the_documents() -> None:
    store = PrismVectorStore(SameVector())
    await store.aadd_texts(
        ["The office opens at 9.", "Parking is free on Sundays."], ids=["hours", "parking"]
    )
    retriever = store.as_retriever(search_kwargs={"k": 1, "hybrid": True})
    seen: list[str] = []

    def model(inputs: dict[str, object]) -> str:  # stands in for an LLM: answers from the context
        prompt = f"Context: {inputs['context']}\nQuestion: {inputs['question']}"
        seen.append(prompt)
        return str(inputs["context"])

    chain = {
        "context": retriever | RunnableLambda(lambda docs: " ".join(d.page_content for d in docs)),
        "question": RunnablePassthrough(),
    } | RunnableLambda(model)
    assert await chain.ainvoke("when is parking free?") == "Parking is free on Sundays."
    assert seen == ["Context: Parking is free on Sundays.\nQuestion: when is parking free?"]


async def test_memory_retriever_recalls_with_every_exclusion_rule() -> None:
    async with create_memory(
        tenant_id="t", resource_id="ada", thread_id="chat", embedder=HashEmbedder()
    ) as memory:
        await memory.remember(
            [{"id": "tea", "text": "Ada drinks green tea"}, {"id": "cat", "text": "Ada has a cat"}],
            wait=True,
        )
        retriever = PrismMemoryRetriever(memory=memory, top_k=2)
        docs = await retriever.ainvoke("what does Ada drink? tea")
        assert docs[0].id == "tea"
        assert docs[0].page_content == "Ada drinks green tea"
        assert docs[0].metadata["role"] == "user"
        await memory.set_consent("tea", visible=False)
        assert [d.id for d in await retriever.ainvoke("what does Ada drink? tea")] == ["cat"]
        assert [d.id for d in retriever.invoke("cat")] == ["cat"]


class Counting(Embeddings):
    """Character-count vectors of width 3; counts the calls it gets."""

    model = "counting-v1"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [[float(len(t)), 1.0, 0.0] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [0.0, 0.0, 1.0]


async def test_langchain_embeddings_work_as_prism_embedder() -> None:
    embeddings = Counting()
    embedder = LangChainEmbedder(embeddings, dimensions=3)
    assert embedder.dimensions == 3
    assert embedder.model.startswith("langchain:")  # then the class's module path
    assert embedder.model.endswith(".Counting:counting-v1")
    assert (await embedder.embed(["ab", "abcd"])).tolist() == [[2.0, 1.0, 0.0], [4.0, 1.0, 0.0]]
    assert (await embedder.embed_query("q")).tolist() == [0.0, 0.0, 1.0]
    async with create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=embedder,
        vector_store=InMemoryVectorStore(),
    ) as memory:
        await memory.remember([{"text": "hello there"}], wait=True)
        record = (await memory.recall("hello")).hits[0].record
    assert record.embedding_model == embedder.model
    assert LangChainEmbedder(embeddings, dimensions=3, model="mine").model == "mine"


async def test_prism_embedder_works_as_langchain_embeddings() -> None:
    hashing = HashEmbedder(dimensions=16)
    embeddings = PrismEmbeddings(hashing, batch_size=2)
    vectors = await embeddings.aembed_documents(["a", "b", "c"])
    assert vectors == [[float(x) for x in hashing.embed_one(t)] for t in ["a", "b", "c"]]
    assert embeddings.embed_query("a") == vectors[0]
    assert await embeddings.aembed_query("b") == vectors[1]
    assert embeddings.embed_documents(["c"]) == [vectors[2]]


async def test_prism_embeddings_batch_and_check_every_vector() -> None:
    class Bad:
        dimensions = 2
        model = "bad-v1"

        def __init__(self) -> None:
            self.batches: list[int] = []

        async def embed(self, texts):
            self.batches.append(len(texts))
            return [[1.0, float("nan")] if t == "nan" else [1.0, 0.0] for t in texts]

    bad = Bad()
    embeddings = PrismEmbeddings(bad, batch_size=2)
    assert embeddings.model == "bad-v1"
    assert len(await embeddings.aembed_documents(["a", "b", "c", "d", "e"])) == 5
    assert bad.batches == [2, 2, 1]
    with pytest.raises(ValidationError):
        await embeddings.aembed_documents(["a", "nan"])
