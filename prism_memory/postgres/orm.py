"""Typed SQLAlchemy 2 ORM classes over prism_memory's tables.

The host chooses the schema and table names at run time, so the tables are Core :class:`Table`
objects built per ``(schema, table, dimension)`` by :func:`~prism_memory.postgres.tables.build_metadata`.
The ORM classes follow the same rule: this module declares one plain, typed base class per table
(:class:`EntryRow`, :class:`TombstoneRow`, :class:`ShareGrantRow`, :class:`RagSourceAclRow`,
:class:`RagScopeGenerationRow`, :class:`RagChunkRow`, :class:`WorkingMemoryRow`, their columns annotated with
``Mapped[...]``), and :func:`map_models` creates one subclass of each, mapped imperatively (its own
:class:`~sqlalchemy.orm.registry`) onto the *same* ``Table`` objects. The metadata -- and so
``alembic check`` -- is exactly the Core schema; nothing here declares a column of its own.

The mapped classes of a table set are built once, with it, and reached as ``tables.orm``::

    tables = build_metadata("prism_memory", "semantic_memory", 384)
    grant = await session.get(tables.orm.ShareGrant, ("acme", "user-42", "parent", "child"))
    rows = await session.scalars(select(tables.orm.WorkingMemory).where(...))

Two table sets (another schema or table name) get distinct classes on distinct tables, in distinct
registries. mypy sees the typed base class: ``type[ShareGrantRow]``, whose attributes are
``Mapped[...]`` (``InstrumentedAttribute`` on the class, the value on an instance).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from sqlalchemy import MetaData, Table
from sqlalchemy.orm import Mapped, registry

from ..models import Vector

__all__ = [
    "EntryRow",
    "PrismModels",
    "RagChunkRow",
    "RagScopeGenerationRow",
    "RagSourceAclRow",
    "ShareGrantRow",
    "TombstoneRow",
    "WorkingMemoryRow",
    "map_models",
]


class _Row:
    """Common behaviour of the typed row classes: a keyword constructor and a short ``repr``.

    The base classes are not mapped themselves; only the subclasses :func:`map_models` creates are.
    """

    __table__: ClassVar[Table]
    """The Core table the mapped subclass maps (the one in ``tables.metadata``)."""

    def __init__(self, **values: Any) -> None:
        table: Table | None = getattr(type(self), "__table__", None)
        if table is None:
            raise TypeError(
                f"{type(self).__name__} is not mapped; use the classes of build_metadata(...).orm"
            )
        for key, value in values.items():
            if key not in table.c:
                raise TypeError(f"{type(self).__name__} has no column {key!r}")
            setattr(self, key, value)

    def __repr__(self) -> str:
        table: Table | None = getattr(type(self), "__table__", None)
        if table is None:
            return f"<{type(self).__name__} (unmapped)>"
        key = ", ".join(
            f"{column.name}={self.__dict__.get(column.name)!r}" for column in table.primary_key
        )
        return f"<{type(self).__name__} {table.fullname} {key}>"


class EntryRow(_Row):
    """A row of ``<table>``: one semantic-memory entry, its vector and its indexing ledger.

    The columns are declared in :mod:`prism_memory._entry_fields` (the mapping follows the table
    made from it); these annotations only type them for mypy, and a test checks each against the
    declaration.
    """

    tenant_id: Mapped[str]
    resource_id: Mapped[str]
    thread_id: Mapped[str]
    id: Mapped[str]
    text: Mapped[str]
    role: Mapped[str]
    metadata: Mapped[dict[str, Any]]
    consent_explicit: Mapped[bool]
    consent_source: Mapped[str]
    consent_scope: Mapped[str]
    consent_visible: Mapped[bool]
    consent_granted_at: Mapped[datetime | None]
    consent_revoked_at: Mapped[datetime | None]
    sequence: Mapped[int]
    occurred_at: Mapped[datetime]
    created_at: Mapped[datetime]
    written_at: Mapped[datetime]
    importance: Mapped[float]
    legal_hold: Mapped[bool]
    status: Mapped[str]
    revision: Mapped[int]
    attempts: Mapped[int]
    last_error: Mapped[str | None]
    next_attempt_at: Mapped[datetime | None]
    claimed_by: Mapped[str | None]
    claimed_until: Mapped[datetime | None]
    embedding: Mapped[Vector | None]
    embedding_model: Mapped[str | None]
    window_embeddings: Mapped[list[Vector] | None]
    """The vectors of the entry's windows after the first (revision ``prism_memory_0013``;
    ``None``: the entry fits its embedder's window)."""
    text_tsv: Mapped[str | None]
    """The distinct terms of ``text`` (:func:`prism_memory.lexical.tokenize`), written with it."""
    term_count: Mapped[int]
    """How many terms ``text`` has (its BM25 length)."""


class TombstoneRow(_Row):
    """A row of ``<table>_invalidation``: entry ``entry_id`` invalidated by ``cause_id``."""

    tenant_id: Mapped[str]
    resource_id: Mapped[str]
    thread_id: Mapped[str]
    entry_id: Mapped[str]
    cause_id: Mapped[str]
    reason: Mapped[str]
    created_at: Mapped[datetime]


