"""Conformance checks for agent-facing behaviour: embedding-model identity, read-after-write and
resource-wide (cross-thread) recall.

They live beside :mod:`prism_memory.testing._conformance` (whose helpers they use) and are added to
its :data:`~prism_memory.testing.CONFORMANCE_CHECKS`, so every backend runs them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from ..embedding import Embedder
from ..errors import CapExceededError, EmbeddingModelMismatchError, ValidationError
from ..lexical import query_terms
from ..stores.base import RecallFilter, SearchRequest
from ._support import ConformanceKit, _Case, _check, _forget_threads, _ids, _raises

__all__ = ["AGENT_CHECKS"]


class _NamedEmbedder:
    """Delegates to an embedder and names a ``model`` (``None``: an embedder without one)."""

    def __init__(self, inner: Embedder, model: str | None) -> None:
        self._inner = inner
        self.model = model

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed(self, texts: Sequence[str]) -> Any:
        return await self._inner.embed(texts)


async def embedding_model_is_recorded_and_checked(kit: ConformanceKit) -> None:
    """Each vector records the embedder's ``model``; recall with another model raises a typed error
    instead of mixing vector spaces; another model's writes into the thread (remember, correct,
    rebuild) are refused and write nothing, until ``rebuild_index(switch_model=True)`` re-embeds
    the thread with the new model; a thread holding two models is recalled by no one."""
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
    unnamed = case.memory(embedder=_NamedEmbedder(kit.embedder, None))  # cannot be checked
    _check(await _ids(unnamed, "cat on the red mat") == ["m1"], "unnamed embedder recalls")

    entry = {"id": "m2", "text": "a dog in the fog"}
    await _raises(EmbeddingModelMismatchError, other.remember(entry), "other model remembers")
    await _raises(EmbeddingModelMismatchError, other.remember(entry, wait=True), "... waiting")
    await _raises(EmbeddingModelMismatchError, other.correct("m1", "a cat"), "other corrects")
    await _raises(EmbeddingModelMismatchError, other.rebuild_index(), "rebuild, no switch")
    _check(await kit.vector_store.known_ids(other.identity, ["m2"]) == set(), "m2 not written")
    kept = await other.get("m1")
    _check(
        (kept.text, kept.embedding_model, kept.revision)
        == ("the cat sat on the red mat", "model-a@1", 2),
        f"m1 untouched by the refused writes: {kept.text!r} {kept.embedding_model!r}",
    )

    # the switch: re-embed every page with the new model, then write and recall with it
    page = await other.rebuild_index(switch_model=True)
    _check(page.rebuilt == 1 and page.next_cursor is None, f"switch page {page}")
    _check((await other.get("m1")).embedding_model == "model-b@2", "rebuild re-records model")
    await other.remember(entry, wait=True)
    _check((await other.get("m2")).embedding_model == "model-b@2", "second model recorded")
    _check(set(await _ids(other, "cat dog", top_k=5)) == {"m1", "m2"}, "switched thread recalls")
    reader = case.memory(embedder=_NamedEmbedder(kit.embedder, "model-a@1"))  # the old model
    await _raises(EmbeddingModelMismatchError, reader.recall("cat"), "old model after switch")
    await _raises(EmbeddingModelMismatchError, reader.remember({"text": "x"}), "old model writes")

    # correct() re-embeds with the correcting memory's model and records it.
    await other.correct("m2", "a dog in the morning fog")
    _check((await other.get("m2")).embedding_model == "model-b@2", "correct records its model")

    # a switch interrupted after one page leaves two models: nobody ranks them together
    third = case.memory(embedder=_NamedEmbedder(kit.embedder, "model-c@3"))
    half = await third.rebuild_index(batch_size=1, switch_model=True)
    _check(half.rebuilt == 1 and half.next_cursor is not None, f"half a switch {half}")
    for memory, what in ((other, "b"), (third, "c"), (unnamed, "unnamed")):
        await _raises(EmbeddingModelMismatchError, memory.recall("cat dog"), f"mixed, {what}")
    for memory in (other, reader, unnamed, third):
        await memory.aclose()
    await _forget_threads(case, "thread-1")  # three models' vectors: leave the store as found


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
    found = await kit.vector_store.search(
        memory.identity,
        SearchRequest(
            vector=(await kit.embedder.embed(["kettle"]))[0],
            terms=query_terms("kettle"),
            limit=4,
            filter=RecallFilter(now=case.clock()),
        ),
    )
    _check(
        found.pending in (None, 1),
        f"a store that counts pending rows in its search counts what count_pending does: {found}",
    )
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
    # a thread whose only entry waits for its vector: nothing to recall, one pending
    other_held = _HeldEmbedder(kit.embedder, "HELD")
    alone = case.memory("thread-2", embedder=other_held)
    await alone.remember({"id": "only", "text": "a red kettle HELD"})
    empty = await alone.recall("red kettle")
    _check(empty.hits == () and empty.pending == 1, f"only a pending entry: {empty}")
    other_held.release()
    await alone.aclose()


def _user(entry_id: str, text: str, scope: str = "user", **extra: Any) -> dict[str, Any]:
    return {"id": entry_id, "text": text, "consent": {"source": "user", "scope": scope}, **extra}


async def resource_recall_follows_the_user_across_threads(kit: ConformanceKit) -> None:
    """``recall(scope="resource")`` reaches the ``user``/``profile`` entries of the resource's other
    threads; ``thread`` entries, other resources and other tenants stay out."""
    case = _Case(kit)
    chat_a = case.memory(thread="chat-a")
    chat_b = case.memory(thread="chat-b")
    await chat_a.remember(
        [
            _user("u1", "Ada is allergic to peanuts"),
            _user("p1", "Ada lives in Lyon and likes peanuts-free pastries", scope="profile"),
            {"id": "t1", "text": "in this chat Ada asked about peanuts cookies"},
            _user("t2", "peanuts were mentioned in passing", scope="thread"),
        ],
        wait=True,
    )
    await chat_b.remember({"id": "b1", "text": "peanuts are on the shopping list"}, wait=True)
    _check(await _ids(chat_b, "peanuts", top_k=10) == ["b1"], "thread recall stays in its thread")
    got = await chat_b.recall("peanuts", top_k=10, scope="resource")
    by_id = {hit.id: hit for hit in got.hits}
    _check(set(by_id) == {"b1", "u1", "p1"}, f"resource recall: {sorted(by_id)}")
    _check(len(got.hits) == 3, "each entry once")
    _check(by_id["u1"].shared and by_id["u1"].record.thread_id == "chat-a", "marked, owned by A")
    _check(not by_id["b1"].shared, "own entries are not marked shared")
    ranged = await chat_b.recall("peanuts", top_k=10, scope="resource", message_range=2)
    _check(all(r.thread_id == "chat-b" for r in ranged.adjacent), "neighbours: own thread only")
    own_side = await chat_a.recall("peanuts", top_k=10, scope="resource")
    _check(
        sorted(h.id for h in own_side.hits) == ["p1", "t1", "t2", "u1"],
        f"the owning thread sees its own entries once: {[h.id for h in own_side.hits]}",
    )
    await _raises(ValidationError, chat_b.recall("peanuts", scope="tenant"), "bad scope")  # type: ignore[arg-type]

    new_thread = case.memory(thread="chat-c")  # a conversation with nothing in it yet
    _check(
        set(await _ids(new_thread, "allergic peanuts", scope="resource")) == {"u1", "p1"},
        "a fresh conversation recalls the user's facts",
    )
    block = await new_thread.context_provider(working=False, scope="resource").render("peanuts")
    _check(
        block.index("allergic to peanuts") < block.index("lives in Lyon"),
        f"one chronological block: {block!r}",
    )
    other_user = case.memory(thread="chat-b", resource_id="user-bob")
    _check(await _ids(other_user, "peanuts", scope="resource") == [], "another resource")
    other_tenant = case.memory(thread="chat-b", tenant_id=f"{case.tenant}-other")
    _check(await _ids(other_tenant, "peanuts", scope="resource") == [], "another tenant")
    for memory in (chat_a, chat_b):
        await memory.aclose()


async def resource_recall_keeps_every_exclusion_rule(kit: ConformanceKit) -> None:
    """Revocation, a narrowed scope, legal hold, lineage invalidation and retention remove an entry
    from other threads' resource-wide recall at once; only the owning thread forgets or exports it."""
    case = _Case(kit)
    chat_a = case.memory(thread="chat-a")
    chat_b = case.memory(thread="chat-b")
    await chat_a.remember(
        [
            _user("u1", "Ada is allergic to peanuts"),
            _user("u2", "Ada's peanuts allergy is severe"),
            _user("u3", "Ada keeps peanuts-free snacks"),
            _user("s1", "Ada's doctor is Dr Peanuts"),
        ],
        wait=True,
    )
    await chat_a.remember(
        _user("d1", "summary: see Dr Peanuts yearly", lineage={"source_ids": ["s1"]}), wait=True
    )

    async def seen() -> set[str]:
        return set(await _ids(chat_b, "peanuts", top_k=10, scope="resource"))

    _check(await seen() == {"u1", "u2", "u3", "s1", "d1"}, "all recallable at first")
    await chat_a.set_consent("u1", visible=False)
    _check("u1" not in await seen(), "revoked in A: gone from B at once")
    await chat_a.set_consent("u1", visible=True)
    _check("u1" in await seen(), "granted again: back")
    await chat_a.set_consent("u2", scope="thread")
    _check("u2" not in await seen(), "narrowed to its thread")
    await chat_a.forget(ids=["u3"], hold=True)
    _check("u3" not in await seen(), "legal hold")
    await chat_a.correct("s1", "Ada's doctor is Dr Peanuts, at the Lyon clinic")
    _check("d1" not in await seen() and "s1" in await seen(), "lineage invalidated by a correction")

    _check(await chat_b.forget(ids=["u1"]) == 0, "B cannot forget A's entry")
    _check("u1" in await seen(), "still there after B's attempt")
    page = await chat_b.export_memory(identity=chat_b.identity)
    _check(all(e["thread_id"] == "chat-b" for e in page.entries), "B exports only its own")
    exported = await chat_a.export_memory(identity=chat_a.identity)
    _check("u1" in {e["id"] for e in exported.entries}, "A exports it")
    _check(await chat_a.forget(ids=["u1"]) == 1, "A forgets it")
    _check("u1" not in await seen(), "forgotten in A: gone from B")

    await chat_a.remember(
        _user("old", "Ada once disliked peanuts", occurred_at=case.clock() - timedelta(days=3)),
        wait=True,
    )
    _check("old" in await seen(), "no retention window: old entry recalled")
    windowed = case.memory(thread="chat-b", retention_days=1)
    windowed_ids = await _ids(windowed, "peanuts", top_k=10, scope="resource")
    _check("old" not in windowed_ids, "the reader's retention window applies")
    swept = await chat_a.apply_retention(max_age_days=1)
    _check(swept.deleted == 1 and "old" not in await seen(), "A's retention sweep deletes it")

    # a parent's grant and resource-wide recall together still count each entry once
    await chat_a.share_with("chat-b", ["s1"])
    both = await chat_b.recall(
        "doctor", top_k=10, scope="resource", share_from_parent_thread_id="chat-a"
    )
    _check([h.id for h in both.hits].count("s1") == 1, "granted and travelling: once")
    for memory in (chat_a, chat_b):
        await memory.aclose()


AGENT_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        embedding_model_is_recorded_and_checked,
        recall_reports_and_can_wait_for_pending_writes,
        resource_recall_follows_the_user_across_threads,
        resource_recall_keeps_every_exclusion_rule,
    )
}
"""The checks of this module by name; part of ``CONFORMANCE_CHECKS``."""
