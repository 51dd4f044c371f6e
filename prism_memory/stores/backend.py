"""A backend as a bundle of role objects: :class:`MemoryBackend`.

A backend is one object per role -- its entries (:class:`~prism_memory.stores.base.EntryStore`),
its indexing ledger, its governance, its share grants, its working memory, and optionally its
vector generations and RAG store -- and a :class:`~prism_memory.Memory` calls each of them
directly (``create_memory(backend=...)``; a memory made from a vector store takes the store's
role objects, :func:`backend_of`). A host adapter is written the same way: one small class per
role, bundled (docs/stores.md).

The one-object stores of before (:class:`~prism_memory.stores.base.VectorStore`, and the
built-in :class:`~prism_memory.stores.memory.InMemoryVectorStore` and
:class:`~prism_memory.postgres.PostgresVectorStore`) keep working, for one release, as
compatibility stores: :class:`VectorStoreOfRoles` makes every role method of the one object its
role object's (:func:`~prism_memory.stores._delegation.via`, no forwarding method written), and
:meth:`MemoryBackend.vector_store` makes such a store of a bundle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ._delegation import _Via, forwarded, via
from ._role_entries import EntryStore
from ._role_generations import VectorGenerations
from ._role_governance import GovernanceStore
from ._role_grants import ShareGrants
from ._role_ledger import IndexingLedger
from .base import VectorStore, WorkingStore
from .rag_base import RagStore

__all__ = [
    "GenerationsOfRole",
    "MemoryBackend",
    "VectorStoreOfRoles",
    "backend_of",
    "role_object",
]


@dataclass(frozen=True, slots=True)
class MemoryBackend:
    """The role objects of one backend, which a memory calls directly.

    ``entries``, ``ledger``, ``governance``, ``grants`` and ``working`` are required (an adapter
    that leaves a role out gives an object whose methods raise
    :class:`~prism_memory.errors.ConfigurationError`, and runs the conformance checks of the
    roles it keeps); ``generations`` (a model change without an outage) and ``rag`` are optional.
    One object may serve several roles.
    """

    entries: EntryStore
    """Entries, recall's reads and the vector width."""
    ledger: IndexingLedger
    """Claims, leases, vectors and failures: what the indexing queue uses."""
    governance: GovernanceStore
    """One governance change, all or nothing."""
    grants: ShareGrants
    """The grants of ``Memory.share_with``."""
    working: WorkingStore
    """Working-memory documents."""
    generations: VectorGenerations | None = None
    """Vectors of a second embedding model, or ``None``."""
    rag: RagStore | None = None
    """The RAG store on the same storage, or ``None``."""

    def __post_init__(self) -> None:
        for name, role in (
            ("entries", EntryStore),
            ("ledger", IndexingLedger),
            ("governance", GovernanceStore),
            ("grants", ShareGrants),
            ("working", WorkingStore),
        ):
            if not isinstance(getattr(self, name), role):
                raise ConfigurationError(f"MemoryBackend.{name} must be a {role.__name__}")
        if self.generations is not None and not isinstance(self.generations, VectorGenerations):
            raise ConfigurationError("MemoryBackend.generations must be a VectorGenerations")
        if self.rag is not None and not isinstance(self.rag, RagStore):
            raise ConfigurationError("MemoryBackend.rag must be a RagStore")

    def vector_store(self) -> VectorStore:
        """A compatibility :class:`~prism_memory.stores.base.VectorStore` over these roles (with
        :class:`~prism_memory.stores.base.VectorGenerations` when ``generations`` is set): each
        of its methods is its role object's. For code that still takes one store object."""
        if self.generations is None:
            return _BundleStore(self)
        return _BundleStoreWithGenerations(self)


