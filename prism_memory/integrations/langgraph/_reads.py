"""The read ops of a batch -- ``GetOp``, ``SearchOp``, ``ListNamespacesOp`` -- on a store's threads.

Each reads the vector store as it is when the op runs (a batch applies its puts after its reads).
"""

from __future__ import annotations

from datetime import datetime

from langgraph.store.base import GetOp, Item, ListNamespacesOp, SearchItem, SearchOp

from ...models import MemoryIdentity, MemoryRecord, Vector, check_key
from ...ranking import cosine
from ...stores.base import RecallFilter, SearchRequest, VectorStore, every_record
from ._filters import matches, namespace_matches
from ._mapping import (
    CATALOG_THREAD,
    Owner,
    is_indexed,
    is_visible,
    item_of,
    namespace_of,
    search_item,
    thread_of,
)

_EVERYTHING = 2**31 - 1


async def get(store: VectorStore, owner: Owner, op: GetOp, now: datetime) -> Item | None:
    """The item ``op`` names, or ``None`` when there is none or it is not visible."""
    key = check_key(op.key, "key")
    found = await store.get_entries(owner.scope(thread_of(op.namespace)), [key])
    if not found or not is_visible(found[0], now):
        return None
    return item_of(found[0], op.namespace)


async def _records(store: VectorStore, scope: MemoryIdentity) -> list[MemoryRecord]:
    """Every record of ``scope``'s thread, in the thread's order (:func:`every_record`)."""
    return [record async for record in every_record(store, scope)]


async def _threads(store: VectorStore, owner: Owner) -> list[str]:
    """The threads of every namespace written to, in the order they were first written."""
    return [record.id for record in await _records(store, owner.scope(CATALOG_THREAD))]


async def search(
    store: VectorStore, owner: Owner, op: SearchOp, query: Vector | None, now: datetime
) -> list[SearchItem]:
    """The visible items under ``op``'s namespace prefix that pass its filter: ranked by cosine
    similarity to ``query`` when there is one (unindexed items fill up after the ranked ones),
    else in the order they were written."""
    prefix = tuple(op.namespace_prefix)
    scored: list[tuple[float, int, SearchItem]] = []
    unscored: list[SearchItem] = []
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
                unscored.append(search_item(item, None))
            elif score is not None:  # else the store excluded it (e.g. a tombstone)
                scored.append((score, order, search_item(item, score)))
    if query is None:
        return unscored[op.offset : op.offset + op.limit]
    scored.sort(key=lambda entry: (-entry[0], entry[1]))
    kept = [item for _, _, item in scored[op.offset : op.offset + op.limit]]
    if unscored and len(kept) < op.limit:  # LangGraph's stores fill up with unscored items
        kept.extend(unscored[: op.limit - len(kept)])
    return kept


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
