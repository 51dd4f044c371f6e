"""The puts of a batch: checked and embedded all at once, then applied thread by thread.

Every value is checked as JSON, scrubbed (the store's ``redactor`` and ``secrets``) and held to
the payload cap before anything is embedded or written. A put of a new key inserts an entry; a put
over an existing item gives it new text (a governance text change, so its consent and place are
kept) or, when the item changes between indexed and not, forgets and re-inserts it; a put of
``None`` forgets the item unless it is under legal hold. A put that finds its item deleted by
another writer after reading it inserts it afresh (it is ordered after that delete).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from langgraph.store.base import PutOp

from ...embedding import Embedder, assert_finite_vector
from ...errors import (
    AccessDeniedError,
    CapExceededError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from ...limits import Limits
from ...memory import Memory
from ...models import MemoryConsent, MemoryIdentity, MemoryRecord, Vector, check_json, check_key
from ...redaction import Scrubber
from ...stores.base import GovernanceChange, MetadataPatch, NewEntry, VectorStore
from ...windows import embed_whole
from ...working import canonical_json
from ._embedding import Paths, texts_of
from ._mapping import (
    CATALOG_THREAD,
    TTL_KEY,
    UNINDEXED,
    VECTORS_KEY,
    Owner,
    check_ttl,
    encode_vectors,
    is_expired,
    is_indexed,
    namespace_of,
    new_entry,
    thread_of,
    ttl_metadata,
)

Key = tuple[tuple[str, ...], str]
"""A put's ``(namespace, key)``."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One put's item, ready to write: its JSON text, its vector (``None``: unindexed) and the
    metadata it is stored with."""

    body: str
    vector: Vector | None
    metadata: dict[str, Any]


_KEPT_BESIDE = (TTL_KEY, VECTORS_KEY)
"""The metadata keys an overwrite sets beside the new text (:meth:`PutWriter._replace_text`)."""
_ATTEMPTS = 8
"""How often one put retries when other writers keep deleting and inserting its key under it."""


class PutWriter:
    """Applies a batch's puts for one store: its owner, embedder, consent, indexed fields, scrubber
    and caps, and the namespaces it has already recorded in its catalog.

    ``memory`` opens the :class:`~prism_memory.Memory` of a namespace (the store's own
    :meth:`~prism_memory.integrations.langgraph.PrismStore.memory`), through which items are
    forgotten.
    """

    def __init__(
        self,
        *,
        owner: Owner,
        embedder: Embedder,
        model: str | None,
        dims: int,
        fields: Paths | None,
        consent: MemoryConsent | None,
        scrubber: Scrubber,
        limits: Limits,
        memory: Callable[[tuple[str, ...]], Awaitable[Memory]],
    ) -> None:
        self._owner = owner
        self._embedder = embedder
        self._model = model
        self._dims = dims
        self._fields = fields
        self._consent = consent
        self._scrubber = scrubber
        self._limits = limits
        self._memory = memory
        self._known: set[str] = set()

    async def apply(self, store: VectorStore, puts: list[PutOp], now: datetime) -> None:
        """Apply ``puts`` (one per key): every put is checked, scrubbed, capped and embedded, and
        no held item is overwritten, before anything is written."""
        puts = [self._scrubbed(op) for op in puts]
        bodies = self._bodies(puts)
        vectors, extras = await self._vectors([op for op in puts if op.value is not None])
        by_thread: dict[str, list[PutOp]] = {}
        for op in puts:
            by_thread.setdefault(thread_of(op.namespace), []).append(op)
        existing: dict[str, dict[str, MemoryRecord]] = {}
        for thread, ops in by_thread.items():
            found = await store.get_entries(self._owner.scope(thread), [op.key for op in ops])
            existing[thread] = {record.id: record for record in found}
            written = {op.key for op in ops if op.value is not None}
            if any(record.legal_hold and record.id in written for record in found):
                raise AccessDeniedError("an item under legal hold cannot be overwritten")
        for thread, ops in by_thread.items():
            prepared = {
                (op.namespace, op.key): _Prepared(
                    bodies[(op.namespace, op.key)],
                    vectors.get((op.namespace, op.key)),
                    self._metadata(op, extras.get((op.namespace, op.key)), now),
                )
                for op in ops
                if op.value is not None
            }
            await self._apply_thread(store, thread, ops, existing[thread], prepared, now)

    def _scrubbed(self, op: PutOp) -> PutOp:
        """``op`` with its value checked as JSON and scrubbed (what is embedded and stored), and
        its ``ttl`` checked."""
        check_key(op.key, "key")
        check_ttl(op.ttl)
        if op.value is None:
            return op
        if not isinstance(op.value, Mapping):
            raise ValidationError("a LangGraph item's value must be a dict")
        check_json(op.value, "value", json_only=True)
        if not self._scrubber.active:
            return op
        value = self._scrubber.value(op.value)
        check_json(value, "value", json_only=True)  # what the redactor returned
        return op._replace(value=value)

    def _bodies(self, puts: list[PutOp]) -> dict[Key, str]:
        """The JSON text of each written value, held to the payload cap every entry keeps (text
        plus metadata, as :func:`~prism_memory.entries.prepare_entry` counts it; the vectors of
        an item's further fields are the store's, not the caller's, and do not count)."""
        bodies: dict[Key, str] = {}
        for op in puts:
            if op.value is None:
                continue
            try:
                body = json.dumps(op.value, ensure_ascii=False, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError):  # e.g. a mapping that is not a dict, a huge integer
                raise ValidationError("value holds a value that is not JSON") from None
            metadata = {} if texts_of(op, self._fields) else UNINDEXED
            payload = len(body.encode()) + len(canonical_json(metadata).encode())
            if payload > self._limits.payload_bytes:
                raise CapExceededError(
                    f"value payload is {payload} bytes, over the cap {self._limits.payload_bytes}"
                )
            bodies[(op.namespace, op.key)] = body
        return bodies

    async def _vectors(
        self, writes: list[PutOp]
    ) -> tuple[dict[Key, Vector], dict[Key, list[Vector]]]:
        """Each of the ``writes`` that has text to embed: the vector of its first text (the
        entry's own) and those of its further texts, one per text, all in one batched
        embedding -- LangGraph's stores keep one vector per text and score an item by its best."""
        texts = {(op.namespace, op.key): texts_of(op, self._fields) for op in writes}
        wanted = [(key, text) for key, found in texts.items() for text in found]
        if not wanted:
            return {}, {}
        matrix = await embed_whole(self._embedder, [text for _, text in wanted], batch_size=32)
        firsts: dict[Key, Vector] = {}
        extras: dict[Key, list[Vector]] = {}
        for (key, _), vector in zip(wanted, matrix, strict=True):
            if key in firsts:
                extras.setdefault(key, []).append(vector)
            else:
                firsts[key] = vector
        return firsts, extras

    def _metadata(self, op: PutOp, extras: list[Vector] | None, now: datetime) -> dict[str, Any]:
        """The metadata ``op``'s item is stored with: unindexed or not, its TTL, the vectors of
        its further texts."""
        metadata: dict[str, Any] = {} if texts_of(op, self._fields) else dict(UNINDEXED)
        ttl = check_ttl(op.ttl)
        if ttl is not None:
            metadata[TTL_KEY] = ttl_metadata(ttl, now)
        if extras:
            metadata[VECTORS_KEY] = encode_vectors(extras)
        return metadata

    async def _apply_thread(
        self,
        store: VectorStore,
        thread: str,
        ops: list[PutOp],
        old: dict[str, MemoryRecord],
        prepared: dict[Key, _Prepared],
        now: datetime,
    ) -> None:
        """Apply one thread's ``ops`` over its ``old`` records: deletes, then overwrites, then
        one insert of the new items. An expired item (its sweep not yet run) is gone: a put of
        its key forgets it and inserts the new item afresh."""
        scope = self._owner.scope(thread)
        gone = [op.key for op in ops if op.value is None and op.key in old]
        keep = [key for key in gone if not old[key].legal_hold]
        if keep:
            await self._forget(namespace_of(thread), keep)
        fresh: list[tuple[NewEntry, Vector | None]] = []
        for op in ops:
            if op.value is None:
                continue
            put = prepared[(op.namespace, op.key)]
            record = old.get(op.key)
            if record is not None and is_expired(record, now):
                await self._forget(op.namespace, [op.key])
                record = None
            if record is not None and is_indexed(record) == (put.vector is not None):
                entry = self._fresh(op.key, put, now)
                await self._overwrite(store, scope, entry, put.vector, now, _ATTEMPTS)
                continue
            if record is not None:  # the item changes between indexed and not: re-insert it
                await self._forget(op.namespace, [op.key])
            entry = new_entry(
                op.key,
                put.body,
                metadata=put.metadata,
                consent=self._consent if record is None else record.consent,
                occurred_at=now if record is None else record.occurred_at,
            )
            fresh.append((entry, put.vector))
        if fresh:
            await self._register(store, thread, now)
            await self._insert(store, scope, namespace_of(thread), fresh, now)

    def _fresh(self, key: str, put: _Prepared, now: datetime) -> NewEntry:
        """A new item as this store inserts it: its consent, written now."""
        return new_entry(
            key, put.body, metadata=put.metadata, consent=self._consent, occurred_at=now
        )

    async def _overwrite(
        self,
        store: VectorStore,
        scope: MemoryIdentity,
        entry: NewEntry,
        vector: Vector | None,
        now: datetime,
        attempts: int,
    ) -> None:
        """Give the existing item ``entry.id`` this put's text; one another writer deleted since
        it was read is inserted afresh as ``entry`` (the put is then ordered after the delete)."""
        if attempts <= 0:
            raise ConflictError("other writers kept replacing this item; the put changed nothing")
        try:
            await self._replace_text(store, scope, entry, vector, now)
        except NotFoundError:
            await self._register(store, scope.thread_id, now)
            await self._insert(
                store, scope, namespace_of(scope.thread_id), [(entry, vector)], now, attempts - 1
            )

    async def _replace_text(
        self,
        store: VectorStore,
        scope: MemoryIdentity,
        entry: NewEntry,
        vector: Vector | None,
        now: datetime,
    ) -> None:
        """Give an existing item ``entry``'s text and its vector (revision + 1; ``None``:
        unindexed, a zero vector of no model), through the store's one governance write (a text
        change, as ``correct`` makes it); then, when its TTL or further vectors change, set those
        on the version that write made (:meth:`~prism_memory.VectorStore.merge_metadata`)."""
        stored = self._zero() if vector is None else vector
        change = GovernanceChange(
            text=(entry.id, entry.text, stored), text_model=None if vector is None else self._model
        )
        record = (await store.apply_governance(scope, change, now=now)).record
        assert record is not None  # a text change returns the changed record
        wanted = {key: entry.metadata.get(key) for key in _KEPT_BESIDE}
        if wanted != {key: record.metadata.get(key) for key in _KEPT_BESIDE}:
            patch = MetadataPatch(record.revision, record.written_at, wanted)
            await store.merge_metadata(scope, {entry.id: patch})

    def _zero(self) -> Vector:
        return np.zeros(self._dims, dtype=np.float32)

    async def _forget(self, namespace: tuple[str, ...], ids: list[str]) -> None:
        async with await self._memory(namespace) as memory:
            await memory.forget(ids=ids)

    async def _insert(
        self,
        store: VectorStore,
        scope: MemoryIdentity,
        namespace: tuple[str, ...],
        fresh: list[tuple[NewEntry, Vector | None]],
        now: datetime,
        attempts: int = _ATTEMPTS,
    ) -> None:
        """Insert the ``fresh`` items, the indexed and the unindexed ones in one write each. An
        item another writer inserted first (not among the rows the write inserted) is given this
        put's text instead, as an overwrite would; one it stored indexed the other way is forgotten
        and inserted again, as an overwrite that changes between indexed and not is."""
        for indexed in (True, False):
            group = [(entry, v) for entry, v in fresh if (v is not None) == indexed]
            if not group:
                continue
            other_way = await self._put(store, scope, group, now, attempts, indexed=indexed)
            if other_way:
                await self._forget(namespace, [entry.id for entry, _ in other_way])
                # inserted first again meanwhile: given this put's text, whatever its indexing
                again = await self._put(store, scope, other_way, now, attempts, indexed=indexed)
                for entry, vector in again:
                    await self._overwrite(store, scope, entry, vector, now, attempts - 1)

    async def _put(
        self,
        store: VectorStore,
        scope: MemoryIdentity,
        group: list[tuple[NewEntry, Vector | None]],
        now: datetime,
        attempts: int,
        *,
        indexed: bool,
    ) -> list[tuple[NewEntry, Vector | None]]:
        """One write of ``group`` (all ``indexed``, or all not); an item another writer inserted
        first, indexed the same way, is given this put's text. Returns the items it inserted
        indexed the other way (or deleted since), untouched."""
        stored = await store.put_entries(
            scope,
            [entry for entry, _ in group],
            now=now,
            vectors=[self._zero() if v is None else v for _, v in group],
            model=self._model if indexed else None,
        )
        by_id = {record.id: record for record in stored}
        other_way: list[tuple[NewEntry, Vector | None]] = []
        for entry, vector in group:
            if entry.id in stored.inserted:
                continue
            found = by_id.get(entry.id)  # None: another writer deleted it again meanwhile
            if found is None or is_indexed(found) != indexed:
                other_way.append((entry, vector))
            else:
                await self._overwrite(store, scope, entry, vector, now, attempts - 1)
        return other_way

    async def _register(self, store: VectorStore, thread: str, now: datetime) -> None:
        """Record ``thread`` in the namespace catalog (once; the catalog only grows)."""
        if thread in self._known:
            return
        entry = new_entry(thread, thread, metadata={}, consent=None, occurred_at=now)
        zero = assert_finite_vector(self._zero())
        await store.put_entries(self._owner.scope(CATALOG_THREAD), [entry], now=now, vectors=[zero])
        self._known.add(thread)