class VectorStoreOfRoles(VectorStore):
    """A :class:`~prism_memory.stores.base.VectorStore` whose every role method is the method of
    its role object: ``entries``, ``ledger``, ``governance``, ``grants`` (attributes the subclass
    sets). The compatibility shape of the built-in stores; a subclass that overrides a role
    method keeps serving that role itself (:meth:`backend`)."""

    entries: EntryStore
    ledger: IndexingLedger
    governance: GovernanceStore
    grants: ShareGrants

    @property
    def dimension(self) -> int | None:
        """The pinned vector width of the entries (``None``: the first vector fixes it)."""
        return self.entries.dimension

    vector_width = via("entries", EntryStore.vector_width)
    put_entries = via("entries", EntryStore.put_entries)
    known_keys = via("entries", EntryStore.known_keys)
    import_rows = via("entries", EntryStore.import_rows)
    get_entries = via("entries", EntryStore.get_entries)
    known_ids = via("entries", EntryStore.known_ids)
    dependents = via("entries", EntryStore.dependents)
    search = via("entries", EntryStore.search)
    neighbors = via("entries", EntryStore.neighbors)
    list_by_thread = via("entries", EntryStore.list_by_thread)
    count_by_thread = via("entries", EntryStore.count_by_thread)
    count_pending = via("entries", EntryStore.count_pending)
    embedding_models = via("entries", EntryStore.embedding_models)
    embedding_models_of = via("entries", EntryStore.embedding_models_of)
    list_oldest = via("entries", EntryStore.list_oldest)
    merge_metadata = via("entries", EntryStore.merge_metadata)

    claim_pending = via("ledger", IndexingLedger.claim_pending)
    claim_pending_in = via("ledger", IndexingLedger.claim_pending_in)
    complete_indexing = via("ledger", IndexingLedger.complete_indexing)
    fail_indexing = via("ledger", IndexingLedger.fail_indexing)
    release_claims = via("ledger", IndexingLedger.release_claims)
    requeue_failed = via("ledger", IndexingLedger.requeue_failed)
    index_status = via("ledger", IndexingLedger.index_status)
    store_vectors = via("ledger", IndexingLedger.store_vectors)

    apply_governance = via("governance", GovernanceStore.apply_governance)

    put_share_grant = via("grants", ShareGrants.put_share_grant)
    get_share_grant = via("grants", ShareGrants.get_share_grant)
    delete_share_grant = via("grants", ShareGrants.delete_share_grant)

    def _serving(self, attr: str) -> Any:
        """The object that serves the role in ``attr``: the role object, unless this store's
        class overrides one of that role's methods (then the store itself)."""
        cls = type(self)
        for klass in cls.__mro__:
            for name, value in vars(klass).items():
                if isinstance(value, _Via) and value.attr == attr and forwarded(cls, name) != attr:
                    return self
        return getattr(self, attr)

    def backend(self, working: WorkingStore) -> MemoryBackend:
        """The bundle of this store's role objects, with ``working`` (a role this store's class
        overrides a method of is served by the store itself)."""
        generations = (
            self._serving("vector_generations") if hasattr(self, "vector_generations") else None
        )
        return MemoryBackend(
            entries=self._serving("entries"),
            ledger=self._serving("ledger"),
            governance=self._serving("governance"),
            grants=self._serving("grants"),
            working=working,
            generations=generations,
            rag=getattr(self, "rag", None),
        )


class GenerationsOfRole(VectorGenerations):
    """The :class:`~prism_memory.stores.base.VectorGenerations` methods of a compatibility store,
    each its ``vector_generations`` object's."""

    vector_generations: VectorGenerations

    start_generation = via("vector_generations", VectorGenerations.start_generation)
    generations = via("vector_generations", VectorGenerations.generations)
    claim_generation = via("vector_generations", VectorGenerations.claim_generation)
    store_generation_vectors = via("vector_generations", VectorGenerations.store_generation_vectors)
    generation_progress = via("vector_generations", VectorGenerations.generation_progress)
    switch_generation = via("vector_generations", VectorGenerations.switch_generation)
    promote_generation = via("vector_generations", VectorGenerations.promote_generation)
    drop_generation = via("vector_generations", VectorGenerations.drop_generation)


class _BundleStore(VectorStoreOfRoles):
    """:meth:`MemoryBackend.vector_store` of a bundle without vector generations."""

    def __init__(self, backend: MemoryBackend) -> None:
        self.entries = backend.entries
        self.ledger = backend.ledger
        self.governance = backend.governance
        self.grants = backend.grants
        self._working = backend.working
        self.rag = backend.rag

    def __repr__(self) -> str:
        return f"{type(self).__name__}(entries={self.entries!r})"

    @property
    def telemetry_id(self) -> str:
        """``gen_ai.memory.store.id``: the entries object's (its ``telemetry_id`` or class name)."""
        named = getattr(self.entries, "telemetry_id", None)
        return named if isinstance(named, str) else type(self.entries).__name__

    def bundle(self) -> MemoryBackend:
        """The bundle this store was made of."""
        return self.backend(self._working)


class _BundleStoreWithGenerations(_BundleStore, GenerationsOfRole):
    """:meth:`MemoryBackend.vector_store` of a bundle with vector generations."""

    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__(backend)
        assert backend.generations is not None
        self.vector_generations = backend.generations


def backend_of(vector_store: VectorStore, working_store: WorkingStore) -> MemoryBackend:
    """The bundle a memory calls for ``vector_store`` and ``working_store``: a compatibility
    store's role objects (:meth:`VectorStoreOfRoles.backend`), else ``vector_store`` in every
    role (and in ``generations`` when it is a
    :class:`~prism_memory.stores.base.VectorGenerations`)."""
    if isinstance(vector_store, VectorStoreOfRoles):
        return vector_store.backend(working_store)
    return MemoryBackend(
        entries=vector_store,
        ledger=vector_store,
        governance=vector_store,
        grants=vector_store,
        working=working_store,
        generations=vector_store if isinstance(vector_store, VectorGenerations) else None,
        rag=vector_store if isinstance(vector_store, RagStore) else None,
    )


def role_object(store: object, name: str) -> Any:
    """The object whose method ``name`` a memory made on ``store`` calls: the role object of a
    compatibility store (unless its class overrides that role), else ``store``. A test that
    shadows a store method for a memory's calls (to count or hold them) shadows it there."""
    if isinstance(store, VectorStoreOfRoles):
        attr = forwarded(type(store), name)
        if attr is not None:
            return store._serving(attr)
    return store
