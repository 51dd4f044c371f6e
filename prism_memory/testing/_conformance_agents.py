"""Conformance checks for agent-facing behaviour: embedding-model identity, read-after-write and
resource-wide (cross-thread) recall.

They live beside :mod:`prism_memory.testing._conformance` (whose helpers they use) and are added to
its :data:`~prism_memory.testing.CONFORMANCE_CHECKS`, so every backend runs them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..embedding import Embedder
from ..errors import CapExceededError, EmbeddingModelMismatchError, ValidationError
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

    await first.aclose()  # its indexing worker would embed the other memory's rows too

    other = case.memory(embedder=_NamedEmbedder(kit.embedder, "model-b@2"))
    await _raises(EmbeddingModelMismatchError, other.recall("cat"), "other model recalls")
    unnamed = case.memory()  # an embedder without ``model`` cannot be checked: it is trusted
    _check(await _ids(unnamed, "cat on the red mat") == ["m1"], "unnamed embedder recalls")

    await other.remember({"id": "m2", "text": "a dog in the fog"}, wait=True)
    _check((await other.get("m2")).embedding_model == "model-b@2", "second model recorded")
    reader = case.memory(embedder=_NamedEmbedder(kit.embedder, "model-a@1"))  # recall only
    await _raises(EmbeddingModelMismatchError, reader.recall("dog"), "mixed thread, first model")
    page = await other.rebuild_index()
    _check(page.rebuilt == 2 and page.next_cursor is None, f"rebuild page {page}")
    _check((await other.get("m1")).embedding_model == "model-b@2", "rebuild re-records model")
    _check(set(await _ids(other, "cat dog", top_k=5)) == {"m1", "m2"}, "rebuilt thread recalls")
    await _raises(EmbeddingModelMismatchError, reader.recall("cat"), "old model after rebuild")

    # correct() re-embeds with the correcting memory's model and records it.
    await other.correct("m2", "a dog in the morning fog")
    _check((await other.get("m2")).embedding_model == "model-b@2", "correct records its model")
    for memory in (other, reader, unnamed):
        await memory.aclose()


class _HeldEmbedder:
    """Delegates, but a call embedding a text that contains ``marker`` waits for :meth:`release`
    (queries without the marker pass straight through)."""

    def __init__(self, inner: Embedder, marker: str) -> None:
        self._inner = inner
        self._marker = marker
        self._gate = asyncio.Event()

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    def release(self) -> None:
        self._gate.set()

    async def embed(self, texts: Sequence[str]) -> Any:
        if any(self._marker in text for text in texts):
            await self._gate.wait()
        return await self._inner.embed(texts)


async def recall_reports_and_can_wait_for_pending_writes(kit: ConformanceKit) -> None:
    """``RecallResult.pending`` counts the thread's not-yet-embedded entries; ``include_pending``
    waits, within its bound, for this memory's own writes before recalling."""
    case = _Case(kit)
    held = _HeldEmbedder(kit.embedder, "HELD")
    memory = case.memory(embedder=held)
    await memory.remember({"id": "early", "text": "the kettle is in the kitchen"}, wait=True)
    await memory.remember({"id": "late", "text": "the kettle is blue HELD"})
    plain = await memory.recall("blue kettle")
    _check([h.id for h in plain.hits] == ["early"], f"not yet embedded: {plain.hits}")
    _check(plain.pending == 1, f"pending={plain.pending}")
    bounded = await memory.recall("blue kettle", include_pending=0.05)
    _check(bounded.pending == 1, "a timed-out wait still reports what is pending")
    _check([h.id for h in bounded.hits] == ["early"], "a timed-out wait recalls what exists")

    async def release_soon() -> None:
        await asyncio.sleep(0.05)
        held.release()

    releaser = asyncio.create_task(release_soon())
    waited = await memory.recall("blue kettle", include_pending=True)
    await releaser
    _check(waited.pending == 0, f"pending after waiting={waited.pending}")
    _check(waited.hits[0].id == "late", f"waited recall sees its own write: {waited.hits}")
    for bad in (-1, float("nan"), "yes"):
        await _raises(ValidationError, memory.recall("x", include_pending=bad), f"{bad!r}")  # type: ignore[arg-type]
    await _raises(CapExceededError, memory.recall("x", include_pending=61), "over the cap")
    await memory.aclose()


AGENT_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        embedding_model_is_recorded_and_checked,
        recall_reports_and_can_wait_for_pending_writes,
    )
}
"""The checks of this module by name; part of ``CONFORMANCE_CHECKS``."""
