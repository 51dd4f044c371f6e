"""The RAG store's statements: nearest chunks (HNSW-capable or exact), BM25 selection and its
statistics, generations, and the ``tsvector``/``tsquery`` literals the chunks are written with.
The rules that pick a statement are :mod:`prism_memory.postgres.rag_store`'s."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ...lexical import tokenize
from ..tables import PrismTables
from ._base import quote

__all__ = ["RagSql", "tsquery_literal", "tsvector_literal"]

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
        schema = quote(tables.names.schema)
        return RagSql(
            chunks=f"{schema}.{quote(tables.names.rag_chunks)}",
            acl=f"{schema}.{quote(tables.names.rag_source_acl)}",
            generations=f"{schema}.{quote(tables.names.rag_scope_generations)}",
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
        columns = (
            "c.source_id, c.chunk_index, c.text, c.metadata, c.generation, c.embedding, "
            "c.embedding_model"
        )
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
            "SELECT c.source_id, c.chunk_index, c.text, c.metadata, c.generation, c.embedding, "  # noqa: S608 - quoted identifiers, bound values
            "c.embedding_model "
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
    def sources(self) -> str:
        """The next ``:limit`` distinct source ids of a scope's generation after ``:after``
        (``NULL``: from the first), in code-point order (``COLLATE "C"``, whatever the database's
        collation: the order Python sorts strings in)."""
        return (
            f'SELECT DISTINCT c.source_id COLLATE "C" AS source_id FROM {self.chunks} c '  # noqa: S608 - quoted identifiers, bound values
            "WHERE c.tenant_id = :tenant AND c.scope = :scope AND c.generation = :generation "
            'AND (CAST(:after AS text) IS NULL OR c.source_id COLLATE "C" > CAST(:after AS text)) '
            "ORDER BY 1 LIMIT :limit"
        )

    @property
    def any_width(self) -> str:
        """The width of any stored chunk vector."""
        return f"SELECT vector_dims(embedding) FROM {self.chunks} LIMIT 1"  # noqa: S608 - quoted identifiers, bound values
