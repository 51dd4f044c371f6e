"""LangGraph's store contract, checked against PrismStore on both backends.

The cases are those LangGraph runs against its own ``InMemoryStore``
(``libs/checkpoint/tests/test_store.py``), written again here against ``make_store`` (in memory, or
on PostgreSQL through ``from_conn_string``) with the same inputs and expectations. What LangGraph
checks there that does not apply, and why:

* ``test_async_batch_store*``, ``test_get_text_at_path``: they test LangGraph's own
  ``AsyncBatchedBaseStore`` mock and path helper, not a store.

Its TTL test is in ``test_langgraph_ttl.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langgraph.store.base import InvalidNamespaceError, PutOp

from prism_memory import HashEmbedder, InMemoryVectorStore
from prism_memory.integrations.langgraph import PrismStore
from prism_memory.integrations.langgraph._mapping import is_indexed

NAMESPACES_BASIC = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


async def _fill(store: PrismStore, namespaces: list[tuple[str, ...]]) -> None:
    for i, ns in enumerate(namespaces):
        await store.aput(namespace=ns, key=f"id_{i}", value={"data": f"value_{i:02d}"})


async def test_list_namespaces_basic(make_store) -> None:
    async with make_store() as store:
        await _fill(store, NAMESPACES_BASIC)
        found = await store.alist_namespaces(prefix=("a", "b"))
        assert sorted(found) == [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
        ]
        found = await store.alist_namespaces(suffix=("f",))
        assert sorted(found) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
        found = await store.alist_namespaces(prefix=("a",), suffix=("f",))
        assert sorted(found) == [("a", "b", "f"), ("a", "c", "f")]
        found = await store.alist_namespaces(prefix=("a", "b"), max_depth=3)
        assert sorted(found) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
        assert await store.alist_namespaces(prefix=("a", "b"), limit=2) == [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
        ]
        assert await store.alist_namespaces(prefix=("a", "b"), offset=2) == [
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
        ]
        found = await store.alist_namespaces(prefix=("a", "*", "f"))
        assert sorted(found) == [("a", "b", "f"), ("a", "c", "f")]
        found = await store.alist_namespaces(suffix=("*", "f"))
        assert sorted(found) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
        assert await store.alist_namespaces(prefix=("nonexistent",)) == []
        assert await store.alist_namespaces(prefix=("users", "123")) == [("users", "123")]


async def test_list_namespaces_with_wildcards(make_store) -> None:
    async with make_store() as store:
        await _fill(
            store,
            [
                ("users", "123"),
                ("users", "456"),
                ("users", "789", "settings"),
                ("admin", "users", "789"),
                ("guests", "123"),
                ("guests", "456", "preferences"),
            ],
        )
        found = await store.alist_namespaces(prefix=("users", "*"))
        assert sorted(found) == [("users", "123"), ("users", "456"), ("users", "789", "settings")]
        found = await store.alist_namespaces(suffix=("*", "preferences"))
        assert found == [("guests", "456", "preferences")]
        found = await store.alist_namespaces(prefix=("*", "users"), suffix=("*", "settings"))
        assert found == []


async def test_list_namespaces_pagination(make_store) -> None:
    async with make_store() as store:
        for i in range(20):
            ns = ("namespace", f"sub_{i:02d}")
            await store.aput(namespace=ns, key=f"id_{i:02d}", value={"data": f"value_{i:02d}"})
        for offset in (0, 5, 15):
            page = await store.alist_namespaces(prefix=("namespace",), limit=5, offset=offset)
            assert page == [("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)]


async def test_list_namespaces_max_depth(make_store) -> None:
    async with make_store() as store:
        await _fill(
            store,
            [
                ("a", "b", "c", "d"),
                ("a", "b", "c", "e"),
                ("a", "b", "f"),
                ("a", "g"),
                ("h", "i", "j", "k"),
            ],
        )
        found = await store.alist_namespaces(max_depth=2)
        assert sorted(found) == [("a", "b"), ("a", "g"), ("h", "i")]


async def test_list_namespaces_no_conditions_and_empty_store(make_store) -> None:
    async with make_store() as store:
        assert await store.alist_namespaces() == []
        await _fill(store, [("a", "b"), ("c", "d"), ("e", "f", "g")])
        assert sorted(await store.alist_namespaces()) == [("a", "b"), ("c", "d"), ("e", "f", "g")]


async def test_list_namespaces_forgets_emptied_namespaces(make_store) -> None:
    async with make_store() as store:
        await store.aput(("gone",), "k", {"v": 1})
        await store.aput(("kept",), "k", {"v": 1})
        await store.adelete(("gone",), "k")
        assert await store.alist_namespaces() == [("kept",)]


async def test_cannot_put_empty_namespace(make_store, fake_embeddings) -> None:
    doc = {"foo": "bar"}
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
            with pytest.raises(InvalidNamespaceError):
                await store.aput(bad, "foo", doc)

        ns = ("foo", "langgraph", "foo")
        await store.aput(ns, "bar", doc)
        assert (await store.aget(ns, "bar")).value == doc
        assert (await store.asearch(ns, query="bar"))[0].value == doc
        await store.adelete(ns, "bar")
        assert await store.aget(ns, "bar") is None

        # past the public put api, a "langgraph" root is accepted
        await store.abatch([PutOp(("langgraph", "foo"), "bar", doc)])
        assert (await store.aget(("langgraph", "foo"), "bar")).value == doc
        assert (await store.asearch(("langgraph", "foo")))[0].value == doc
        await store.adelete(("langgraph", "foo"), "bar")
        assert await store.aget(("langgraph", "foo"), "bar") is None

        # but never a label with a period, not even through abatch
        with pytest.raises(InvalidNamespaceError):
            await store.abatch([PutOp(("the", "thing.about"), "bar", doc)])


async def test_batch_puts_of_one_key_keep_the_last(make_store) -> None:
    """LangGraph deduplicates puts of one key (its AsyncBatchedBaseStore test): the last wins."""
    async with make_store() as store:
        await store.abatch(
            [PutOp(("test",), "key", {"value": 1}), PutOp(("test",), "key", {"value": 2})]
        )
        assert (await store.aget(("test",), "key")).value == {"value": 2}
        found = await store.asearch(("test",), filter={"value": 2})
        assert [item.value for item in found] == [{"value": 2}]
        assert await store.asearch(("test",), filter={"value": 1}) == []


async def test_concurrent_writes_of_one_key_end_as_the_last_call(make_store) -> None:
    async with make_store() as store:
        await asyncio.gather(
            store.aput(("test",), "key", {"value": 1}),
            store.adelete(("test",), "key"),
            store.aput(("test",), "key", {"value": 3}),
            store.aput(("test",), "other", {"value": 4}),
            store.adelete(("test",), "other"),
        )
        assert (await store.aget(("test",), "key")).value == {"value": 3}
        assert await store.aget(("test",), "other") is None


async def test_a_put_that_loses_the_insert_race_to_the_same_text_still_applies(arm_race) -> None:
    """Another writer inserts the key between this put's read and its insert, with the very same
    value: the put is applied as an overwrite of that row (its text, vector and model), not taken
    for the row it inserted itself because the texts agree."""
    hashing = HashEmbedder(dimensions=32)

    def by_function(texts: list[str]) -> list[list[float]]:
        return [hashing.embed_one(text).tolist() for text in texts]

    shared = InMemoryVectorStore()
    race = arm_race(shared, "t")
    other = PrismStore(index={"dims": 32, "embed": by_function}, vector_store=shared)
    store = PrismStore(index={"dims": 32, "embed": hashing}, vector_store=shared)
    race.racer = lambda: other.aput(("t",), "k", {"text": "pears"})
    await store.aput(("t",), "k", {"text": "pears"})
    assert race.racer is None  # the other writer did win the insert
    async with await store.memory(("t",)) as memory:
        record = await memory.get("k")
    assert record.text == '{"text": "pears"}'
    assert record.revision == 2
    assert record.embedding_model == "hash-v1-32"


def test_vector_store_initialization(fake_embeddings) -> None:
    store = PrismStore(index={"dims": fake_embeddings.dims, "embed": fake_embeddings})
    assert store.index_config is not None
    assert store.index_config["dims"] == fake_embeddings.dims
    assert store.index_config["embed"] == fake_embeddings


async def test_vector_insert_with_auto_embedding(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        docs = [
            ("doc1", {"text": "short text"}),
            ("doc2", {"text": "longer text document"}),
            ("doc3", {"text": "longest text document here"}),
            ("doc4", {"description": "text in description field"}),
            ("doc5", {"content": "text in content field"}),
            ("doc6", {"body": "text in body field"}),
        ]
        for key, value in docs:
            await store.aput(("test",), key, value)
        keys = [item.key for item in await store.asearch(("test",), query="long text")]
        assert "doc2" in keys
        assert "doc3" in keys


async def test_vector_update_with_embedding(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        await store.aput(("test",), "doc1", {"text": "zany zebra Xerxes"})
        await store.aput(("test",), "doc2", {"text": "something about dogs"})
        await store.aput(("test",), "doc3", {"text": "text about birds"})

        initial = await store.asearch(("test",), query="Zany Xerxes")
        assert initial[0].key == "doc1"
        initial_score = initial[0].score
        assert initial_score is not None

        await store.aput(("test",), "doc1", {"text": "new text about dogs"})
        after = await store.asearch(("test",), query="Zany Xerxes")
        after_score = next(r.score for r in after if r.key == "doc1")
        assert after_score < initial_score

        for r in await store.asearch(("test",), query="new text about dogs"):
            if r.key == "doc1":
                assert r.score > after_score

        await store.aput(("test",), "doc4", {"text": "new text about dogs"}, index=False)
        found = await store.asearch(("test",), query="new text about dogs", limit=3)
        assert not any(r.key == "doc4" for r in found)


async def test_vector_search_with_filters(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        docs = [
            ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
            ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
            ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
            ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
        ]
        for key, value in docs:
            await store.aput(("test",), key, value)

        found = await store.asearch(("test",), query="apple", filter={"color": "red"})
        assert [r.key for r in found][:1] == ["doc1"]
        assert len(found) == 2
        found = await store.asearch(("test",), query="car", filter={"color": "red"})
        assert [r.key for r in found][:1] == ["doc2"]
        assert len(found) == 2
        found = await store.asearch(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})
        assert len(found) == 3
        assert found[0].key == "doc4"
        found = await store.asearch(
            ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
        )
        assert [r.key for r in found] == ["doc3"]


async def test_filters_without_a_query(make_store) -> None:
    async with make_store() as store:
        await store.aput(("f",), "a", {"n": 1, "tag": "x", "nested": {"k": "v"}, "list": [1, 2]})
        await store.aput(("f",), "b", {"n": 2, "tag": "y", "nested": {"k": "w"}, "list": [1]})
        await store.aput(("f",), "c", {"n": "three", "tag": "x"})

        async def keys(filter: dict[str, Any]) -> list[str]:
            return [item.key for item in await store.asearch(("f",), filter=filter)]

        assert await keys({"tag": "x"}) == ["a", "c"]
        assert await keys({"tag": {"$eq": "y"}}) == ["b"]
        assert await keys({"tag": {"$ne": "x"}}) == ["b"]
        assert await keys({"n": {"$gt": 1}}) == ["b"]
        assert await keys({"n": {"$gte": 1}}) == ["a", "b"]
        assert await keys({"n": {"$lt": 2}}) == ["a"]
        assert await keys({"n": {"$lte": 2, "$gt": 1}}) == ["b"]
        assert await keys({"nested": {"k": "w"}}) == ["b"]
        assert await keys({"list": [1, 2]}) == ["a"]
        assert await keys({"missing": 1}) == []


async def test_batched_vector_search_concurrent(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        colors = ["red", "blue", "green", "yellow", "purple"]
        things = ["apple", "car", "house", "book", "phone"]
        scores = [3.0, 3.5, 4.0, 4.5, 5.0]
        docs = [
            (
                f"doc{i}",
                {
                    "text": f"{colors[i % 5]} {things[i % 5]}",
                    "color": colors[i % 5],
                    "score": scores[i % 5],
                    "index": i,
                },
            )
            for i in range(50)
        ]
        await asyncio.gather(
            *[store.aput(("test",), key, value) for key, value in docs],
            *[store.adelete(("test",), key) for key, _ in docs],
            *[store.aput(("test",), key, value) for key, value in docs],
        )
        queries: list[tuple[str, dict[str, Any]]] = [
            ("apple", {"color": "red"}),
            ("car", {"color": "blue"}),
            ("house", {"color": "green"}),
            ("phone", {"score": {"$gt": 4.99}}),
            ("book", {"score": {"$lte": 3.5}}),
            ("apple", {"score": {"$gte": 3.0}, "color": "red"}),
            ("car", {"score": {"$lt": 5.1}, "color": "blue"}),
            ("house", {"index": {"$gt": 25}}),
            ("phone", {"index": {"$lte": 10}}),
        ]
        results = await asyncio.gather(
            *[store.asearch(("test",), query=q, filter=f) for q, f in queries]
        )
        # every document is back (the last call of each key was a put), and filters hold
        expected_counts = [10, 10, 10, 10, 20, 10, 10, 24, 11]
        for found, expected, (_, filter_) in zip(results, expected_counts, queries, strict=True):
            assert len(found) == min(expected, 10)
            for item in found:
                for field, wanted in filter_.items():
                    value = item.value[field]
                    if isinstance(wanted, dict):
                        for op, bound in wanted.items():
                            assert {
                                "$gt": value > bound,
                                "$gte": value >= bound,
                                "$lt": value < bound,
                                "$lte": value <= bound,
                            }[op]
                    else:
                        assert value == wanted


async def test_vector_search_pagination(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        for i in range(5):
            await store.aput(("test",), f"doc{i}", {"text": f"test document number {i}"})
        page1 = await store.asearch(("test",), query="test", limit=2)
        page2 = await store.asearch(("test",), query="test", limit=2, offset=2)
        assert len(page1) == 2
        assert len(page2) == 2
        assert page1[0].key != page2[0].key
        assert len(await store.asearch(("test",), query="test", limit=10)) == 5


async def test_vector_search_edge_cases(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        await store.aput(("test",), "doc1", {"text": "test document"})
        for query in ["", None, "test " * 100, "test!@#$%^&*()"]:
            assert len(await store.asearch(("test",), query=query)) == 1


async def test_embed_with_path(make_store, fake_embeddings) -> None:
    # store-level fields: one vector per field text, an item scored by its best
    index = {
        "dims": fake_embeddings.dims,
        "embed": fake_embeddings,
        "fields": ["key0", "key1", "key3"],
    }
    async with make_store(index=index) as store:
        doc1 = {"key1": "xxx", "key2": "yyy", "key3": "zzz"}  # key0 omitted: no error
        doc2 = {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"}
        await store.aput(("test",), "doc1", doc1)
        await store.aput(("test",), "doc2", doc2)

        # doc2.key3 and doc1.key1 both would have the highest score
        results = await store.asearch(("test",), query="xxx")
        assert len(results) == 2
        assert results[0].key != results[1].key
        ascore = results[0].score
        bscore = results[1].score
        assert ascore is not None
        assert bscore is not None
        assert ascore == pytest.approx(bscore, abs=1e-5)

        results = await store.asearch(("test",), query="uuu")
        assert len(results) == 2
        assert results[0].key != results[1].key
        assert results[0].key == "doc2"
        assert results[0].score is not None
        assert results[0].score > results[1].score
        assert ascore == pytest.approx(results[0].score, abs=1e-5)

        # un-indexed: low scores for both, less than the above
        results = await store.asearch(("test",), query="www")
        assert len(results) == 2
        assert results[0].score < ascore
        assert results[1].score < ascore

    # operation-level fields
    index = {"dims": fake_embeddings.dims, "embed": fake_embeddings, "fields": ["key17"]}
    async with make_store(index=index) as store_no_defaults:
        doc3 = {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}
        doc4 = {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}
        await store_no_defaults.aput(("test",), "doc3", doc3, index=["key0", "key1"])
        await store_no_defaults.aput(("test",), "doc4", doc4, index=["key1", "key3"])

        results = await store_no_defaults.asearch(("test",), query="aaa")
        assert len(results) == 2
        assert results[0].key == "doc3"
        assert results[0].score is not None
        assert results[0].score > results[1].score

        results = await store_no_defaults.asearch(("test",), query="ggg")
        assert len(results) == 2
        assert results[0].key == "doc4"
        assert results[0].score is not None
        assert results[0].score > results[1].score

        results = await store_no_defaults.asearch(("test",), query="bbb")
        assert len(results) == 2
        assert results[0].key != results[1].key
        assert results[0].score == results[1].score

        results = await store_no_defaults.asearch(("test",), query="ccc")
        assert len(results) == 2
        assert all(r.score < ascore for r in results)

        doc5 = {"key0": "hhh", "key1": "iii"}
        await store_no_defaults.aput(("test",), "doc5", doc5, index=False)
        results = await store_no_defaults.asearch(("test",), query="hhh")
        assert len(results) == 3
        doc5_result = next(r for r in results if r.key == "doc5")
        assert doc5_result.score is None


async def test_nested_and_wildcard_paths_get_a_vector_each(make_store, fake_embeddings) -> None:
    """LangGraph's JSON paths (nested, ``[*]``): every text they pick is scored on its own, the
    item returned once with its best; overwriting with fewer texts drops the old vectors."""
    index = {"dims": fake_embeddings.dims, "embed": fake_embeddings, "fields": ["a.b", "tags[*]"]}
    async with make_store(index=index) as store:
        await store.aput(("t",), "one", {"a": {"b": "qqq"}, "tags": ["zzz", "kkk"]})
        await store.aput(("t",), "two", {"a": {"b": "mmm"}, "tags": ["nnn"]})
        for query, best in (("qqq", "one"), ("zzz", "one"), ("kkk", "one"), ("nnn", "two")):
            found = await store.asearch(("t",), query=query)
            assert [item.key for item in found][:1] == [best]
            assert len({item.key for item in found}) == len(found) == 2
            assert found[0].score == pytest.approx(1.0, abs=1e-5)
        await store.aput(("t",), "one", {"a": {"b": "qqq"}})
        found = await store.asearch(("t",), query="kkk")
        assert next(r.score for r in found if r.key == "one") < 0.5


async def test_non_ascii(make_store, fake_embeddings) -> None:
    async with make_store(index={"dims": fake_embeddings.dims, "embed": fake_embeddings}) as store:
        texts = ["这是中文", "これは日本語です", "이건 한국어야", "Это русский", "यह रूसी है"]
        for i, text in enumerate(texts, start=1):
            await store.aput(("user_123", "memories"), str(i), {"text": text})
        for i, text in enumerate(texts, start=1):
            found = await store.asearch(("user_123", "memories"), query=text)
            assert found[0].key == str(i)


async def test_items_carry_times_and_overwrites_keep_created_at(make_store) -> None:
    async with make_store() as store:
        await store.aput(("t",), "k", {"v": 1})
        first = await store.aget(("t",), "k")
        await store.aput(("t",), "k", {"v": 2})
        second = await store.aget(("t",), "k")
        assert second.value == {"v": 2}
        assert second.created_at == first.created_at
        assert second.updated_at > first.updated_at
        assert second.created_at.tzinfo is not None


async def test_search_without_query_keeps_write_order_across_a_prefix(make_store) -> None:
    async with make_store() as store:
        await store.aput(("u", "a"), "1", {"n": 1})
        await store.aput(("u", "b"), "2", {"n": 2})
        await store.aput(("u", "a"), "3", {"n": 3})
        await store.aput(("v",), "4", {"n": 4})
        await store.aput(("u", "a"), "1", {"n": 5})  # an overwrite keeps its place
        found = await store.asearch(("u",))
        assert [(item.namespace, item.key) for item in found] == [
            (("u", "a"), "1"),
            (("u", "a"), "3"),
            (("u", "b"), "2"),
        ]
        assert [item.key for item in await store.asearch(("u",), limit=1, offset=1)] == ["3"]
        assert [item.score for item in found] == [None, None, None]


def test_sync_api_without_a_running_loop(fake_embeddings) -> None:
    store = PrismStore(index={"dims": fake_embeddings.dims, "embed": fake_embeddings})
    store.put(("docs",), "1", {"text": "red apple"})
    store.put(("docs",), "2", {"text": "blue car"})
    assert store.get(("docs",), "1").value == {"text": "red apple"}
    assert [item.key for item in store.search(("docs",), query="blue car")] == ["2", "1"]
    assert store.list_namespaces() == [("docs",)]
    store.delete(("docs",), "1")
    assert store.get(("docs",), "1") is None


async def test_sync_api_from_a_worker_thread(make_store) -> None:
    """As LangGraph's async stores: sync calls work from another thread while the loop runs."""
    async with make_store() as store:
        await asyncio.to_thread(store.put, ("t",), "k", {"v": 1})
        assert (await asyncio.to_thread(store.get, ("t",), "k")).value == {"v": 1}
        assert (await store.aget(("t",), "k")).value == {"v": 1}


