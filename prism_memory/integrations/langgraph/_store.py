"""The LangGraph store, :class:`PrismStore`: construction, the PostgreSQL lifecycle, the governance
entry points, and the batch that runs LangGraph's ops (reads in ``_reads``, puts in ``_writes``)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, cast

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from ..._defaults import DEFAULT_SCHEMA, DEFAULT_TABLE
from ...embedding import embedder_model
from ...errors import ConfigurationError, ValidationError
from ...limits import Limits
from ...memory import Memory, create_memory
from ...models import MemoryConsent, MemoryIdentity, Vector, check_key, parse
from ...redaction import Redactor, Scrubber
from ...stores.base import VectorStore
from ...stores.memory import InMemoryVectorStore
from ..langchain import run_sync
from . import _reads
from ._embedding import Paths, QueryEmbed, ZeroEmbedder, embedding, paths
from ._mapping import Owner, check_namespace, thread_of, utcnow
from ._ttl import Sweeper, check_ttl_config, sweep
from ._writes import PutWriter


class PrismStore(BaseStore):
    """A LangGraph ``BaseStore`` whose items are governed prism_memory entries.

    ``index`` is LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``); without it the
    store keeps and filters items but ``search(query=...)`` does not rank. ``vector_store`` is any
    prism :class:`~prism_memory.VectorStore` (default: a fresh
    :class:`~prism_memory.InMemoryVectorStore`; for PostgreSQL use :meth:`from_conn_string`, or
    hand it ``create_postgres_vector_store(...)``). ``consent`` is the consent new items carry
    (default: none explicit, as ``remember()`` without one; ``export_memory`` exports only
    explicitly consented entries). ``redactor`` and ``secrets`` scrub every value before it is
    embedded or stored, and ``limits`` caps it (``Limits.payload_bytes``: the value's JSON text),
    as :func:`~prism_memory.create_memory` takes them (defaults: no scrubbing, 64 KiB); the
    :meth:`memory` handle gets the same three unless given its own. ``ttl`` is LangGraph's
    ``TTLConfig`` (``default_ttl`` minutes for puts that name none, ``refresh_on_read``,
    ``sweep_interval_minutes`` for :meth:`start_ttl_sweeper`): an item put with a TTL is never
    returned once it has run out, swept or not. The docstring of
    :mod:`prism_memory.integrations.langgraph` says how namespaces, items and governance map.
    """

    supports_ttl = True

    def __init__(
        self,
        *,
        index: IndexConfig | None = None,
        tenant_id: str = "default",
        resource_id: str = "langgraph",
        vector_store: VectorStore | None = None,
        consent: MemoryConsent | Mapping[str, Any] | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        redactor: Redactor | None = None,
        secrets: Iterable[str] | None = None,
        ttl: TTLConfig | Mapping[str, Any] | None = None,
    ) -> None:
        tenant = check_key(tenant_id, "tenant_id")
        self.ttl_config = check_ttl_config(ttl)
        parsed = None if consent is None else parse(MemoryConsent, consent, "consent")
        self._limits = parse(Limits, limits if limits is not None else {}, "limits")
        self._secrets = None if secrets is None else list(secrets)
        self._redactor = redactor
        scrubber = Scrubber(redactor, self._secrets)
        self._owner = Owner(tenant, check_key(resource_id, "resource_id"))
        self.index_config = None if index is None else cast("IndexConfig", dict(index))
        fields: Paths | None = None
        if index is not None:
            dims = index.get("dims")
            if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
                raise ConfigurationError("index needs 'dims', a positive integer")
            if index.get("embed") is None:
                raise ConfigurationError("index needs 'embed'")
            self._embedder, query = embedding(index["embed"], dims)
            self._embed_query: QueryEmbed | None = query
            fields = paths(index.get("fields") or ["$"])
        else:
            dims = 1
            self._embedder = ZeroEmbedder(1)
            self._embed_query = None
        self._puts = PutWriter(
            owner=self._owner,
            embedder=self._embedder,
            model=embedder_model(self._embedder),
            dims=dims,
            fields=fields,
            consent=parsed,
            scrubber=scrubber,
            limits=self._limits,
            memory=self.memory,
        )
        self._vectors: VectorStore | None = (
            InMemoryVectorStore() if vector_store is None else vector_store
        )
        self._open: Callable[[bool], Awaitable[VectorStore]] | None = None
        self._opening: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writing: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._sweeper = Sweeper(self.sweep_ttl)

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
        schema: str = DEFAULT_SCHEMA,
        table: str = DEFAULT_TABLE,
        consent: MemoryConsent | Mapping[str, Any] | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        redactor: Redactor | None = None,
        secrets: Iterable[str] | None = None,
        ttl: TTLConfig | Mapping[str, Any] | None = None,
    ) -> AsyncIterator[PrismStore]:
        """A store on the PostgreSQL at ``conn_string`` (``postgresql://`` or
        ``postgresql+asyncpg://``), closed when the block exits; ``await store.setup()`` runs
        prism_memory's migrations once (a store used before them raises
        :class:`~prism_memory.ConfigurationError`). ``index["dims"]`` pins the vector width;
        ``consent``, ``limits``, ``redactor``, ``secrets`` and ``ttl`` are as for
        :class:`PrismStore`; a TTL sweeper it started stops when the block exits."""
        from ...postgres import create_postgres_vector_store

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

        store = cls(
            index=index,
            tenant_id=tenant_id,
            resource_id=resource_id,
            consent=consent,
            limits=limits,
            redactor=redactor,
            secrets=secrets,
            ttl=ttl,
        )
        store._vectors = None
        store._open = open_store
        store._loop = asyncio.get_running_loop()
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()
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
        check_namespace(namespace)
        validate_op_namespace(GetOp(namespace, "-"))
        return self._owner.scope(thread_of(namespace))

    async def memory(self, namespace: tuple[str, ...], **options: Any) -> Memory:
        """A :class:`~prism_memory.Memory` of ``namespace``'s thread, for prism_memory's governance
        calls on its items (their ids are the items' keys): ``set_consent``, ``forget``
        (``hold=True`` for a legal hold), ``export_memory``, ``apply_retention``, ``recall``.
        ``options`` go to :func:`~prism_memory.create_memory` (``limits``, ``redactor`` and
        ``secrets`` default to the store's). Use it as ``async with``."""
        scope = self.scope(namespace)
        options.setdefault("limits", self._limits)
        options.setdefault("redactor", self._redactor)
        options.setdefault("secrets", self._secrets)
        return create_memory(
            tenant_id=scope.tenant_id,
            resource_id=scope.resource_id,
            thread_id=scope.thread_id,
            embedder=self._embedder,
            vector_store=await self._store(),
            **options,
        )

    # ---- TTL -------------------------------------------------------------------------------

    async def sweep_ttl(self) -> int:
        """Hard-delete every expired item (not under legal hold) through prism's governed forget
        (its tombstones and lineage walk hold), in every namespace; return how many went. Reads
        never show an expired item whether or not a sweep has run: the sweep reclaims rows."""
        store = await self._store()
        async with self._writing.setdefault(asyncio.get_running_loop(), asyncio.Lock()):
            return await sweep(store, self._owner, self.memory)

    async def start_ttl_sweeper(
        self, sweep_interval_minutes: float | None = None
    ) -> asyncio.Task[None]:
        """Run :meth:`sweep_ttl` every ``sweep_interval_minutes`` (default: the ``ttl`` config's,
        else 5) on the running loop until :meth:`stop_ttl_sweeper`; returns the task (the one
        already running, if any). A failed sweep is logged and retried at the next interval."""
        if sweep_interval_minutes is None and self.ttl_config is not None:
            sweep_interval_minutes = self.ttl_config.get("sweep_interval_minutes")
        return self._sweeper.start(sweep_interval_minutes)

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 - as LangGraph
        """Stop the sweeper task; ``False`` if it did not end within ``timeout`` seconds."""
        return await self._sweeper.stop(timeout)

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
                check_namespace(op.namespace)
        if not any(isinstance(op, PutOp) for op in ops):
            return await self._run(ops)
        lock = self._writing.setdefault(asyncio.get_running_loop(), asyncio.Lock())
        async with lock:
            return await self._run(ops)

    async def _run(self, ops: list[Op]) -> list[Result]:
        store = await self._store()
        if self._loop is None and not isinstance(store, InMemoryVectorStore):
            self._loop = asyncio.get_running_loop()  # a host's store may be bound to this loop
        now = utcnow()
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        queries = {op.query for op in ops if isinstance(op, SearchOp) and op.query}
        query_vectors: dict[str, Vector] = {}
        if self._embed_query is not None:
            for query in queries:
                query_vectors[query] = await self._embed_query(query)
        results: list[Result] = []
        refreshes: _reads.Refreshes = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await _reads.get(store, self._owner, op, now, refreshes))
            elif isinstance(op, SearchOp):
                vector = query_vectors.get(op.query) if op.query else None
                results.append(await _reads.search(store, self._owner, op, vector, now, refreshes))
            elif isinstance(op, ListNamespacesOp):
                results.append(await _reads.list_namespaces(store, self._owner, op))
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise ValidationError(f"unknown operation {type(op).__name__}")
        if refreshes:
            await _reads.refresh(store, self._owner, refreshes)
        if puts:
            await self._puts.apply(store, list(puts.values()), now)
        return results
