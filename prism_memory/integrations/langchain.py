"""LangChain adapters (extra ``langchain``): a vector store, a memory retriever, embedding bridges.

* :class:`PrismVectorStore` -- a LangChain ``VectorStore`` over prism_memory's RAG store
  (:mod:`prism_memory.rag`): in memory by default, on PostgreSQL when handed
  ``await create_postgres_vector_store(...)``. Each document is one RAG *source* (its id) of one
  chunk; the RAG store's access control (``authorization=``) is applied inside every query and
  ``get_by_ids``, and ``hybrid=True`` fuses the vector and BM25 legs as recall does.
* :class:`PrismMemoryRetriever` -- a LangChain retriever over :meth:`prism_memory.Memory.recall`,
  for conversational memory (every exclusion rule of recall applies).
* :class:`LangChainEmbedder` turns a LangChain ``Embeddings`` into prism's
  :class:`~prism_memory.Embedder`; :class:`PrismEmbeddings` turns a prism embedder into a LangChain
  ``Embeddings``. Both are async and batched, and carry a model identity (``model``).

Sync methods run their async twin on a private event loop (in a worker thread when the caller is
already inside one); on PostgreSQL give the store an engine with ``NullPool`` for sync use, or use
the async methods.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from ..errors import ConfigurationError, ValidationError

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.vectorstores import VectorStore
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigurationError(
        "prism_memory.integrations.langchain needs langchain-core: "
        "pip install 'prism-memory[langchain]'"
    ) from exc

from ..embedding import Embedder, assert_finite_vector, embedder_model
from ..memory import Memory
from ..models import Vector
from ..rag import Authorization, Chunk, InMemoryRagStore, RagHit, RagScope, RagStore, hybrid_query
from ..windows import embed_whole

__all__ = ["LangChainEmbedder", "PrismEmbeddings", "PrismMemoryRetriever", "PrismVectorStore"]

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end from synchronous code: on a fresh event loop, in a worker
    thread when this thread already runs one (a loop cannot be re-entered)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _model_of(embeddings: Embeddings) -> str:
    kind = type(embeddings)
    name = f"langchain:{kind.__module__}.{kind.__qualname__}"
    for attribute in ("model", "model_name"):
        value = getattr(embeddings, attribute, None)
        if isinstance(value, str) and value:
            return f"{name}:{value}"[:256]
    return name[:256]


# ---- embeddings, both ways ---------------------------------------------------------------------


class LangChainEmbedder:
    """A LangChain ``Embeddings`` as prism's :class:`~prism_memory.Embedder`.

    ``dimensions`` is the model's width (LangChain does not expose it). ``model`` names the model
    for prism's vector bookkeeping; by default the ``Embeddings`` class and its ``model`` (or
    ``model_name``) attribute, so two different models are never mixed silently.
    """

    def __init__(
        self, embeddings: Embeddings, *, dimensions: int, model: str | None = None
    ) -> None:
        if not isinstance(embeddings, Embeddings):
            raise ConfigurationError("LangChainEmbedder needs a langchain_core Embeddings")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ConfigurationError("dimensions must be a positive integer")
        self.embeddings = embeddings
        self._dimensions = dimensions
        self.model = model if model is not None else _model_of(embeddings)
        embedder_model(self)  # validates ``model``

    @property
    def dimensions(self) -> int:
        """Width of every vector."""
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> Vector:
        """Embed documents through ``aembed_documents``, as a ``(len(texts), dimensions)`` array."""
        if not texts:
            return np.zeros((0, self._dimensions), dtype=np.float32)
        return np.asarray(await self.embeddings.aembed_documents(list(texts)), dtype=np.float64)

    async def embed_query(self, text: str) -> Vector:
        """Embed a search query through ``aembed_query`` (models may embed queries differently)."""
        return assert_finite_vector(
            await self.embeddings.aembed_query(text), "query embedding", self._dimensions
        )

    def __repr__(self) -> str:
        return f"LangChainEmbedder({self.model!r}, dimensions={self._dimensions})"


class PrismEmbeddings(Embeddings):
    """prism's :class:`~prism_memory.Embedder` as a LangChain ``Embeddings``.

    Texts go to the embedder in batches of ``batch_size`` (≤ 128) and every vector is checked
    (finite, the embedder's width). ``model`` is the embedder's own identity.
    """

    def __init__(self, embedder: Embedder, *, batch_size: int = 32) -> None:
        self.embedder = embedder
        self.batch_size = batch_size
        self.model = embedder_model(embedder)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed ``texts``, batched."""
        matrix = await embed_whole(self.embedder, texts, batch_size=self.batch_size)
        return [[float(x) for x in row] for row in matrix]

    async def aembed_query(self, text: str) -> list[float]:
        """Embed one query text."""
        return (await self.aembed_documents([text]))[0]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Sync twin of :meth:`aembed_documents`."""
        return run_sync(self.aembed_documents(texts))

    def embed_query(self, text: str) -> list[float]:
        """Sync twin of :meth:`aembed_query`."""
        return run_sync(self.aembed_query(text))


# ---- the vector store --------------------------------------------------------------------------


def _document(hit: RagHit) -> Document:
    return Document(id=hit.source_id, page_content=hit.text, metadata=dict(hit.metadata))


class PrismVectorStore(VectorStore):
    """A LangChain ``VectorStore`` over a prism RAG store.

    ``store`` is a :class:`~prism_memory.rag.RagStore` (default: a fresh in-memory one; for
    PostgreSQL pass ``await create_postgres_vector_store(...)``, which the host closes). Documents
    live in the RAG scope ``(tenant_id, resource_id, collection)``. ``authorization`` (an
    :class:`~prism_memory.rag.AccessConstraint`, ``"acl"`` or ``None``) is applied to every search
    and ``get_by_ids``; grants are set with the store's own ``set_source_access`` (a document's
    source id is its id). ``filter`` arguments are equality filters on metadata (JSON scalars).
    ``hybrid=True`` on a search (or ``as_retriever(search_kwargs={"hybrid": True})``) ranks by
    :func:`~prism_memory.rag.hybrid_query`'s fusion of cosine and BM25.
    """

    def __init__(
        self,
        embedding: Embeddings,
        *,
        store: RagStore | None = None,
        tenant_id: str = "default",
        resource_id: str = "langchain",
        collection: str | None = None,
        authorization: Authorization = None,
    ) -> None:
        self.embedding = embedding
        self.store: RagStore = InMemoryRagStore() if store is None else store
        self.scope = RagScope(tenant_id=tenant_id, resource_id=resource_id, collection=collection)
        self.authorization = authorization

    @property
    def embeddings(self) -> Embeddings:
        """The LangChain embeddings the store embeds documents and queries with."""
        return self.embedding

    # ---- writes ------------------------------------------------------------------------------

    async def aadd_embeddings(
        self,
        text_embeddings: Iterable[tuple[str, Sequence[float]]],
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Add texts with vectors computed elsewhere; return their ids (new ones are UUIDs). A
        document whose id exists is replaced. All are written in one transaction."""
        pairs = list(text_embeddings)
        if metadatas is not None and len(metadatas) != len(pairs):
            raise ValidationError(f"{len(metadatas)} metadatas for {len(pairs)} texts")
        if ids is not None and len(ids) != len(pairs):
            raise ValidationError(f"{len(ids)} ids for {len(pairs)} texts")
        chosen = [
            (ids[i] if ids is not None and ids[i] else None) or str(uuid.uuid4())
            for i in range(len(pairs))
        ]
        chunks = [
            Chunk(
                source_id=chosen[i],
                index=0,
                text=text,
                embedding=assert_finite_vector(list(vector), f"embedding {i}"),
                metadata=dict(metadatas[i]) if metadatas is not None else {},
            )
            for i, (text, vector) in enumerate(pairs)
        ]
        latest = {chunk.source_id: chunk for chunk in chunks}  # the last of an id wins
        async with self.store.transaction() as tx:
            for source_id in latest:
                await tx.delete_source(self.scope, source_id)
            await tx.upsert(self.scope, list(latest.values()))
        return chosen

    def add_embeddings(
        self,
        text_embeddings: Iterable[tuple[str, Sequence[float]]],
        metadatas: Sequence[Mapping[str, Any]] | None = None,
        *,
        ids: Sequence[str | None] | None = None,
    ) -> list[str]:
        """Sync twin of :meth:`aadd_embeddings`."""
        return run_sync(self.aadd_embeddings(text_embeddings, metadatas, ids=ids))

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Embed and add ``documents`` (ids from ``ids=`` or each ``Document.id``, else new)."""
        ids = kwargs.get("ids") or [document.id for document in documents]
        texts = [document.page_content for document in documents]
        vectors = await self.embedding.aembed_documents(texts) if texts else []
        return await self.aadd_embeddings(
            zip(texts, vectors, strict=True),
            [document.metadata for document in documents],
            ids=ids,
        )

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Sync twin of :meth:`aadd_documents`."""
        return run_sync(self.aadd_documents(documents, **kwargs))

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Really delete the documents ``ids`` (missing ones are ignored), in one transaction."""
        if ids is None:
            raise ValidationError("delete needs the ids of the documents to delete")
        async with self.store.transaction() as tx:
            for source_id in dict.fromkeys(ids):
                await tx.delete_source(self.scope, source_id)
        return True

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Sync twin of :meth:`adelete`."""
        return run_sync(self.adelete(ids, **kwargs))

    # ---- reads -------------------------------------------------------------------------------

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The documents of ``ids`` that exist (and that ``authorization`` may read), in order."""
        found: list[Document] = []
        for source_id in dict.fromkeys(ids):
            if not await self._readable(source_id):
                continue
            found.extend(
                Document(id=source_id, page_content=chunk.text, metadata=dict(chunk.metadata))
                for chunk in await self.store.get_by_source(self.scope, source_id)
            )
        return found

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """Sync twin of :meth:`aget_by_ids`."""
        return run_sync(self.aget_by_ids(ids))

    async def _readable(self, source_id: str) -> bool:
        if self.authorization is None:
            return True
        if isinstance(self.authorization, str):  # "acl" with no principal: nothing is granted
            return False
        return await self.store.check_source_access(self.scope, source_id, self.authorization)

    async def _hits(
        self,
        vector: Sequence[float],
        k: int,
        filter: Mapping[str, Any] | None,
        query: str | None,
        hybrid: bool,
    ) -> list[RagHit]:
        embedding = assert_finite_vector(list(vector), "query embedding")
        if hybrid:
            if query is None:
                raise ValidationError("a hybrid search needs the query text")
            return await hybrid_query(
                self.store,
                self.scope,
                text=query,
                top_k=k,
                embedding=embedding,
                filter=filter,
                authorization=self.authorization,
            )
        return await self.store.query(
            self.scope,
            embedding=embedding,
            top_k=k,
            filter=filter,
            authorization=self.authorization,
        )

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest to ``query`` with their cosine similarity (the fused score
        when ``hybrid=True``); ``filter=`` keeps documents whose metadata equals it."""
        vector = await self.embedding.aembed_query(query)
        hits = await self._hits(
            vector, k, kwargs.get("filter"), query, bool(kwargs.get("hybrid", False))
        )
        return [(_document(hit), hit.score) for hit in hits]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Sync twin of :meth:`asimilarity_search_with_score`."""
        return run_sync(self.asimilarity_search_with_score(query, k, **kwargs))

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents nearest to ``query`` (see :meth:`asimilarity_search_with_score`)."""
        return [doc for doc, _ in await self.asimilarity_search_with_score(query, k, **kwargs)]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Sync twin of :meth:`asimilarity_search`."""
        return run_sync(self.asimilarity_search(query, k, **kwargs))

    async def asimilarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest to ``embedding``, with their cosine similarity."""
        hits = await self._hits(embedding, k, kwargs.get("filter"), None, hybrid=False)
        return [(_document(hit), hit.score) for hit in hits]

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Sync twin of :meth:`asimilarity_search_with_score_by_vector`."""
        return run_sync(self.asimilarity_search_with_score_by_vector(embedding, k, **kwargs))

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` documents nearest to ``embedding``."""
        pairs = await self.asimilarity_search_with_score_by_vector(embedding, k, **kwargs)
        return [doc for doc, _ in pairs]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """Sync twin of :meth:`asimilarity_search_by_vector`."""
        return run_sync(self.asimilarity_search_by_vector(embedding, k, **kwargs))

    def _select_relevance_score_fn(self) -> Any:
        """Cosine similarity in [−1, 1] as a relevance in [0, 1]."""
        return lambda similarity: (1.0 + similarity) / 2.0

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> PrismVectorStore:
        """A new store (``kwargs`` go to the constructor) holding ``texts``."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


# ---- conversational memory ---------------------------------------------------------------------


class PrismMemoryRetriever(BaseRetriever):
    """A LangChain retriever over :meth:`prism_memory.Memory.recall`.

    Each hit becomes a ``Document`` (``id`` = the entry id, ``page_content`` = its text, metadata:
    ``role``, ``score``, ``similarity``, ``occurred_at``, ``sequence`` and the entry's own
    metadata under ``metadata``). ``scope="resource"`` also reaches the user's ``user``/``profile``
    entries of their other threads, as recall does.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    top_k: int = 4
    scope: Literal["thread", "resource"] = "thread"

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        result = await self.memory.recall(query, top_k=self.top_k, scope=self.scope)
        return [
            Document(
                id=hit.record.id,
                page_content=hit.record.text,
                metadata={
                    "role": hit.record.role,
                    "score": hit.score,
                    "similarity": hit.similarity,
                    "occurred_at": hit.record.occurred_at.isoformat(),
                    "sequence": hit.record.sequence,
                    "metadata": dict(hit.record.metadata),
                },
            )
            for hit in result.hits
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return run_sync(
            self._aget_relevant_documents(
                query, run_manager=AsyncCallbackManagerForRetrieverRun.get_noop_manager()
            )
        )
