"""The read ops of a batch -- ``GetOp``, ``SearchOp``, ``ListNamespacesOp`` -- on a store's threads.

Each reads the vector store as it is when the op runs (a batch applies its puts after its reads).
"""

from __future__ import annotations

from datetime import datetime

from langgraph.store.base import GetOp, Item, ListNamespacesOp, SearchItem, SearchOp

from ...models import MemoryIdentity, MemoryRecord, Vector, check_key
from ...ranking import cosine
from ...stores.base import MetadataPatch, RecallFilter, SearchRequest, VectorStore, every_record
from ._filters import matches, namespace_matches
from ._mapping import (
    CATALOG_THREAD,
    Owner,
    extra_vectors,
    is_indexed,
    is_visible,
    item_of,
    namespace_of,
    refresh_patch,
    search_item,
    thread_of,
)

_EVERYTHING = 2**31 - 1
Refreshes = dict[str, dict[str, MetadataPatch]]
"""The TTL refreshes a batch's reads ask for: thread, then item key, then the write."""


def _refresh(refreshes: Refreshes, thread: str, record: MemoryRecord, now: datetime) -> None:
    patch = refresh_patch(record, now)
    if patch is not None:
        refreshes.setdefault(thread, {})[record.id] = patch


async def refresh(store: VectorStore, owner: Owner, refreshes: Refreshes) -> None:
    """Restart the TTLs of the items a batch read with ``refresh_ttl``: one statement per
    namespace, applied only to the versions read (:meth:`~prism_memory.VectorStore.merge_metadata`)."""
    for thread, patches in refreshes.items():
        await store.merge_metadata(owner.scope(thread), patches)


async def get(
    store: VectorStore, owner: Owner, op: GetOp, now: datetime, refreshes: Refreshes
) -> Item | None:
    """The item ``op`` names, or ``None`` when there is none or it is not visible (consent, hold,
    expired); with ``op.refresh_ttl`` its TTL is restarted (recorded in ``refreshes``)."""
    key = check_key(op.key, "key")
    thread = thread_of(op.namespace)
    found = await store.get_entries(owner.scope(thread), [key])
    if not found or not is_visible(found[0], now):
        return None
    if op.refresh_ttl:
        _refresh(refreshes, thread, found[0], now)
    return item_of(found[0], op.namespace)


async def _records(store: VectorStore, scope: MemoryIdentity) -> list[MemoryRecord]:
    """Every record of ``scope``'s thread, in the thread's order (:func:`every_record`)."""
    return [record async for record in every_record(store, scope)]


async def _threads(store: VectorStore, owner: Owner) -> list[str]:
    """The threads of every namespace written to, in the order they were first written."""
    return [record.id for record in await _records(store, owner.scope(CATALOG_THREAD))]


async def search(
    store: VectorStore,
    owner: Owner,
    op: SearchOp,
    query: Vector | None,
    now: datetime,
    refreshes: Refreshes,
) -> list[SearchItem]:
    """The visible items under ``op``'s namespace prefix that pass its filter: ranked by cosine
    similarity to ``query`` when there is one -- an item by its best field's vector --
    (unindexed items fill up after the ranked ones), else in the order they were written. With
    ``op.refresh_ttl`` the TTLs of the items returned are restarted (recorded in ``refreshes``)."""
    prefix = tuple(op.namespace_prefix)
    scored: list[tuple[float, int, SearchItem, MemoryRecord]] = []
    unscored: list[tuple[SearchItem, MemoryRecord]] = []
    order = 0
    for thread in await _threads(store, owner):
        namespace = namespace_of(thread)
        if namespace[: len(prefix)] != prefix:
            continue
        items = [
            (record, item_of(record, namespace))
            for record in await _records(store, owner.scope(thread))
            if is_visible(record, now)
        ]
        if op.filter:
            items = [
                (record, item)
                for record, item in items
                if all(matches(item.value.get(k), v) for k, v in op.filter.items())
            ]
        if not items:
            continue
        similarity: dict[str, float] = {}
        if query is not None:
            found = await store.search(
                owner.scope(thread),
                SearchRequest(
                    vector=query,
                    terms=frozenset(),
                    limit=_EVERYTHING,
                    filter=RecallFilter(now=now),
                ),
            )
            similarity = {c.id: cosine(query, c.vector) for c in found.candidates}
        for record, item in items:
            order += 1
            score = similarity.get(record.id)
            if query is None or not is_indexed(record):
                unscored.append((search_item(item, None), record))
            elif score is not None:  # else the store excluded it (e.g. a tombstone)
                score = max([score, *(cosine(query, v) for v in extra_vectors(record))])
                scored.append((score, order, search_item(item, score), record))
    if query is None:
        kept = unscored[op.offset : op.offset + op.limit]
    else:
        scored.sort(key=lambda entry: (-entry[0], entry[1]))
        kept = [(item, record) for _, _, item, record in scored[op.offset : op.offset + op.limit]]
        if unscored and len(kept) < op.limit:  # LangGraph's stores fill up with unscored items
            kept.extend(unscored[: op.limit - len(kept)])
    if op.refresh_ttl:
        for item, record in kept:
            _refresh(refreshes, thread_of(item.namespace), record, now)
    return [item for item, _ in kept]


async def list_namespaces(
    store: VectorStore, owner: Owner, op: ListNamespacesOp
) -> list[tuple[str, ...]]:
    """The namespaces holding items that meet ``op``'s match conditions, cut to its depth."""
    found: set[tuple[str, ...]] = set()
    for thread in await _threads(store, owner):
        namespace = namespace_of(thread)
        if not all(namespace_matches(c, namespace) for c in op.match_conditions or ()):
            continue
        if await store.count_by_thread(owner.scope(thread)) == 0:
            continue
        found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
    return sorted(found)[op.offset : op.offset + op.limit]
