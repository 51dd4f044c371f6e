"""Conformance checks for agent-facing behaviour: embedding-model identity, read-after-write and
resource-wide (cross-thread) recall.

They live beside :mod:`prism_memory.testing._conformance` (whose helpers they use) and are added to
its :data:`~prism_memory.testing.CONFORMANCE_CHECKS`, so every backend runs them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..embedding import Embedder
from ..errors import EmbeddingModelMismatchError
from ._conformance import ConformanceKit, _Case, _check, _ids, _raises

__all__ = ["AGENT_CHECKS"]


class _NamedEmbedder:
    """Delegates to an embedder and names a ``model``."""

    def __init__(self, inner: Embedder, model: str) -> None:
        self._inner = inner
        self.model = model

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        return await self._inner.embed(texts)


async def embedding_model_is_recorded_and_checked(kit: ConformanceKit) -> None:
    """Each vector records the embedder's ``model``; recall with another model raises a typed error
    instead of mixing vector spaces, until ``rebuild_index`` re-embeds with the new one."""
    case = _Case(kit)
    first = case.memory(embedder=_NamedEmbedder(kit.embedder, "model-a@1"))
    await first.remember({"id": "m1", "text": "the cat sat on the mat"}, wait=True)
    _check((await first.get("m1")).embedding_model == "model-a@1", "model recorded on index")
    _check(await _ids(first, "cat on the mat") == ["m1"], "same model recalls")
    await first.correct("m1", "the cat sat on the red mat")
    _check((await first.get("m1")).embedding_model == "model-a@1", "model recorded on correct")

    other = case.memory(embedder=_NamedEmbedder(kit.embedder, "model-b@2"))
    await _raises(EmbeddingModelMismatchError, other.recall("cat"), "other model recalls")
    unnamed = case.memory()  # an embedder without ``model`` cannot be checked: it is trusted
    _check(await _ids(unnamed, "cat on the red mat") == ["m1"], "unnamed embedder recalls")

    await other.remember({"id": "m2", "text": "a dog in the fog"}, wait=True)
    _check((await other.get("m2")).embedding_model == "model-b@2", "second model recorded")
    await _raises(EmbeddingModelMismatchError, first.recall("dog"), "mixed thread, first model")
    page = await other.rebuild_index()
    _check(page.rebuilt == 2 and page.next_cursor is None, f"rebuild page {page}")
    _check((await other.get("m1")).embedding_model == "model-b@2", "rebuild re-records model")
    _check(set(await _ids(other, "cat dog", top_k=5)) == {"m1", "m2"}, "rebuilt thread recalls")
    await _raises(EmbeddingModelMismatchError, first.recall("cat"), "old model after rebuild")

    # Changing the text drops the vector and with it the recorded model.
    await other.remember({"id": "m2", "text": "a dog in the morning fog"})
    _check((await other.get("m2")).embedding_model is None, "text change forgets the model")
    for memory in (first, other, unnamed):
        await memory.aclose()


AGENT_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check for check in (embedding_model_is_recorded_and_checked,)
}
"""The checks of this module by name; part of ``CONFORMANCE_CHECKS``."""
