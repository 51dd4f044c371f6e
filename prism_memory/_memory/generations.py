"""Which embedding model a memory's recall embeds its query with: the one the store reports
active (:attr:`~prism_memory.stores.base.SearchResult.active_model`), among the memory's
``embedder`` and ``next_embedder`` -- the read side of a model change without an outage."""

from __future__ import annotations

from ..embedding import Embedder, embedder_model
from ..errors import EmbeddingModelMismatchError
from .core import MemoryContext

__all__ = ["MAX_MODEL_ROUNDS", "ActiveModel"]

MAX_MODEL_ROUNDS = 3
"""At most this many searches per recall while the store reports another active model."""


class ActiveModel:
    """The model this memory believes the store answers recall from (at first its own
    embedder's; then whatever a search last reported), and the embedder of each model."""

    __slots__ = ("_ctx", "_next_model", "model")

    def __init__(self, ctx: MemoryContext) -> None:
        self._ctx = ctx
        self._next_model = None if ctx.next_embedder is None else embedder_model(ctx.next_embedder)
        self.model: str | None = ctx.embedding_model
        """The model the next recall embeds its query with."""

    def embedder(self) -> Embedder:
        """The embedder of :attr:`model`."""
        ctx = self._ctx
        if self.model != ctx.embedding_model and ctx.next_embedder is not None:
            return ctx.next_embedder
        return ctx.embedder

    def follow(self, active: str | None) -> bool:
        """Take the store's reported ``active`` model; whether the query must be embedded again
        (it was embedded with another model). :class:`EmbeddingModelMismatchError` when neither
        of this memory's embedders makes that model."""
        if active is None or active == self.model:
            return False
        ctx = self._ctx
        if ctx.next_writer is not None:
            ctx.next_writer.forget()  # the store changed: ask it again which generation is next
        if active in (ctx.embedding_model, self._next_model):
            self.model = active
            return True
        if ctx.embedding_model is None and self.model is None:
            return False  # an embedder without a model: recall as before generations existed
        raise EmbeddingModelMismatchError(
            "the vector store answers recall from another embedding model than this memory's "
            "embedder and next_embedder make: give the memory an embedder of the active model "
            "(docs/operations.md, 'Switching models')"
        )