async def test_an_empty_dict_is_a_value_not_a_delete(make_store) -> None:
    async with make_store() as store:
        await store.aput(("t",), "k", {"v": 1})
        await store.aput(("t",), "k", {})
        assert (await store.aget(("t",), "k")).value == {}


async def test_a_store_handed_a_postgres_vector_store(make_postgres_stores) -> None:
    stores = await make_postgres_stores()
    try:
        store = PrismStore(vector_store=stores.vector_store)
        await store.aput(("t",), "k", {"v": 1})
        assert (await asyncio.to_thread(store.get, ("t",), "k")).value == {"v": 1}
        assert await store.alist_namespaces() == [("t",)]
    finally:
        await stores.close()


@pytest.mark.parametrize("backend", ["memory", "postgres"])
@pytest.mark.parametrize("index_first", [False, True])
async def test_a_put_that_loses_the_insert_race_keeps_its_own_indexing(
    request: pytest.FixtureRequest, arm_race: Any, backend: str, index_first: bool
) -> None:
    """Another writer inserts the key between this put's read and its insert, indexed the other
    way (``index=False`` against indexed): the item ends as this put wrote it -- its text, and
    indexed exactly when this put asked for it."""
    if backend == "memory":
        shared: Any = InMemoryVectorStore()
    else:
        make_postgres_stores = request.getfixturevalue("make_postgres_stores")
        shared = (await make_postgres_stores(dimension=32)).vector_store
    race = arm_race(shared, "t")
    hashing = HashEmbedder(dimensions=32)
    other = PrismStore(index={"dims": 32, "embed": hashing}, vector_store=shared)
    store = PrismStore(index={"dims": 32, "embed": hashing}, vector_store=shared)
    first: Any = None if index_first else False  # None: the store's default fields
    race.racer = lambda: other.aput(("t",), "k", {"text": "apples"}, index=first)
    await store.aput(("t",), "k", {"text": "pears"}, index=False if index_first else None)
    assert race.racer is None  # the other writer did win the insert
    async with await store.memory(("t",)) as memory:
        record = await memory.get("k")
    assert record.text == '{"text": "pears"}'
    assert is_indexed(record) is not index_first
    assert (record.embedding_model == "hash-v1-32") is not index_first
    found = await store.asearch(("t",), query="pears")
    assert [item.key for item in found] == ["k"]
    assert (found[0].score is not None) is not index_first