class ShareGrantRow(_Row):
    """A row of ``<table>_share_grant``: the entries a child thread may recall from its parent."""

    tenant_id: Mapped[str]
    resource_id: Mapped[str]
    parent_thread_id: Mapped[str]
    child_thread_id: Mapped[str]
    source_ids: Mapped[list[str]]
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]


class RagSourceAclRow(_Row):
    """A row of ``<table>_rag_source_acl``: a RAG source granted to a principal or a group."""

    tenant_id: Mapped[str]
    scope: Mapped[str]
    """The RAG scope's key within the tenant (``RagScope.key``)."""
    source_id: Mapped[str]
    principal_kind: Mapped[str]
    principal_id: Mapped[str]
    access_version: Mapped[int]
    created_at: Mapped[datetime]


class RagScopeGenerationRow(_Row):
    """A row of ``<table>_rag_scope_generations``: the current generation of one RAG scope."""

    tenant_id: Mapped[str]
    scope: Mapped[str]
    generation: Mapped[int]
    updated_at: Mapped[datetime]


class RagChunkRow(_Row):
    """A row of ``<table>_rag_chunks``: one chunk of a RAG source in one generation."""

    tenant_id: Mapped[str]
    scope: Mapped[str]
    generation: Mapped[int]
    source_id: Mapped[str]
    chunk_index: Mapped[int]
    text: Mapped[str]
    metadata: Mapped[dict[str, Any]]
    digest: Mapped[str]
    embedding: Mapped[Vector]
    embedding_model: Mapped[str | None]
    """The model that made ``embedding`` (revision ``prism_memory_0012``; ``None``: not
    recorded, written before it or without a model)."""
    text_tsv: Mapped[str]
    """The chunk's :func:`prism_memory.lexical.tokenize` terms with their positions."""
    term_count: Mapped[int]
    """How many terms the chunk has (its BM25 length)."""
    created_at: Mapped[datetime]


class WorkingMemoryRow(_Row):
    """A row of ``<table>_working``: a versioned working-memory document (``thread_key = ''``
    when it is not per thread)."""

    tenant_id: Mapped[str]
    resource_id: Mapped[str]
    thread_key: Mapped[str]
    version: Mapped[int]
    data: Mapped[dict[str, Any]]
    updated_at: Mapped[datetime]


@dataclass(frozen=True, slots=True)
class PrismModels:
    """The mapped classes of one ``(schema, table, dimension)`` (``build_metadata(...).orm``)."""

    registry: registry
    Entry: type[EntryRow]
    Tombstone: type[TombstoneRow]
    ShareGrant: type[ShareGrantRow]
    RagSourceAcl: type[RagSourceAclRow]
    RagScopeGeneration: type[RagScopeGenerationRow]
    RagChunk: type[RagChunkRow]
    WorkingMemory: type[WorkingMemoryRow]

    @property
    def classes(self) -> tuple[type[_Row], ...]:
        """Every mapped class, in table order (entries first)."""
        return (
            self.Entry,
            self.Tombstone,
            self.ShareGrant,
            self.RagSourceAcl,
            self.RagScopeGeneration,
            self.RagChunk,
            self.WorkingMemory,
        )


_R = TypeVar("_R", bound=_Row)


def _mapped(mapper_registry: registry, base: type[_R], name: str, table: Table) -> type[_R]:
    cls = type(
        name,
        (base,),
        {
            "__module__": __name__,
            "__qualname__": f"{name}[{table.fullname}]",
            "__doc__": base.__doc__,
            "__table__": table,
        },
    )
    mapper_registry.map_imperatively(cls, table)
    return cls


def map_models(
    metadata: MetaData,
    *,
    entries: Table,
    invalidation: Table,
    share_grant: Table,
    rag_source_acl: Table,
    rag_scope_generations: Table,
    rag_chunks: Table,
    working: Table,
) -> PrismModels:
    """Map a fresh subclass of each row class onto these tables, in a registry of their own.

    Called once per table set by :func:`~prism_memory.postgres.tables.build_metadata` (which is
    cached per ``(schema, table, dimension)``); use ``build_metadata(...).orm`` rather than calling
    it again. ``metadata`` is the tables' :class:`~sqlalchemy.MetaData`, shared with the registry
    so ``registry.metadata`` is the one Alembic compares against.
    """
    mapper_registry = registry(metadata=metadata)
    return PrismModels(
        registry=mapper_registry,
        Entry=_mapped(mapper_registry, EntryRow, "Entry", entries),
        Tombstone=_mapped(mapper_registry, TombstoneRow, "Tombstone", invalidation),
        ShareGrant=_mapped(mapper_registry, ShareGrantRow, "ShareGrant", share_grant),
        RagSourceAcl=_mapped(mapper_registry, RagSourceAclRow, "RagSourceAcl", rag_source_acl),
        RagScopeGeneration=_mapped(
            mapper_registry, RagScopeGenerationRow, "RagScopeGeneration", rag_scope_generations
        ),
        RagChunk=_mapped(mapper_registry, RagChunkRow, "RagChunk", rag_chunks),
        WorkingMemory=_mapped(mapper_registry, WorkingMemoryRow, "WorkingMemory", working),
    )
