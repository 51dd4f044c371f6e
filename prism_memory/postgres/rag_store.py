"""The PostgreSQL side of the RAG store: the operations over one session, and the rules that pick
their statements.

:class:`~prism_memory.postgres.statements.RagSql` builds every statement once per table set;
:class:`RagSession` -- the RAG tables' repository -- runs them inside a session unit of the store's
executor (it flushes, never commits); :class:`~prism_memory.postgres.rag_adapter.PostgresRagStore`
is the :class:`~prism_memory.stores.rag_base.RagStore` that opens those units -- each call one
unit of work, or all of them in one transaction -- and the one
:class:`~prism_memory.postgres.PostgresVectorStore` hands its RAG calls to.

Authorisation and the vector leg
--------------------------------
The ACL is an ``EXISTS`` on ``<table>_rag_source_acl`` in the ``WHERE`` clause of both legs,
probing its primary key ``(tenant_id, scope, source_id, principal_kind, principal_id)`` -- applied
before ``ORDER BY``/``LIMIT``, so it filters candidates rather than results.

The vector leg takes one of two paths, chosen per query:

* **exact** when the query's own WHERE clause -- scope, generation, ACL and filter -- admits at most
  :func:`exact_scan_max_rows` chunks (2,000 under an ACL or filter, 600 without; counted first,
  stopping one past the threshold -- with a selective ACL the planner drives that count from the
  ACL's primary key, so it costs what the granted sources hold): those rows ordered by
  ``distance + 0``, an expression the HNSW index cannot serve, so the result is exact;
* **HNSW** otherwise, with ``hnsw.iterative_scan = strict_order`` and ``hnsw.ef_search`` set for
  the query's transaction (``SET LOCAL`` via ``set_config(..., true)``) by :func:`ef_search_for`
  -- larger when an ACL or a filter restricts the rows, because filtered HNSW scans lose recall
  first. The iterative scan keeps going until ``top_k`` rows pass the ACL and the filter; if it
  still comes back short (``hnsw.max_scan_tuples`` reached), the exact statement runs instead, so
  a query never under-returns. (The planner may still answer the HNSW statement with an
  ACL-driven plan when it estimates that cheaper; that plan is exact.)

The rule and its numbers come from ``benchmarks/rag_acl.py`` (see ``benchmarks/README.md``): on
20k × 384-d chunks an exact scan costs ~2.7 µs per row without an ACL (HNSW at ``ef_search`` 80:
~1.7 ms, so exact wins below ~600 rows) and ~7 µs per admitted row through a selective ACL (HNSW
at ``ef_search`` 400, the value that keeps filtered recall@10 ≥ 0.95: ~16 ms, so exact wins
below ~2,000 rows).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from sqlalchemy import bindparam, delete, func, select, text
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncSession

from ..embedding import assert_finite_vector
from ..lexical import BM25_B, BM25_K1, CorpusStats, idf
from ..models import Vector, check_key
from ..rag_types import (
    ACL,
    AccessConstraint,
    Authorization,
    Chunk,
    JsonScalar,
    RagHit,
    RagScope,
    SourceAccess,
    check_generation,
)
from ..stores.rag_base import (
    RagOperations,
    check_authorization,
    check_chunks,
    check_sources_page,
    check_top_k,
    lexical_score,
    lexical_terms,
    resolve_filter,
    resolve_generation,
    resolve_scope,
    vector_score,
)
from .statements.rag import RagSql, tsquery_literal, tsvector_literal
from .tables import PrismTables

__all__ = [
    "EXACT_SCAN_MAX_ROWS",
    "EXACT_SCAN_MAX_ROWS_UNRESTRICTED",
    "RagSession",
    "RagSql",
    "ef_search_for",
    "exact_scan_max_rows",
    "tsquery_literal",
    "tsvector_literal",
]

EXACT_SCAN_MAX_ROWS: Final = 2000
"""A query restricted by an ACL or a filter whose WHERE clause admits at most this many chunks is
answered by an exact scan (see the module docstring)."""
EXACT_SCAN_MAX_ROWS_UNRESTRICTED: Final = 600
"""The same threshold for a query without ACL or filter (an exact scan is cheaper per row there,
and HNSW needs a smaller ``ef_search``)."""


def exact_scan_max_rows(*, restricted: bool) -> int:
    """The exact-scan threshold of a query (:data:`EXACT_SCAN_MAX_ROWS` or the unrestricted one)."""
    return EXACT_SCAN_MAX_ROWS if restricted else EXACT_SCAN_MAX_ROWS_UNRESTRICTED


def ef_search_for(top_k: int, *, restricted: bool = False) -> int:
    """``hnsw.ef_search`` for a query of ``top_k``: ``max(40, 8 × top_k)``, or -- when an ACL or a
    filter restricts the rows -- ``max(400, 40 × top_k)``; at most 1,000 (pgvector's limit)."""
    if restricted:
        return min(1000, max(400, 40 * top_k))
    return min(1000, max(40, 8 * top_k))


class RagSession(RagOperations):
    """:class:`~prism_memory.stores.rag_base.RagOperations` over one :class:`AsyncSession`.

    The caller owns the transaction: nothing here commits.
    """

    def __init__(
        self,
        session: AsyncSession,
        tables: PrismTables,
        *,
        dimension: int | None,
        width: Callable[[], int | None],
        learn_width: Callable[[int], None],
        exact_max_rows: int | None = None,
    ) -> None:
        self.exact_max_rows = exact_max_rows
        self.session = session
        self.tables = tables
        self.sql = RagSql.for_tables(tables)
        self._dimension = dimension
        self._width = width
        self._learn_width = learn_width

    @property
    def dimension(self) -> int | None:
        """The pinned width of the chunks' ``embedding`` column, or ``None``."""
        return self._dimension

    async def _known_width(self) -> int | None:
        width = self._width()
        if width is None:
            found = (await self.session.execute(text(self.sql.any_width))).scalar_one_or_none()
            if found is not None:
                self._learn_width(int(found))
                width = int(found)
        return width

    async def _generation(self, scope: RagScope, generation: int | None) -> int:
        resolved = resolve_generation(generation)
        if resolved is not None:
            return resolved
        return await self.get_current_generation(scope)

    # ---- chunks ------------------------------------------------------------------------------

    async def upsert(
        self, scope: RagScope, chunks: Sequence[Chunk], *, generation: int | None = None
    ) -> int:
        """Insert or replace ``chunks`` by ``(source_id, index)`` in one batched statement."""
        scope = resolve_scope(scope)
        checked = check_chunks(chunks)
        resolve_generation(generation)
        if not checked:
            return 0
        width = await self._known_width()
        vectors: list[Vector] = []
        for chunk in checked:
            vector = assert_finite_vector(
                chunk.embedding, f"embedding of {chunk.source_id}#{chunk.index}", width
            )
            width = vector.shape[0]
            vectors.append(vector)
        gen = await self._generation(scope, generation)
        table = self.tables.rag_chunks
        statement = insert(table)
        statement = statement.on_conflict_do_update(
            index_elements=[
                table.c.tenant_id,
                table.c.scope,
                table.c.generation,
                table.c.source_id,
                table.c.chunk_index,
            ],
            set_={
                "text": statement.excluded.text,
                "metadata": statement.excluded.metadata,
                "digest": statement.excluded.digest,
                "embedding": statement.excluded.embedding,
                "embedding_model": statement.excluded.embedding_model,
                "text_tsv": statement.excluded.text_tsv,
                "term_count": statement.excluded.term_count,
                "created_at": statement.excluded.created_at,
            },
        )
        rows = []
        for chunk, vector in zip(checked, vectors, strict=True):
            terms, count = tsvector_literal(chunk.text)
            rows.append(
                {
                    "tenant_id": scope.tenant_id,
                    "scope": scope.key,
                    "generation": gen,
                    "source_id": chunk.source_id,
                    "chunk_index": chunk.index,
                    "text": chunk.text,
                    "metadata": dict(chunk.metadata),
                    "digest": chunk.digest,
                    "embedding": vector,
                    "embedding_model": chunk.embedding_model,
                    "text_tsv": terms,
                    "term_count": count,
                }
            )
        await self.session.execute(statement.values(created_at=func.now()), rows)
        if width is not None:
            self._learn_width(width)
        return len(checked)

    def _in_generation(self, scope: RagScope, generation: int) -> Any:
        table = self.tables.rag_chunks
        return (
            (table.c.tenant_id == scope.tenant_id)
            & (table.c.scope == scope.key)
            & (table.c.generation == generation)
        )

    async def get_by_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> list[Chunk]:
        """The chunks of ``source_id`` by index (primary-key range)."""
        scope = resolve_scope(scope)
        check_key(source_id, "source_id")
        gen = await self._generation(scope, generation)
        table = self.tables.rag_chunks
        rows = await self.session.execute(
            select(
                table.c.source_id,
                table.c.chunk_index,
                table.c.text,
                table.c.metadata,
                table.c.digest,
                table.c.embedding,
                table.c.embedding_model,
            )
            .where(self._in_generation(scope, gen) & (table.c.source_id == source_id))
            .order_by(table.c.chunk_index)
        )
        return [
            Chunk(
                source_id=row.source_id,
                index=row.chunk_index,
                text=row.text,
                embedding=row.embedding,
                metadata=row.metadata,
                digest=row.digest,
                embedding_model=row.embedding_model,
            )
            for row in rows
        ]

    async def list_sources(
        self,
        scope: RagScope,
        *,
        generation: int | None = None,
        after: str | None = None,
        limit: int,
    ) -> list[str]:
        """The next ``limit`` source ids of the generation after ``after``, in code-point order."""
        scope = resolve_scope(scope)
        check_sources_page(after, limit)
        gen = await self._generation(scope, generation)
        params = {"tenant": scope.tenant_id, "scope": scope.key, "after": after, "limit": limit}
        rows = await self.session.execute(text(self.sql.sources), {**params, "generation": gen})
        return [str(source) for source in rows.scalars()]

    async def delete_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> int:
        """Delete the chunks of ``source_id`` in the generation; count them."""
        scope = resolve_scope(scope)
        check_key(source_id, "source_id")
        gen = await self._generation(scope, generation)
        table = self.tables.rag_chunks
        result = await self.session.execute(
            delete(table).where(self._in_generation(scope, gen) & (table.c.source_id == source_id))
        )
        return int(getattr(result, "rowcount", 0) or 0)

    async def delete_generation(self, scope: RagScope, generation: int) -> int:
        """Delete every chunk of ``generation``; count them."""
        scope = resolve_scope(scope)
        gen = check_generation(generation)
        result = await self.session.execute(
            delete(self.tables.rag_chunks).where(self._in_generation(scope, gen))
        )
        return int(getattr(result, "rowcount", 0) or 0)

    # ---- reads -------------------------------------------------------------------------------

    async def query(
        self,
        scope: RagScope,
        *,
        embedding: Vector | Sequence[float],
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The ``top_k`` nearest authorised chunks (exact or HNSW; see the module docstring)."""
        read = _Read.of(scope, filter, authorization, top_k=top_k)
        params, flags = read.params, read.flags
        query = assert_finite_vector(embedding, "query embedding", await self._known_width())
        gen = resolve_generation(generation)
        if read.denied:
            return []
        params.update(generation=gen, query=query, limit=top_k)
        restricted = flags["acl"] or flags["filtered"]
        threshold = (
            exact_scan_max_rows(restricted=restricted)
            if self.exact_max_rows is None
            else self.exact_max_rows
        )
        prepare = _typed(self.sql.prepare_vector(**flags), flags)
        size = (
            await self.session.execute(
                prepare,
                {
                    **params,
                    "ef": str(ef_search_for(top_k, restricted=restricted)),
                    "exact_max": threshold,
                },
            )
        ).scalar_one()
        rows: list[Any] = []
        if int(size) > threshold and self.tables.dimension is not None:
            statement = self.sql.nearest(exact=False, **flags)
            rows = list(await self.session.execute(_typed(statement, flags), params))
        if len(rows) < top_k:
            statement = self.sql.nearest(exact=True, **flags)
            rows = list(await self.session.execute(_typed(statement, flags), params))
        scored = [(vector_score(query, np.asarray(row.embedding)), row) for row in rows]
        return _hits(scored, leg="semantic")

    async def lexical_query(
        self,
        scope: RagScope,
        *,
        text: str,
        top_k: int,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> list[RagHit]:
        """The best BM25 matches among authorised chunks (selected in SQL, scored in Python)."""
        read = _Read.of(scope, filter, authorization, top_k=top_k, text=text)
        params, flags, terms = read.params, read.flags, read.terms
        gen = resolve_generation(generation)
        if read.denied or not terms:
            return []
        if gen is None:  # one generation for the statistics and the selection
            gen = await self.get_current_generation(read.scope)
        params.update(generation=gen, terms=list(terms))
        stats = await self._stats(params, flags)
        if stats.documents == 0:
            return []
        params.update(
            idfs=[idf(stats.frequency(term), stats.documents) for term in terms],
            avgdl=stats.average_length or 1.0,
            k1=BM25_K1,
            b=BM25_B,
            tsquery=tsquery_literal(terms),
            limit=top_k,
        )
        statement = self.sql.lexical(**flags)
        rows = await self.session.execute(_typed(statement, flags), params)
        scored = [(lexical_score(terms, row.text, stats), row) for row in rows]
        return _hits(scored, leg="lexical")

    async def _stats(self, params: dict[str, Any], flags: Mapping[str, bool]) -> CorpusStats:
        totals = (
            await self.session.execute(_typed(self.sql.lexical_totals(**flags), flags), params)
        ).one()
        if int(totals.documents) == 0:
            return CorpusStats()
        frequencies = await self.session.execute(
            _typed(self.sql.document_frequencies(**flags), flags), params
        )
        return CorpusStats(
            documents=int(totals.documents),
            total_length=int(totals.total_length),
            document_frequency={row.term: int(row.df) for row in frequencies if row.df},
        )

    async def lexical_stats(
        self,
        scope: RagScope,
        *,
        text: str,
        filter: Mapping[str, JsonScalar] | None = None,
        authorization: Authorization = None,
        generation: int | None = None,
    ) -> CorpusStats:
        """BM25 statistics of the authorised, filtered chunks of the generation."""
        read = _Read.of(scope, filter, authorization, text=text)
        if read.denied:
            return CorpusStats()
        read.params.update(generation=resolve_generation(generation), terms=list(read.terms))
        return await self._stats(read.params, read.flags)

    # ---- generations -------------------------------------------------------------------------

    async def get_current_generation(self, scope: RagScope) -> int:
        """The scope's current generation (0 until one is set)."""
        scope = resolve_scope(scope)
        found = await self.session.execute(
            text(self.sql.current_generation), {"tenant": scope.tenant_id, "scope": scope.key}
        )
        return int(found.scalar_one())

    async def set_current_generation(self, scope: RagScope, generation: int) -> None:
        """Make ``generation`` current (one upsert of the pointer row)."""
        scope = resolve_scope(scope)
        await self.session.execute(
            text(self.sql.set_generation),
            {
                "tenant": scope.tenant_id,
                "scope": scope.key,
                "generation": check_generation(generation),
            },
        )

    # ---- access ------------------------------------------------------------------------------

    async def set_source_access(
        self,
        scope: RagScope,
        source_id: str,
        *,
        principal_ids: Sequence[str] = (),
        group_ids: Sequence[str] = (),
        access_version: int,
    ) -> None:
        """Replace the grants of ``source_id``: delete its rows, insert the new set."""
        scope = resolve_scope(scope)
        check_key(source_id, "source_id")
        grants = SourceAccess.of(principal_ids, group_ids, access_version)
        table = self.tables.rag_source_acl
        await self.session.execute(
            delete(table).where(
                (table.c.tenant_id == scope.tenant_id)
                & (table.c.scope == scope.key)
                & (table.c.source_id == source_id)
            )
        )
        rows = [("principal", p) for p in grants.principal_ids] + [
            ("group", g) for g in grants.group_ids
        ]
        if rows:
            await self.session.execute(
                insert(table).values(created_at=func.now()),
                [
                    {
                        "tenant_id": scope.tenant_id,
                        "scope": scope.key,
                        "source_id": source_id,
                        "principal_kind": kind,
                        "principal_id": principal,
                        "access_version": grants.access_version,
                    }
                    for kind, principal in rows
                ],
            )

    async def get_source_access(self, scope: RagScope, source_id: str) -> SourceAccess | None:
        """The grants of ``source_id``, or ``None`` when it has none."""
        scope = resolve_scope(scope)
        check_key(source_id, "source_id")
        table = self.tables.rag_source_acl
        rows = (
            await self.session.execute(
                select(table.c.principal_kind, table.c.principal_id, table.c.access_version)
                .where(
                    (table.c.tenant_id == scope.tenant_id)
                    & (table.c.scope == scope.key)
                    & (table.c.source_id == source_id)
                )
                .order_by(table.c.principal_kind, table.c.principal_id)
            )
        ).all()
        if not rows:
            return None
        return SourceAccess(
            principal_ids=tuple(r.principal_id for r in rows if r.principal_kind == "principal"),
            group_ids=tuple(r.principal_id for r in rows if r.principal_kind == "group"),
            access_version=max(int(r.access_version) for r in rows),
        )


_NO_TEXT: Final = object()
"""A read without a lexical text (``query``)."""
_NO_TOP_K: Final = object()
"""A read without a cut (``lexical_stats``): ``query`` and ``lexical_query`` always pass theirs,
so a ``top_k`` of ``None`` is checked (and refused) like any other bad value."""


@dataclass(frozen=True, slots=True)
class _Read:
    """What every read (``query``, ``lexical_query``, ``lexical_stats``) checks first, in this
    order -- the scope, ``top_k``, the text's terms, the authorization, the filter -- and what it
    makes of them: the bound values and flags of its statement, and whether the ACL denies it."""

    scope: RagScope
    terms: tuple[str, ...]
    params: dict[str, Any]
    flags: dict[str, bool]
    denied: bool

    @classmethod
    def of(
        cls,
        scope: RagScope,
        filter: Mapping[str, JsonScalar] | None,
        authorization: Authorization,
        *,
        top_k: object = _NO_TOP_K,
        text: object = _NO_TEXT,
    ) -> _Read:
        scope = resolve_scope(scope)
        if top_k is not _NO_TOP_K:
            check_top_k(top_k)
        terms = lexical_terms(text) if text is not _NO_TEXT else ()
        auth = check_authorization(authorization)
        params, flags = _read_params(scope, filter, auth)
        return cls(scope, terms, params, flags, denied=auth == ACL)


def _read_params(
    scope: RagScope,
    filter: Mapping[str, JsonScalar] | None,
    authorization: Authorization,
) -> tuple[dict[str, Any], dict[str, bool]]:
    """The bound values of a read's scope, filter and ACL, and the flags that pick its statement."""
    checked = resolve_filter(filter)
    params: dict[str, Any] = {"tenant": scope.tenant_id, "scope": scope.key}
    flags = {"acl": False, "versioned": False, "filtered": bool(checked)}
    if checked:
        params["filter"] = checked
    if isinstance(authorization, AccessConstraint):
        flags["acl"] = True
        params["principal"] = authorization.principal_id
        params["groups"] = list(authorization.group_ids)
        if authorization.access_version is not None:
            flags["versioned"] = True
            params["access_version"] = authorization.access_version
    return params, flags


def _hits(scored: list[tuple[float, Any]], *, leg: Literal["semantic", "lexical"]) -> list[RagHit]:
    """The chunk rows of one leg, each with its score, as hits: score desc, source id, chunk
    index."""
    scored.sort(key=lambda pair: (-pair[0], pair[1].source_id, pair[1].chunk_index))
    return [
        RagHit(
            source_id=row.source_id,
            chunk_index=int(row.chunk_index),
            text=row.text,
            metadata=row.metadata,
            generation=int(row.generation),
            score=score,
            semantic=score if leg == "semantic" else None,
            lexical=score if leg == "lexical" else None,
            embedding=np.asarray(row.embedding),
            embedding_model=row.embedding_model,
        )
        for score, row in scored
    ]


def _typed(statement: str, flags: Mapping[str, bool]) -> Any:
    """``statement`` as a text clause, its filter bound as ``jsonb``."""
    clause = text(statement)
    if flags["filtered"]:
        clause = clause.bindparams(bindparam("filter", type_=JSONB))
    return clause
