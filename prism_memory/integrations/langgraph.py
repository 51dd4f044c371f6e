"""A LangGraph store over prism_memory: :class:`PrismStore` (extra ``langgraph``).

``PrismStore`` is a ``langgraph.store.base.BaseStore``: pass it as ``store=`` to
``create_react_agent`` or ``builder.compile(store=...)``. ``PrismStore()`` keeps items in memory,
``PrismStore(index=...)`` takes LangGraph's ``IndexConfig`` exactly as ``InMemoryStore(index=...)``
does, and ``PrismStore.from_conn_string(url)`` is an async context manager on PostgreSQL (call
``await store.setup()`` once), as ``AsyncPostgresStore.from_conn_string`` is.

How LangGraph's model maps onto prism_memory's
----------------------------------------------
* The store is bound to **one tenant** (``tenant_id``) and one **resource** (``resource_id``): it
  never reads or writes another tenant's rows, whatever namespace a caller names.
* A **namespace** is one prism **thread**: ``("users", "u1", "memories")`` is the thread
  ``"users.u1.memories"`` (labels cannot hold ``.``, so the mapping is one-to-one). Isolation
  between namespaces is prism's per-thread isolation; a search over a namespace *prefix* reads the
  threads under it one by one, because that is what LangGraph asks for. Each namespace's search is
  exact (every item of the thread is scored; nothing is cut before the filter).
* An **item** is one semantic-memory entry of that thread: its ``id`` is the item's key, its text
  is the value as JSON (so export and recall show it), its vector is the embedding of the fields
  ``IndexConfig.fields`` (or ``index=[...]`` on the put) picks out, joined by newlines; the entry's
  ``created_at`` and ``written_at`` are the item's ``created_at`` and ``updated_at``.
* **Governance** uses prism_memory's own calls on :meth:`PrismStore.memory`, a
  :class:`~prism_memory.Memory` of the namespace's thread: ``set_consent(key, visible=False)``
  revokes an item, ``forget(ids=[key], hold=True)`` holds it, ``export_memory``, ``apply_retention``
  and ``forget`` work as on any thread. A revoked or held item is invisible to ``get`` and
  ``search``; overwriting it keeps its consent (writes never loosen governance) and overwriting a
  held item raises :class:`~prism_memory.AccessDeniedError`; ``delete`` is a real delete, except
  that an item under legal hold stays (only ``Memory.forget(ids=[key])`` lifts a hold).

What is not supported: TTL (``supports_ttl`` is ``False``), and several vectors per item -- an item
whose fields yield several texts gets one vector for all of them, where LangGraph's stores keep
one per text and score the best.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast

import numpy as np

from ..errors import AccessDeniedError, ConfigurationError, ValidationError

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigurationError(
        "prism_memory.integrations.langgraph needs LangGraph: pip install 'prism-memory[langgraph]'"
    ) from exc

from ..embedding import Embedder, assert_finite_vector, embed_batched, embedder_model
from ..memory import Memory, create_memory
from ..models import (
    MemoryConsent,
    MemoryIdentity,
    MemoryRecord,
    Vector,
    check_json,
    check_key,
    parse,
)
from ..ranking import cosine
from ..stores.base import GovernanceChange, NewEntry, RecallFilter, SearchRequest, VectorStore
from ..stores.memory import InMemoryVectorStore
from ..stores.rules import is_recallable
from .langchain import LangChainEmbedder, run_sync

__all__ = ["PrismStore"]

_CATALOG_THREAD = "."
"""The thread listing the namespaces the store has written to; no namespace encodes to it
(labels are non-empty and hold no ``.``)."""
_UNINDEXED: Mapping[str, Any] = {"langgraph": {"indexed": False}}
"""Metadata of an item stored without a vector (``index=False``, no index, or no text to embed)."""
_ROLE = "langgraph"
_PAGE = 256
_EVERYTHING = 2**31 - 1


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _thread(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _namespace(thread: str) -> tuple[str, ...]:
    return tuple(thread.split("."))


def _indexed(record: MemoryRecord) -> bool:
    return record.metadata.get("langgraph", {}).get("indexed", True) is not False


def _entry(
    entry_id: str,
    text: str,
    *,
    metadata: Mapping[str, Any],
    consent: MemoryConsent | None,
    occurred_at: datetime,
) -> NewEntry:
    """A new entry as the store writes it: its own role, full importance, no lineage, and a
    sequence the store assigns (so an item keeps its place among the namespace's items)."""
    return NewEntry(
        id=entry_id,
        text=text,
        role=_ROLE,
        metadata=metadata,
        consent=consent,
        sequence=None,
        occurred_at=occurred_at,
        importance=1.0,
        lineage=None,
    )


class _ZeroEmbedder:
    """The embedder of a store without an index: every text gets a zero vector (never scored)."""

    model = None

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions

    async def embed(self, texts: Sequence[str]) -> Vector:
        return np.zeros((len(texts), self.dimensions), dtype=np.float32)


QueryEmbed = Callable[[str], Awaitable[Vector]]


def _embedding(embed: object, dims: int) -> tuple[Embedder, QueryEmbed]:
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
            matrix = await embed_batched(embedder, [text], batch_size=1)
            return assert_finite_vector(matrix[0], "query embedding")

        return embedder, embed_query
    bridge = LangChainEmbedder(
        ensure_embeddings(embed),  # type: ignore[arg-type]
        dimensions=dims,
    )
    return bridge, bridge.embed_query


def _check_namespace(namespace: tuple[str, ...]) -> None:
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter rule (as ``InMemoryStore`` and ``PostgresStore`` apply it): nested dicts
    compare key by key, lists element by element, ``{"$op": x}`` applies ``$eq $ne $gt $gte $lt
    $lte`` (the ordered ones numerically; a value that is not a number does not match)."""
    if isinstance(wanted, Mapping):
        if any(str(key).startswith("$") for key in wanted):
            return all(_compare(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, Mapping) and all(
            _matches(value.get(key), item) for key, item in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_matches(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _compare(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValidationError(f"unsupported filter operator {op!r}")
    try:
        left, right = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    if op == "$gt":
        return left > right
    if op == "$gte":
        return left >= right
    if op == "$lt":
        return left < right
    return left <= right


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(want == "*" or label == want for label, want in pairs)


class PrismStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are governed prism_memory entries.

    ``index`` is LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``); without it the
    store keeps and filters items but ``search(query=...)`` does not rank. ``vector_store`` is any
    prism :class:`~prism_memory.VectorStore` (default: a fresh
    :class:`~prism_memory.InMemoryVectorStore`; for PostgreSQL use :meth:`from_conn_string`, or
    hand it ``create_postgres_vector_store(...)``). ``consent`` is the consent new items carry
    (default: none explicit, as ``remember()`` without one; ``export_memory`` exports only
    explicitly consented entries). The module docstring says how namespaces, items and governance
    map.
    """

    supports_ttl = False

    def __init__(
        self,
        *,
        index: IndexConfig | None = None,
        tenant_id: str = "default",
        resource_id: str = "langgraph",
        vector_store: VectorStore | None = None,
        consent: MemoryConsent | Mapping[str, Any] | None = None,
    ) -> None:
        self._tenant = check_key(tenant_id, "tenant_id")
        self._consent = None if consent is None else parse(MemoryConsent, consent, "consent")
        self._resource = check_key(resource_id, "resource_id")
        self.index_config = None if index is None else cast("IndexConfig", dict(index))
        self._texts: list[tuple[str, str | list[str]]] = []
        if index is not None:
            dims = index.get("dims")
            if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
                raise ConfigurationError("index needs 'dims', a positive integer")
            if index.get("embed") is None:
                raise ConfigurationError("index needs 'embed'")
            self._dims = dims
            self._embedder, query = _embedding(index["embed"], dims)
            self._embed_query: QueryEmbed | None = query
            self._texts = self._paths(index.get("fields") or ["$"])
        else:
            self._dims = 1
            self._embedder = _ZeroEmbedder(1)
            self._embed_query = None
        self._model = embedder_model(self._embedder)
        self._vectors: VectorStore | None = (
            InMemoryVectorStore() if vector_store is None else vector_store
        )
        self._open: Callable[[bool], Awaitable[VectorStore]] | None = None
        self._opening: asyncio.Lock | None = None
        self._known: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writing: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    @staticmethod
    def _paths(fields: Sequence[str]) -> list[tuple[str, str | list[str]]]:
        return [(field, field if field == "$" else tokenize_path(field)) for field in fields]

    # ---- PostgreSQL ------------------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        index: IndexConfig | None = None,
        tenant_id: str = "default",
        resource_id: str = "langgraph",
        schema: str = "prism_memory",
        table: str = "semantic_memory",
        consent: MemoryConsent | Mapping[str, Any] | None = None,
    ) -> AsyncIterator[PrismStore]:
        """A store on the PostgreSQL at ``conn_string`` (``postgresql://`` or
        ``postgresql+asyncpg://``), closed when the block exits; ``await store.setup()`` runs
        prism_memory's migrations once (a store used before them raises
        :class:`~prism_memory.ConfigurationError`). ``index["dims"]`` pins the vector width."""
        from ..postgres import create_postgres_vector_store

        dims = None if index is None else index.get("dims")
        opened: list[VectorStore] = []

        async def open_store(migrate: bool) -> VectorStore:
            if not opened:
                opened.append(
                    await create_postgres_vector_store(
                        conn_string,
                        schema=schema,
                        table=table,
                        dimension=dims,
                        skip_migrations=not migrate,
                    )
                )
            return opened[0]

        store = cls(index=index, tenant_id=tenant_id, resource_id=resource_id, consent=consent)
        store._vectors = None
        store._open = open_store
        store._loop = asyncio.get_running_loop()
        try:
            yield store
        finally:
            for vector_store in opened:
                await vector_store.close()

    async def setup(self) -> None:
        """Create or upgrade the PostgreSQL schema (the shipped Alembic revisions); a no-op for a
        store that was handed its ``vector_store``."""
        if self._open is not None:
            self._vectors = await self._open(True)

    async def _store(self) -> VectorStore:
        if self._vectors is not None:
            return self._vectors
        assert self._open is not None
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._vectors is None:
                self._vectors = await self._open(False)
        return self._vectors

    # ---- governance ------------------------------------------------------------------------

    def scope(self, namespace: tuple[str, ...]) -> MemoryIdentity:
        """The prism scope (tenant, resource, thread) that holds ``namespace``'s items."""
        _check_namespace(namespace)
        validate_op_namespace(GetOp(namespace, "-"))
        return MemoryIdentity(
            tenant_id=self._tenant, resource_id=self._resource, thread_id=_thread(namespace)
        )

    async def memory(self, namespace: tuple[str, ...], **options: Any) -> Memory:
        """A :class:`~prism_memory.Memory` of ``namespace``'s thread, for prism_memory's governance
        calls on its items (their ids are the items' keys): ``set_consent``, ``forget``
        (``hold=True`` for a legal hold), ``export_memory``, ``apply_retention``, ``recall``.
        ``options`` go to :func:`~prism_memory.create_memory`. Use it as ``async with``."""
        scope = self.scope(namespace)
        return create_memory(
            tenant_id=scope.tenant_id,
            resource_id=scope.resource_id,
            thread_id=scope.thread_id,
            embedder=self._embedder,
            vector_store=await self._store(),
            **options,
        )

    # ---- BaseStore -------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` synchronously: on the store's event loop when it has one (PostgreSQL,
        called from another thread, as LangGraph's async stores do), else on a fresh loop."""
        ops = list(ops)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._loop is not None and self._loop.is_running():
            if running is self._loop:
                raise asyncio.InvalidStateError(
                    "Synchronous calls to PrismStore detected in the main event loop; use the "
                    "async methods (aget, aput, asearch, ...) or call from another thread."
                )
            return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()
        return run_sync(self.abatch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: reads (get, search, list_namespaces) see the store as it was before the
        batch's writes; writes are deduplicated (the last put of a key wins) and applied after.
        Every write of the batch is checked (and embedded) before any is applied. Batches that
        write run one at a time, in the order they were called (within this process), so
        concurrent ``aput``/``adelete`` calls of one key end as the last call says."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
            if isinstance(op, GetOp | PutOp):
                _check_namespace(op.namespace)
        if not any(isinstance(op, PutOp) for op in ops):
            return await self._run(ops)
        lock = self._writing.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            return await self._run(ops)

    async def _run(self, ops: list[Op]) -> list[Result]:
        store = await self._store()
        if self._loop is None and not isinstance(store, InMemoryVectorStore):
            self._loop = asyncio.get_running_loop()  # a host's store may be bound to this loop
        now = _utcnow()
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        queries = {op.query for op in ops if isinstance(op, SearchOp) and op.query}
        query_vectors: dict[str, Vector] = {}
        if self._embed_query is not None:
            for query in queries:
                query_vectors[query] = await self._embed_query(query)
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(store, op, now))
            elif isinstance(op, SearchOp):
                vector = query_vectors.get(op.query) if op.query else None
                results.append(await self._search(store, op, vector, now))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(store, op))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise ValidationError(f"unknown operation {type(op).__name__}")
        if puts:
            await self._apply_puts(store, list(puts.values()), now)
        return results

    # ---- reads -----------------------------------------------------------------------------

    def _scope(self, thread: str) -> MemoryIdentity:
        return MemoryIdentity(tenant_id=self._tenant, resource_id=self._resource, thread_id=thread)

    @staticmethod
    def _visible(record: MemoryRecord, now: datetime) -> bool:
        return is_recallable(record, RecallFilter(now=now))

    @staticmethod
    def _item(record: MemoryRecord, namespace: tuple[str, ...]) -> Item:
        return Item(
            value=json.loads(record.text),
            key=record.id,
            namespace=namespace,
            created_at=record.created_at,
            updated_at=record.written_at,
        )

    async def _get(self, store: VectorStore, op: GetOp, now: datetime) -> Item | None:
        key = check_key(op.key, "key")
        found = await store.get_entries(self._scope(_thread(op.namespace)), [key])
        if not found or not self._visible(found[0], now):
            return None
        return self._item(found[0], op.namespace)

    async def _threads(self, store: VectorStore) -> list[str]:
        """The threads of every namespace written to, in the order they were first written."""
        threads: list[str] = []
        after: tuple[int, str] | None = None
        catalog = self._scope(_CATALOG_THREAD)
        while True:
            page = await store.list_by_thread(catalog, after=after, limit=_PAGE)
            threads.extend(record.id for record in page)
            if len(page) < _PAGE:
                return threads
            after = (page[-1].sequence, page[-1].id)

    async def _records(self, store: VectorStore, thread: str) -> list[MemoryRecord]:
        records: list[MemoryRecord] = []
        after: tuple[int, str] | None = None
        scope = self._scope(thread)
        while True:
            page = await store.list_by_thread(scope, after=after, limit=_PAGE)
            records.extend(page)
            if len(page) < _PAGE:
                return records
            after = (page[-1].sequence, page[-1].id)

    async def _search(
        self, store: VectorStore, op: SearchOp, query: Vector | None, now: datetime
    ) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        scored: list[tuple[float, int, SearchItem]] = []
        unscored: list[SearchItem] = []
        order = 0
        for thread in await self._threads(store):
            namespace = _namespace(thread)
            if namespace[: len(prefix)] != prefix:
                continue
            items = [
                (record, self._item(record, namespace))
                for record in await self._records(store, thread)
                if self._visible(record, now)
            ]
            if op.filter:
                items = [
                    (record, item)
                    for record, item in items
                    if all(_matches(item.value.get(k), v) for k, v in op.filter.items())
                ]
            if not items:
                continue
            similarity: dict[str, float] = {}
            if query is not None:
                found = await store.search(
                    self._scope(thread),
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
                if query is None or not _indexed(record):
                    unscored.append(self._search_item(item, None))
                elif score is not None:  # else the store excluded it (e.g. a tombstone)
                    scored.append((score, order, self._search_item(item, score)))
        if query is None:
            return unscored[op.offset : op.offset + op.limit]
        scored.sort(key=lambda entry: (-entry[0], entry[1]))
        kept = [item for _, _, item in scored[op.offset : op.offset + op.limit]]
        if unscored and len(kept) < op.limit:  # LangGraph's stores fill up with unscored items
            kept.extend(unscored[: op.limit - len(kept)])
        return kept

    @staticmethod
    def _search_item(item: Item, score: float | None) -> SearchItem:
        return SearchItem(
            namespace=item.namespace,
            key=item.key,
            value=item.value,
            created_at=item.created_at,
            updated_at=item.updated_at,
            score=score,
        )

    async def _list_namespaces(
        self, store: VectorStore, op: ListNamespacesOp
    ) -> list[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for thread in await self._threads(store):
            namespace = _namespace(thread)
            if not all(_namespace_matches(c, namespace) for c in op.match_conditions or ()):
                continue
            if await store.count_by_thread(self._scope(thread)) == 0:
                continue
            found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        return sorted(found)[op.offset : op.offset + op.limit]

    # ---- writes ----------------------------------------------------------------------------

    def _texts_of(self, op: PutOp) -> list[str]:
        """The texts to embed for ``op`` (empty: store it without a vector)."""
        if self.index_config is None or op.index is False or op.value is None:
            return []
        paths = self._texts if op.index is None else self._paths(list(op.index))
        texts: list[str] = []
        for _, path in paths:
            texts.extend(get_text_at_path(op.value, path))
        return texts

    async def _apply_puts(self, store: VectorStore, puts: list[PutOp], now: datetime) -> None:
        writes = [op for op in puts if op.value is not None]
        bodies: dict[tuple[tuple[str, ...], str], str] = {}
        for op in puts:
            check_key(op.key, "key")
        for op in writes:
            if not isinstance(op.value, Mapping):
                raise ValidationError("a LangGraph item's value must be a dict")
            check_json(op.value, "value")
            bodies[(op.namespace, op.key)] = json.dumps(
                op.value, ensure_ascii=False, sort_keys=True
            )
        texts = {(op.namespace, op.key): self._texts_of(op) for op in writes}
        wanted = [key for key, found in texts.items() if found]
        vectors: dict[tuple[tuple[str, ...], str], Vector] = {}
        if wanted:
            matrix = await embed_batched(
                self._embedder, ["\n".join(texts[key]) for key in wanted], batch_size=32
            )
            vectors = dict(zip(wanted, matrix, strict=True))
        zero = np.zeros(self._dims, dtype=np.float32)
        by_thread: dict[str, list[PutOp]] = {}
        for op in puts:
            by_thread.setdefault(_thread(op.namespace), []).append(op)
        existing: dict[str, dict[str, MemoryRecord]] = {}
        for thread, ops in by_thread.items():
            found = await store.get_entries(self._scope(thread), [op.key for op in ops])
            existing[thread] = {record.id: record for record in found}
            written = {op.key for op in ops if op.value is not None}
            if any(record.legal_hold and record.id in written for record in found):
                raise AccessDeniedError("an item under legal hold cannot be overwritten")
        for thread, ops in by_thread.items():
            scope, old = self._scope(thread), existing[thread]
            gone = [op.key for op in ops if op.value is None and op.key in old]
            keep = [key for key in gone if not old[key].legal_hold]
            if keep:
                async with await self.memory(_namespace(thread)) as memory:
                    await memory.forget(ids=keep)
            fresh: list[tuple[NewEntry, Vector | None]] = []
            for op in ops:
                if op.value is None:
                    continue
                key = (op.namespace, op.key)
                vector = vectors.get(key)
                record = old.get(op.key)
                if record is not None and _indexed(record) == (vector is not None):
                    await _replace_text(
                        store,
                        scope,
                        op.key,
                        bodies[key],
                        zero if vector is None else vector,
                        now=now,
                        model=None if vector is None else self._model,
                    )
                    continue
                if record is not None:  # the item changes between indexed and not: re-insert it
                    async with await self.memory(op.namespace) as memory:
                        await memory.forget(ids=[op.key])
                entry = _entry(
                    op.key,
                    bodies[key],
                    metadata={} if vector is not None else dict(_UNINDEXED),
                    consent=self._consent if record is None else record.consent,
                    occurred_at=now if record is None else record.occurred_at,
                )
                fresh.append((entry, vector))
            if fresh:
                await self._register(store, thread, now)
                await self._insert(store, scope, fresh, zero, now)

    async def _insert(
        self,
        store: VectorStore,
        scope: MemoryIdentity,
        fresh: list[tuple[NewEntry, Vector | None]],
        zero: Vector,
        now: datetime,
    ) -> None:
        for indexed in (True, False):
            group = [(entry, v) for entry, v in fresh if (v is not None) == indexed]
            if not group:
                continue
            entries = [entry for entry, _ in group]
            stored = await store.put_entries(
                scope,
                entries,
                now=now,
                vectors=[zero if v is None else v for _, v in group],
                model=self._model if indexed else None,
            )
            for (entry, vector), record in zip(group, stored, strict=True):
                if record.text != entry.text:  # another writer inserted the key first
                    await _replace_text(
                        store,
                        scope,
                        entry.id,
                        entry.text,
                        zero if vector is None else vector,
                        now=now,
                        model=self._model if indexed else None,
                    )

    async def _register(self, store: VectorStore, thread: str, now: datetime) -> None:
        """Record ``thread`` in the namespace catalog (once; the catalog only grows)."""
        if thread in self._known:
            return
        entry = _entry(thread, thread, metadata={}, consent=None, occurred_at=now)
        zero = assert_finite_vector(np.zeros(self._dims, dtype=np.float32))
        await store.put_entries(self._scope(_CATALOG_THREAD), [entry], now=now, vectors=[zero])
        self._known.add(thread)


async def _replace_text(
    store: VectorStore,
    scope: MemoryIdentity,
    entry_id: str,
    text: str,
    vector: Vector,
    *,
    now: datetime,
    model: str | None,
) -> None:
    """Give an existing item new text and its vector (revision + 1), through the store's one
    governance write (a text change, as ``correct`` makes it)."""
    change = GovernanceChange(text=(entry_id, text, vector), text_model=model)
    await store.apply_governance(scope, change, now=now)
