"""The PostgreSQL side of the RAG store: SQL, and the operations over one session.

:class:`RagSql` builds every statement once per table set; :class:`RagSession` runs them inside
the caller's session (it flushes, never commits); :class:`PostgresRagOperations` is the mixin that
makes :class:`~prism_memory.postgres.PostgresVectorStore` a
:class:`~prism_memory.stores.rag_base.RagStore` -- each call one unit of work, or all of them in
one :meth:`~PostgresRagOperations.transaction`.

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

import functools
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from sqlalchemy import bindparam, delete, func, select, text
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncSession

from ..embedding import assert_finite_vector
from ..lexical import BM25_B, BM25_K1, CorpusStats, idf, tokenize
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
    RagStore,
    check_authorization,
    check_chunks,
    check_top_k,
    lexical_score,
    lexical_terms,
    resolve_filter,
    resolve_generation,
    resolve_scope,
    vector_score,
)
from .tables import PrismTables

__all__ = [
    "EXACT_SCAN_MAX_ROWS",
    "EXACT_SCAN_MAX_ROWS_UNRESTRICTED",
    "PostgresRagOperations",
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


_MAX_POSITION = 16383
_MAX_POSITIONS_PER_TERM = 256


def tsvector_literal(text: str) -> tuple[str, int]:
    """``text``'s terms (:func:`prism_memory.lexical.tokenize`) as a ``tsvector`` literal with
    their positions, and the term count.

    PostgreSQL keeps at most 256 positions per lexeme and none above 16,383, so the term
    frequency SQL sees is capped there (only candidate selection uses it: scores are recomputed
    from the text). Terms are ``\\w+`` runs, so they never need escaping inside the quotes.
    """
    tokens = tokenize(text)
    positions: dict[str, list[int]] = {}
    for position, token in enumerate(tokens, start=1):
        found = positions.setdefault(token, [])
        if len(found) < _MAX_POSITIONS_PER_TERM:
            found.append(min(position, _MAX_POSITION))
    literal = " ".join(
        f"'{term}':{','.join(str(p) for p in sorted(set(places)))}"
        for term, places in sorted(positions.items())
    )
    return literal, len(tokens)


def tsquery_literal(terms: Sequence[str]) -> str:
    """``'a' | 'b' | ...``: a chunk matches when it holds any of ``terms``."""
    return " | ".join(f"'{term}'" for term in terms)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class RagSql:
    """Hand-written SQL of the RAG store for one table set (built once, cached)."""

    chunks: str
    acl: str
    generations: str

    @staticmethod
    @functools.lru_cache(maxsize=64)
    def for_tables(tables: PrismTables) -> RagSql:
        """The SQL builder of ``tables`` (cached)."""
        schema = _quote(tables.names.schema)
        return RagSql(
            chunks=f"{schema}.{_quote(tables.names.rag_chunks)}",
            acl=f"{schema}.{_quote(tables.names.rag_source_acl)}",
            generations=f"{schema}.{_quote(tables.names.rag_scope_generations)}",
        )

    @property
    def generation(self) -> str:
        """``:generation``, or the scope's current generation when it is ``NULL``.

        Evaluated once per statement (an InitPlan), in the statement's own snapshot: a query that
        resolves the current generation this way reads exactly one generation, whatever a
        concurrent switch does.
        """
        return (
            "COALESCE(CAST(:generation AS bigint), (SELECT g.generation FROM "  # noqa: S608 - quoted identifiers, bound values
            f"{self.generations} g WHERE g.tenant_id = :tenant AND g.scope = :scope), 0)"
        )

    def _where(self, *, acl: bool, versioned: bool, filtered: bool) -> str:
        """Scope, generation, ACL and filter over alias ``c``."""
        parts = [
            "c.tenant_id = :tenant",
            "c.scope = :scope",
            f"c.generation = {self.generation}",
        ]
        if acl:
            # Index probe of the ACL primary key (tenant_id, scope, source_id, kind, principal_id).
            version = " AND a.access_version = :access_version" if versioned else ""
            parts.append(
                f"EXISTS (SELECT 1 FROM {self.acl} a WHERE a.tenant_id = c.tenant_id "  # noqa: S608 - quoted identifiers, bound values
                "AND a.scope = c.scope AND a.source_id = c.source_id AND ("
                "(a.principal_kind = 'principal' AND a.principal_id = :principal) OR "
                "(a.principal_kind = 'group' AND a.principal_id = ANY(CAST(:groups AS text[]))))"
                f"{version})"
            )
        if filtered:
            parts.append("c.metadata @> :filter")
        return " AND ".join(parts)

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded; instances are few and cached themselves
    def nearest(self, *, exact: bool, acl: bool, versioned: bool, filtered: bool) -> str:
        """The ``:limit`` nearest chunks by cosine distance (HNSW-capable, or exact)."""
        where = self._where(acl=acl, versioned=versioned, filtered=filtered)
        columns = "c.source_id, c.chunk_index, c.text, c.metadata, c.generation, c.embedding"
        distance = "(c.embedding <=> :query)"
        if exact:
            # ``+ 0`` is not the indexed expression, so the HNSW index cannot serve this order:
            # the rows that pass the WHERE clause are sorted (a top-N heapsort) -- an exact result.
            return (
                f"SELECT {columns} FROM {self.chunks} c WHERE {where} "  # noqa: S608 - quoted identifiers, bound values
                f"ORDER BY {distance} + 0, c.source_id, c.chunk_index LIMIT :limit"
            )
        return (
            f"SELECT {columns} FROM {self.chunks} c WHERE {where} ORDER BY {distance} LIMIT :limit"  # noqa: S608 - quoted identifiers, bound values
        )

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded
    def lexical(self, *, acl: bool, versioned: bool, filtered: bool) -> str:
        """The ``:limit`` best BM25 matches (any term, via the ``text_tsv`` GIN index).

        ``:terms``/``:idfs`` are the query terms and their idf, ``:avgdl`` the average length, all
        from :meth:`lexical_totals`/:meth:`document_frequencies` of the same selection; term
        frequencies are the number of positions ``text_tsv`` holds for a term.
        """
        where = self._where(acl=acl, versioned=versioned, filtered=filtered)
        # Every number is cast: an untyped parameter next to an integer literal would be inferred
        # as an integer (0.9 -> 1) and silently change the ranking.
        tf = "CAST(cardinality(u.positions) AS float8)"
        k1, b, avgdl = "CAST(:k1 AS float8)", "CAST(:b AS float8)", "CAST(:avgdl AS float8)"
        bm25 = (
            f"(SELECT COALESCE(sum(w.idf * {tf} * ({k1} + 1) / "  # noqa: S608 - quoted identifiers, bound values
            f"({tf} + {k1} * (1 - {b} + {b} * c.term_count / {avgdl}))), 0) "
            "FROM unnest(c.text_tsv) AS u "
            "JOIN unnest(CAST(:terms AS text[]), CAST(:idfs AS float8[])) AS w(term, idf) "
            "ON u.lexeme = w.term)"
        )
        return (
            "SELECT c.source_id, c.chunk_index, c.text, c.metadata, c.generation, c.embedding "  # noqa: S608 - quoted identifiers, bound values
            f"FROM {self.chunks} c "
            f"WHERE {where} AND c.text_tsv @@ CAST(:tsquery AS tsquery) "
            f"ORDER BY {bm25} DESC, c.source_id, c.chunk_index LIMIT :limit"
        )

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded
    def lexical_totals(self, *, acl: bool, versioned: bool, filtered: bool) -> str:
        """How many chunks the selection holds and their total term count."""
        where = self._where(acl=acl, versioned=versioned, filtered=filtered)
        return (
            "SELECT count(*) AS documents, COALESCE(sum(c.term_count), 0) AS total_length "  # noqa: S608 - quoted identifiers, bound values
            f"FROM {self.chunks} c WHERE {where}"
        )

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded
    def document_frequencies(self, *, acl: bool, versioned: bool, filtered: bool) -> str:
        """Per query term, how many chunks of the selection hold it (GIN probe per term)."""
        where = self._where(acl=acl, versioned=versioned, filtered=filtered)
        return (
            f"SELECT t.term, (SELECT count(*) FROM {self.chunks} c WHERE {where} "  # noqa: S608 - quoted identifiers, bound values
            "AND c.text_tsv @@ CAST(quote_literal(t.term) AS tsquery)) AS df "
            "FROM unnest(CAST(:terms AS text[])) AS t(term)"
        )

    @property
    def current_generation(self) -> str:
        """The scope's current generation, 0 when never set."""
        return (
            f"SELECT COALESCE((SELECT generation FROM {self.generations} "  # noqa: S608 - quoted identifiers, bound values
            "WHERE tenant_id = :tenant AND scope = :scope), 0)"
        )

    @functools.lru_cache(maxsize=32)  # noqa: B019 - bounded
    def prepare_vector(self, *, acl: bool, versioned: bool, filtered: bool) -> str:
        """One round trip before a vector query: how many chunks pass the query's WHERE clause
        (scope, generation, ACL, filter -- counting at most one past ``:exact_max``),
        and ``hnsw.iterative_scan``/``hnsw.ef_search`` (``:ef``) set for the transaction."""
        where = self._where(acl=acl, versioned=versioned, filtered=filtered)
        return (
            f"SELECT (SELECT count(*) FROM (SELECT 1 FROM {self.chunks} c WHERE {where} "  # noqa: S608 - quoted identifiers, bound values
            "LIMIT :exact_max + 1) AS bounded) AS size, "
            "set_config('hnsw.iterative_scan', 'strict_order', true) AS scan, "
            "set_config('hnsw.ef_search', :ef, true) AS ef"
        )

    @property
    def set_generation(self) -> str:
        """Upsert the scope's current generation."""
        return (
            f"INSERT INTO {self.generations} (tenant_id, scope, generation, updated_at) "  # noqa: S608 - quoted identifiers, bound values
            "VALUES (:tenant, :scope, :generation, now()) ON CONFLICT (tenant_id, scope) "
            "DO UPDATE SET generation = EXCLUDED.generation, updated_at = EXCLUDED.updated_at"
        )

    @property
    def any_width(self) -> str:
        """The width of any stored chunk vector."""
        return f"SELECT vector_dims(embedding) FROM {self.chunks} LIMIT 1"  # noqa: S608 - quoted identifiers, bound values


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
            )
            for row in rows
        ]

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

    def _read_params(
        self,
        scope: RagScope,
        filter: Mapping[str, JsonScalar] | None,
        authorization: Authorization,
    ) -> tuple[dict[str, Any], dict[str, bool]]:
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

    @staticmethod
    def _typed(statement: str, flags: Mapping[str, bool]) -> Any:
        clause = text(statement)
        if flags["filtered"]:
            clause = clause.bindparams(bindparam("filter", type_=JSONB))
        return clause

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
        scope = resolve_scope(scope)
        check_top_k(top_k)
        auth = check_authorization(authorization)
        params, flags = self._read_params(scope, filter, auth)
        query = assert_finite_vector(embedding, "query embedding", await self._known_width())
        gen = resolve_generation(generation)
        if auth == ACL:
            return []
        params.update(generation=gen, query=query, limit=top_k)
        restricted = flags["acl"] or flags["filtered"]
        threshold = (
            exact_scan_max_rows(restricted=restricted)
            if self.exact_max_rows is None
            else self.exact_max_rows
        )
        prepare = self._typed(self.sql.prepare_vector(**flags), flags)
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
            rows = list(await self.session.execute(self._typed(statement, flags), params))
        if len(rows) < top_k:
            statement = self.sql.nearest(exact=True, **flags)
            rows = list(await self.session.execute(self._typed(statement, flags), params))
        scored = [(vector_score(query, np.asarray(row.embedding)), row) for row in rows]
        scored.sort(key=lambda pair: (-pair[0], pair[1].source_id, pair[1].chunk_index))
        return [
            RagHit(
                source_id=row.source_id,
                chunk_index=int(row.chunk_index),
                text=row.text,
                metadata=row.metadata,
                generation=int(row.generation),
                score=score,
                semantic=score,
                embedding=np.asarray(row.embedding),
            )
            for score, row in scored
        ]

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
        scope = resolve_scope(scope)
        check_top_k(top_k)
        terms = lexical_terms(text)
        auth = check_authorization(authorization)
        params, flags = self._read_params(scope, filter, auth)
        gen = resolve_generation(generation)
        if auth == ACL or not terms:
            return []
        if gen is None:  # one generation for the statistics and the selection
            gen = await self.get_current_generation(scope)
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
        rows = await self.session.execute(self._typed(statement, flags), params)
        scored = [(lexical_score(terms, row.text, stats), row) for row in rows]
        scored.sort(key=lambda pair: (-pair[0], pair[1].source_id, pair[1].chunk_index))
        return [
            RagHit(
                source_id=row.source_id,
                chunk_index=int(row.chunk_index),
                text=row.text,
                metadata=row.metadata,
                generation=int(row.generation),
                score=score,
                lexical=score,
                embedding=np.asarray(row.embedding),
            )
            for score, row in scored
        ]

    async def _stats(self, params: dict[str, Any], flags: Mapping[str, bool]) -> CorpusStats:
        totals = (
            await self.session.execute(self._typed(self.sql.lexical_totals(**flags), flags), params)
        ).one()
        if int(totals.documents) == 0:
            return CorpusStats()
        frequencies = await self.session.execute(
            self._typed(self.sql.document_frequencies(**flags), flags), params
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
        scope = resolve_scope(scope)
        terms = lexical_terms(text)
        auth = check_authorization(authorization)
        params, flags = self._read_params(scope, filter, auth)
        if auth == ACL:
            return CorpusStats()
        params.update(generation=resolve_generation(generation), terms=list(terms))
        return await self._stats(params, flags)

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


class PostgresRagOperations(RagStore):
    """Mixin: the RAG store over an adapter's engine (``_unit``, ``_tables``, ``_dimension``).

    Every method is one unit of work (its driver errors translated by the adapter's ``_unit``);
    :meth:`transaction` runs many in one.
    """

    _tables: PrismTables
    _dimension: int | None
    _rag_width: int | None = None
    rag_exact_scan_max_rows: int | None = None
    """Override of the exact-scan thresholds for this store (``None``: :func:`exact_scan_max_rows`;
    ``0`` sends every vector query down the HNSW path)."""

    if TYPE_CHECKING:

        def _unit(
            self, action: str, *, custom_plans: bool = False
        ) -> AbstractAsyncContextManager[AsyncSession]: ...

    def _rag(self, session: AsyncSession) -> RagSession:
        return RagSession(
            session,
            self._tables,
            dimension=self._dimension,
            width=lambda: self._rag_width if self._dimension is None else self._dimension,
            learn_width=self._learn_rag_width,
            exact_max_rows=self.rag_exact_scan_max_rows,
        )

    def _learn_rag_width(self, width: int) -> None:
        if self._rag_width is None:
            self._rag_width = width

    def transaction(self) -> AbstractAsyncContextManager[RagOperations]:
        """One PostgreSQL transaction for every call made through the yielded object."""
        return self._rag_transaction()

    @asynccontextmanager
    async def _rag_transaction(self) -> AsyncIterator[RagOperations]:
        async with self._unit("RAG transaction", custom_plans=True) as session:
            yield self._rag(session)

    async def upsert(
        self, scope: RagScope, chunks: Sequence[Chunk], *, generation: int | None = None
    ) -> int:
        """Insert or replace ``chunks``, atomically."""
        async with self._unit("upsert") as session:
            return await self._rag(session).upsert(scope, chunks, generation=generation)

    async def get_by_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> list[Chunk]:
        """The chunks of ``source_id`` by index."""
        async with self._unit("get_by_source") as session:
            return await self._rag(session).get_by_source(scope, source_id, generation=generation)

    async def delete_source(
        self, scope: RagScope, source_id: str, *, generation: int | None = None
    ) -> int:
        """Delete the chunks of ``source_id``; count them."""
        async with self._unit("delete_source") as session:
            return await self._rag(session).delete_source(scope, source_id, generation=generation)

    async def delete_generation(self, scope: RagScope, generation: int) -> int:
        """Delete every chunk of ``generation``; count them."""
        async with self._unit("delete_generation") as session:
            return await self._rag(session).delete_generation(scope, generation)

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
        """The ``top_k`` nearest authorised chunks, in one transaction (one snapshot)."""
        async with self._unit("query", custom_plans=True) as session:
            return await self._rag(session).query(
                scope,
                embedding=embedding,
                top_k=top_k,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

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
        """The best lexical matches among authorised chunks."""
        async with self._unit("lexical_query", custom_plans=True) as session:
            return await self._rag(session).lexical_query(
                scope,
                text=text,
                top_k=top_k,
                filter=filter,
                authorization=authorization,
                generation=generation,
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
        """BM25 statistics of the chunks such a query may see."""
        async with self._unit("lexical_stats", custom_plans=True) as session:
            return await self._rag(session).lexical_stats(
                scope,
                text=text,
                filter=filter,
                authorization=authorization,
                generation=generation,
            )

    async def get_current_generation(self, scope: RagScope) -> int:
        """The scope's current generation (0 until set)."""
        async with self._unit("get_current_generation") as session:
            return await self._rag(session).get_current_generation(scope)

    async def set_current_generation(self, scope: RagScope, generation: int) -> None:
        """Make ``generation`` current."""
        async with self._unit("set_current_generation") as session:
            await self._rag(session).set_current_generation(scope, generation)

    async def set_source_access(
        self,
        scope: RagScope,
        source_id: str,
        *,
        principal_ids: Sequence[str] = (),
        group_ids: Sequence[str] = (),
        access_version: int,
    ) -> None:
        """Replace the grants of ``source_id``, atomically."""
        async with self._unit("set_source_access") as session:
            await self._rag(session).set_source_access(
                scope,
                source_id,
                principal_ids=principal_ids,
                group_ids=group_ids,
                access_version=access_version,
            )

    async def get_source_access(self, scope: RagScope, source_id: str) -> SourceAccess | None:
        """The grants of ``source_id``, or ``None``."""
        async with self._unit("get_source_access") as session:
            return await self._rag(session).get_source_access(scope, source_id)
