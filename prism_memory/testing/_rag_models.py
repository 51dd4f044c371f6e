"""RAG conformance checks of embedding models: each chunk records the model of its vector, a
query never compares two models' vectors, and a generation's sources can be listed (what
:func:`prism_memory.rag.reembed_generation` walks).

They run on every RAG store through :data:`~prism_memory.testing.RAG_CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..errors import CapExceededError, EmbeddingModelMismatchError, ValidationError
from ..rag_types import Chunk
from ._rag_support import RagConformanceKit, _Case, _ModelEmbedder, _unit
from ._support import _check, _raises

__all__ = ["RAG_MODEL_CHECKS"]

_MODEL_A = "canary-model-a@1"
_MODEL_B = "canary-model-b@2"


async def chunk_model_round_trips(kit: RagConformanceKit) -> None:
    """``Chunk.embedding_model`` is stored and returned by ``get_by_source``, ``query`` and
    ``lexical_query`` (``None`` stays ``None``); ``ingest`` records its embedder's model, and a
    re-ingest with another model embeds every chunk again and records the new one."""
    from ..rag import ingest

    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    await store.upsert(
        scope,
        [
            Chunk("a", 0, "alpha pumps", _unit(w, 0), embedding_model=_MODEL_A),
            Chunk("a", 1, "beta pumps", _unit(w, 1)),
        ],
    )
    stored = await store.get_by_source(scope, "a")
    _check([c.embedding_model for c in stored] == [_MODEL_A, None], "get_by_source model")
    hits = await store.query(scope, embedding=_unit(w, 0), top_k=2)
    _check((hits[0].key, hits[0].embedding_model) == (("a", 0), _MODEL_A), "query model")
    _check({h.embedding_model for h in hits} == {_MODEL_A, None}, "query keeps None")
    lexical = await store.lexical_query(scope, text="alpha", top_k=2)
    _check([h.embedding_model for h in lexical] == [_MODEL_A], "lexical_query model")
    for bad in ("", " ", "x" * 257, "a\nb", 7):
        try:
            Chunk("a", 0, "x", _unit(w, 0), embedding_model=bad)  # type: ignore[arg-type]
        except ValidationError as exc:
            _check(str(bad) not in str(exc) or not str(bad).strip(), "the model is repeated")
        else:
            raise AssertionError("a bad embedding_model was accepted")

    first = _ModelEmbedder(case.embedder, _MODEL_A)
    text = "Pumps need a pressure check every spring. Seals wear out and leak."
    done = await ingest(store, scope, "doc", text, embedder=first, chunk_size=40, chunk_overlap=0)
    chunks = await store.get_by_source(scope, "doc")
    _check(done.chunks > 1 and {c.embedding_model for c in chunks} == {_MODEL_A}, "recorded")
    again = await ingest(store, scope, "doc", text, embedder=first, chunk_size=40, chunk_overlap=0)
    _check(again.unchanged, "the same model and text changed nothing")
    second = _ModelEmbedder(case.embedder, _MODEL_B, shift=1)
    moved = await ingest(store, scope, "doc", text, embedder=second, chunk_size=40, chunk_overlap=0)
    _check(not moved.unchanged and moved.embedded == moved.chunks, f"re-embedded: {moved}")
    chunks = await store.get_by_source(scope, "doc")
    _check({c.embedding_model for c in chunks} == {_MODEL_B}, "the new model is recorded")
    expected = await second.embed([c.text for c in chunks])
    _check(
        all(
            max(abs(float(x) - float(y)) for x, y in zip(c.embedding, e, strict=True)) < 1e-5
            for c, e in zip(chunks, expected, strict=True)
        ),
        "the chunks hold the new model's vectors",
    )


async def hybrid_query_never_mixes_models(kit: RagConformanceKit) -> None:
    """A query whose embedder is of another model than the generation's chunks is refused (the
    message names neither model), unless ``next_embedder`` is of the chunks' model; chunks that
    record no model are trusted; two models in one generation are refused."""
    from ..rag import hybrid_query, ingest

    case = _Case(kit)
    store, scope = case.store, case.scope
    old = _ModelEmbedder(case.embedder, _MODEL_A)
    new = _ModelEmbedder(case.embedder, _MODEL_B, shift=3)
    text = "Seals wear out. Replace a worn seal before the pump leaks."
    await ingest(store, scope, "seals", text, embedder=old)
    refused = await _raises(
        EmbeddingModelMismatchError,
        hybrid_query(store, scope, text=text, embedder=new, top_k=1),
        "a query with another model",
    )
    _check(_MODEL_A not in str(refused) and _MODEL_B not in str(refused), "names a model")
    _check(text not in str(refused), "the message repeats the text")
    await _raises(
        EmbeddingModelMismatchError,
        hybrid_query(store, scope, text=text, embedder=new, next_embedder=new, top_k=1),
        "a next_embedder of yet another model",
    )
    hits = await hybrid_query(store, scope, text=text, embedder=new, next_embedder=old, top_k=1)
    _check([h.source_id for h in hits] == ["seals"], "next_embedder answers")
    _check(abs((hits[0].semantic or 0.0) - 1.0) < 1e-5, "answered with the chunks' model")
    unnamed = _ModelEmbedder(case.embedder, None)
    hits = await hybrid_query(store, scope, text=text, embedder=unnamed, top_k=1)
    _check([h.source_id for h in hits] == ["seals"], "an embedder without a model is trusted")

    legacy = case.scope.__class__(case.tenant, "legacy")
    vector = (await new.embed([text]))[0]
    await store.upsert(legacy, [Chunk("old", 0, text, vector)])
    hits = await hybrid_query(store, legacy, text=text, embedder=new, top_k=1)
    _check([h.source_id for h in hits] == ["old"], "a chunk without a model is trusted")
    await ingest(store, legacy, "other", "Pumps leak when seals wear.", embedder=old)
    await ingest(store, legacy, "third", "Pumps and seals wear.", embedder=new)
    await _raises(
        EmbeddingModelMismatchError,
        hybrid_query(store, legacy, text="pumps seals wear", embedder=new, top_k=3),
        "a generation holding two models",
    )


async def list_sources_pages_in_order(kit: RagConformanceKit) -> None:
    """``list_sources`` returns a generation's distinct source ids in code-point order, ``limit``
    at a time after ``after``; other generations and scopes never show; bad pages raise."""
    case = _Case(kit)
    store, scope, w = case.store, case.scope, case.width
    ids = ["b", "a", "Z", "é", "ä-1", "10", "9", "a.b", "東京"]
    for n, source in enumerate(ids):
        chunks = [Chunk(source, i, f"text {i}", _unit(w, n + i)) for i in range(1 + n % 3)]
        await store.upsert(scope, chunks)
    await store.upsert(scope, [Chunk("only-in-1", 0, "x", _unit(w, 0))], generation=1)
    await store.upsert(
        scope.__class__(case.tenant, "elsewhere"), [Chunk("zz", 0, "x", _unit(w, 0))]
    )
    pages: list[list[str]] = []
    after: str | None = None
    while page := await store.list_sources(scope, after=after, limit=2):
        pages.append(page)
        after = page[-1]
    _check([s for page in pages for s in page] == sorted(ids), f"paged order: {pages}")
    _check(all(len(page) == 2 for page in pages[:-1]), "every page but the last is full")
    _check(await store.list_sources(scope, limit=1000) == sorted(ids), "one page")
    _check(await store.list_sources(scope, after="a", limit=3) == ["a.b", "b", "ä-1"], "after")
    _check(await store.list_sources(scope, generation=1, limit=5) == ["only-in-1"], "gen 1")
    _check(await store.list_sources(scope, generation=7, limit=5) == [], "an empty generation")
    for call, error, label in (
        (store.list_sources(scope, limit=0), ValidationError, "limit=0"),
        (store.list_sources(scope, limit=1001), CapExceededError, "limit=1001"),
        (store.list_sources(scope, after="", limit=1), ValidationError, "after=''"),
        (store.list_sources(scope, generation=-1, limit=1), ValidationError, "generation -1"),
    ):
        await _raises(error, call, label)


RAG_MODEL_CHECKS: dict[str, Callable[[RagConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        chunk_model_round_trips,
        hybrid_query_never_mixes_models,
        list_sources_pages_in_order,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.RAG_CONFORMANCE_CHECKS` order."""
