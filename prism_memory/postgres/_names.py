"""Every database object name of a table set, derived from the host's ``schema`` and ``table``,
and the checks of those names and of the vector width."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError

__all__ = [
    "MAX_DIMENSION",
    "MAX_HNSW_DIMENSION",
    "Names",
    "names_for",
    "validate_dimension",
    "validate_identifier",
]


_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_MAX_IDENTIFIER = 63
MAX_DIMENSION = 16000
"""pgvector's limit for a ``vector`` column (HNSW indexes up to 2,000)."""
MAX_HNSW_DIMENSION = 2000


def validate_identifier(value: object, what: str) -> str:
    """Return ``value`` if it is a safe lower-case SQL identifier, else raise ``ConfigurationError``.

    Only ``[a-z_][a-z0-9_]*`` up to 63 characters is accepted; such names never need escaping, and
    they are quoted anyway wherever they reach SQL.
    """
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ConfigurationError(
            f"{what} must match {_IDENTIFIER.pattern} (lower-case letters, digits, underscores, "
            f"at most {_MAX_IDENTIFIER} characters); got {value!r}"
        )
    return value


def validate_dimension(value: object) -> int | None:
    """Return ``value`` if it is ``None`` or a usable vector width, else raise ``ConfigurationError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIMENSION:
        raise ConfigurationError(
            f"dimension must be None or an integer in [1, {MAX_DIMENSION}]; got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Names:
    """Every database object name derived from the host's ``schema`` and ``table``."""

    schema: str
    table: str
    entries: str
    invalidation: str
    share_grant: str
    rag_source_acl: str
    rag_scope_generations: str
    rag_chunks: str
    working: str
    generations: str
    vectors: str
    version_table: str
    ix_scope: str
    ix_pending: str
    ix_pending_tenant: str
    ix_pending_scope: str
    ix_claimed: str
    ix_lineage: str
    ix_tsv: str
    ix_hnsw: str
    ix_invalidation_cause: str
    ix_acl_principal: str
    ix_rag_chunks_tsv: str
    ix_rag_chunks_hnsw: str
    ix_resource_shared: str
    ix_generations_active: str

    def all_identifiers(self) -> tuple[str, ...]:
        """Every derived name, constraint names included (each must fit in 63 characters)."""
        plain = tuple(getattr(self, name) for name in self.__slots__)
        constraints = (
            *(f"{name}_pkey" for name in self.tables),
            f"{self.entries}_status_check",
            f"{self.rag_source_acl}_kind_check",
            f"{self.generations}_role_check",
            f"{self.vectors}_entry_fkey",
            f"{self.vectors}_model_fkey",
        )
        return plain + constraints

    @property
    def tables(self) -> tuple[str, ...]:
        """The table names the revisions own (the version table excluded)."""
        return (
            self.entries,
            self.invalidation,
            self.share_grant,
            self.rag_source_acl,
            self.rag_scope_generations,
            self.rag_chunks,
            self.working,
            self.generations,
            self.vectors,
        )


def names_for(schema: str, table: str) -> Names:
    """Validate ``schema`` and ``table`` and derive every object name from them.

    Raises :class:`~prism_memory.errors.ConfigurationError` before anything touches a database when
    a name is unsafe or a derived name would exceed 63 characters (PostgreSQL would silently
    truncate it).
    """
    validate_identifier(schema, "schema")
    validate_identifier(table, "table")
    names = Names(
        schema=schema,
        table=table,
        entries=table,
        invalidation=f"{table}_invalidation",
        share_grant=f"{table}_share_grant",
        rag_source_acl=f"{table}_rag_source_acl",
        rag_scope_generations=f"{table}_rag_scope_generations",
        rag_chunks=f"{table}_rag_chunks",
        working=f"{table}_working",
        generations=f"{table}_generations",
        vectors=f"{table}_vectors",
        version_table=f"{table}_alembic_version",
        ix_scope=f"{table}_scope_seq_idx",
        ix_pending=f"{table}_pending_idx",
        ix_pending_tenant=f"{table}_pending_tenant_idx",
        ix_pending_scope=f"{table}_pending_scope_idx",
        ix_claimed=f"{table}_claimed_idx",
        ix_lineage=f"{table}_lineage_gin",
        ix_tsv=f"{table}_text_tsv_gin",
        ix_hnsw=f"{table}_embedding_hnsw",
        ix_invalidation_cause=f"{table}_invalidation_cause_idx",
        ix_acl_principal=f"{table}_rag_source_acl_principal_idx",
        ix_rag_chunks_tsv=f"{table}_rag_chunks_tsv_gin",
        ix_rag_chunks_hnsw=f"{table}_rag_chunks_hnsw",
        ix_resource_shared=f"{table}_resource_shared_idx",
        ix_generations_active=f"{table}_generations_active_idx",
    )
    too_long = [name for name in names.all_identifiers() if len(name) > _MAX_IDENTIFIER]
    if too_long:
        longest = max(len(name) - len(table) for name in names.all_identifiers())
        raise ConfigurationError(
            f"table name {table!r} is too long: derived names such as {too_long[0]!r} would exceed "
            f"{_MAX_IDENTIFIER} characters (use at most {_MAX_IDENTIFIER - longest} characters)"
        )
    return names
