"""Conformance checks of isolation, sharing, export and the index rebuild.

They run on every backend through :data:`~prism_memory.testing.CONFORMANCE_CHECKS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from ..errors import (
    AccessDeniedError,
    CapExceededError,
    NotFoundError,
    ValidationError,
)
from ._fixtures import GatedEmbedder
from ._support import ConformanceKit, _Case, _check, _ids, _raises

__all__ = ["SCOPE_CHECKS"]


async def scopes_are_isolated(kit: ConformanceKit) -> None:
    """Other tenants, resources and threads never see an entry, by recall, id, lineage or export."""
    case = _Case(kit)
    owner = case.memory()
    await owner.remember([{"id": "secret", "text": "the vault code is blue"}], wait=True)
    others = [
        case.memory(tenant_id=f"{case.tenant}-x"),
        case.memory(resource_id="user-eve"),
        case.memory(thread="thread-2"),
    ]
    for other in others:
        _check(await _ids(other, "vault code blue") == [], "no cross-scope recall")
        await _raises(NotFoundError, other.get("secret"), "no cross-scope get")
        _check(await other.forget(ids=["secret"]) == 0, "no cross-scope delete")
        await _raises(
            ValidationError,
            other.remember([{"id": "d", "text": "derived", "lineage": {"source_ids": ["secret"]}}]),
            "no cross-scope lineage",
        )
        await _raises(
            AccessDeniedError,
            other.export_memory(identity=owner.identity),
            "export needs the exact identity",
        )
    _check(await _ids(owner, "vault code blue") == ["secret"], "owner unaffected")
    for memory in (owner, *others):
        await memory.aclose()


async def sharing_is_parent_to_child_only(kit: ConformanceKit) -> None:
    """A grant lets one child recall named parent entries; siblings, expiry and revocation deny."""
    case = _Case(kit)
    parent = case.memory(thread="parent")
    child = case.memory(thread="child")
    sibling = case.memory(thread="sibling")
    await parent.remember(
        [{"id": "p1", "text": "project codename Falcon"}, {"id": "p2", "text": "Falcon budget"}],
        wait=True,
    )
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "no grant")
    expires = case.clock() + timedelta(hours=1)
    await parent.share_with("child", ["p1"], expires_at=expires)
    got = await child.recall("Falcon", share_from_parent_thread_id="parent")
    _check([h.id for h in got.hits] == ["p1"] and got.hits[0].shared, "only the granted entry")
    _check(
        await _ids(sibling, "Falcon", share_from_parent_thread_id="parent") == [], "sibling denied"
    )
    await _raises(NotFoundError, parent.share_with("child", ["nope"]), "unknown ids")
    case.clock.advance(hours=2)
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "expired")
    await parent.share_with("child", ["p1", "p2"])
    _check(len(await _ids(child, "Falcon", share_from_parent_thread_id="parent")) == 2, "replaced")
    await parent.share_with("child", [])
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "empty revokes")
    await parent.share_with("child", ["p1"])
    _check(await parent.revoke_share("child") == 1, "revoke_share counts")
    _check(await _ids(child, "Falcon", share_from_parent_thread_id="parent") == [], "revoked")
    foreign = case.memory(thread="child", tenant_id=f"{case.tenant}-other")
    await parent.share_with("child", ["p1"])
    _check(
        await _ids(foreign, "Falcon", share_from_parent_thread_id="parent") == [],
        "tenant-bound grant",
    )
    await parent.aclose()


async def export_pages_are_identity_bound(kit: ConformanceKit) -> None:
    """Export pages with a stable cursor, only explicitly consented visible entries, redacted."""
    case = _Case(kit)
    memory = case.memory(secrets=["s3cr3t"])
    entries = [
        {"id": f"e{i:02d}", "text": f"entry {i} s3cr3t", "consent": {"source": "user"}}
        for i in range(7)
    ]
    entries.append({"id": "legacy", "text": "no consent given"})
    entries.append({"id": "invisible", "text": "hidden", "consent": {"visible": False}})
    await memory.remember(entries, wait=True)
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = await memory.export_memory(identity=memory.identity, cursor=cursor, limit=3)
        seen.extend(e["id"] for e in page.entries)
        _check(all("s3cr3t" not in e["text"] for e in page.entries), "redacted")
        _check(page.bytes > 0 or not page.entries, "bytes counted")
        cursor = page.next_cursor
        if cursor is None:
            break
    _check(seen == [f"e{i:02d}" for i in range(7)], f"all consented entries once, in order: {seen}")
    await _raises(
        CapExceededError, memory.export_memory(identity=memory.identity, limit=201), "cap"
    )
    await _raises(
        ValidationError,
        memory.export_memory(identity=memory.identity, cursor="junk"),
        "cursor",
    )
    await _raises(
        CapExceededError,
        memory.export_memory(identity=memory.identity, max_bytes=10),
        "tiny",
    )
    identity = {"tenant_id": case.tenant, "resource_id": "user-ada", "thread_id": "thread-2"}
    await _raises(AccessDeniedError, memory.export_memory(identity=identity), "identity")
    await memory.aclose()


async def rebuild_index_resumes_by_cursor(kit: ConformanceKit) -> None:
    """rebuild_index() re-embeds bounded pages and resumes from the cursor it returns."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [{"id": f"r{i}", "text": f"rebuild item {i}"} for i in range(5)], wait=True
    )
    counting = GatedEmbedder(kit.embedder)
    counting.release()
    rebuilder = case.memory(embedder=counting)
    total, cursor, pages = 0, None, 0
    while True:
        page = await rebuilder.rebuild_index(cursor=cursor, batch_size=2)
        total, cursor, pages = total + page.rebuilt, page.next_cursor, pages + 1
        if cursor is None:
            break
    _check((total, pages) == (5, 3), f"5 entries over 3 pages, got {total} over {pages}")
    _check(sorted(counting.texts) == sorted(f"rebuild item {i}" for i in range(5)), "each once")
    _check(len(await _ids(memory, "rebuild item", top_k=10)) == 5, "still recallable")
    await _raises(CapExceededError, memory.rebuild_index(batch_size=129), "cap")
    await memory.aclose()


SCOPE_CHECKS: dict[str, Callable[[ConformanceKit], Awaitable[None]]] = {
    check.__name__: check
    for check in (
        scopes_are_isolated,
        sharing_is_parent_to_child_only,
        export_pages_are_identity_bound,
        rebuild_index_resumes_by_cursor,
    )
}
"""The checks of this module by name, in :data:`~prism_memory.testing.CONFORMANCE_CHECKS` order."""
