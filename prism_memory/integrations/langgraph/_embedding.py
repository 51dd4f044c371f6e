"""What a store embeds and with what: ``IndexConfig.embed`` as prism's embedder and a query
function, and the texts ``IndexConfig.fields`` (or a put's ``index=[...]``) pick out of a value."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import cast

import numpy as np
from langgraph.store.base import PutOp, ensure_embeddings, get_text_at_path, tokenize_path

from ...embedding import Embedder, assert_finite_vector
from ...errors import ConfigurationError
from ...models import Vector
from ...windows import embed_whole
from ..langchain import LangChainEmbedder

QueryEmbed = Callable[[str], Awaitable[Vector]]
Paths = list[tuple[str, str | list[str]]]
"""The fields to embed, each with its tokenized path (``"$"``: the whole value)."""


class ZeroEmbedder:
    """The embedder of a store without an index: every text gets a zero vector (never scored)."""

    model = None

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions

    async def embed(self, texts: Sequence[str]) -> Vector:
        """One zero row per text."""
        return np.zeros((len(texts), self.dimensions), dtype=np.float32)


def embedding(embed: object, dims: int) -> tuple[Embedder, QueryEmbed]:
    """Documents' and queries' embedding functions of ``IndexConfig.embed``: a prism
    :class:`~prism_memory.Embedder`, a LangChain ``Embeddings``, a (sync or async) function of a
    list of texts, or a ``"provider:model"`` string LangChain can load."""
    if hasattr(embed, "dimensions") and callable(getattr(embed, "embed", None)):
        embedder = cast("Embedder", embed)
        if embedder.dimensions != dims:
            raise ConfigurationError(
                f"index dims {dims} differ from the embedder's width {embedder.dimensions}"
            )

        async def embed_query(text: str) -> Vector:
            matrix = await embed_whole(embedder, [text], batch_size=1)
            return assert_finite_vector(matrix[0], "query embedding")

        return embedder, embed_query
    bridge = LangChainEmbedder(
        ensure_embeddings(embed),  # type: ignore[arg-type]
        dimensions=dims,
    )
    return bridge, bridge.embed_query


def paths(fields: Sequence[str]) -> Paths:
    """``fields`` with their tokenized paths."""
    return [(field, field if field == "$" else tokenize_path(field)) for field in fields]


def texts_of(op: PutOp, fields: Paths | None) -> list[str]:
    """The texts to embed for ``op`` under the store's ``fields`` (``None``: the store has no
    index); empty: store it without a vector."""
    if fields is None or op.index is False or op.value is None:
        return []
    chosen = fields if op.index is None else paths(list(op.index))
    texts: list[str] = []
    for _, path in chosen:
        texts.extend(get_text_at_path(op.value, path))
    return texts
