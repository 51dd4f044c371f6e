-- name: rag/lexical.filtered
-- source: prism_memory.postgres.statements.rag.RagSql.lexical(acl=False, versioned=False, filtered=True)
-- rendered by tests/unit/test_rendered_sql.py (PRISM_UPDATE_SQL=1 pytest tests/unit/test_rendered_sql.py rewrites it); line breaks and
-- indentation are added for reading, the statement is otherwise verbatim
SELECT c.source_id, c.chunk_index, c.text, c.metadata, c.generation, c.embedding, c.embedding_model
FROM "prism_memory"."semantic_memory_rag_chunks" c
WHERE c.tenant_id = :tenant
AND c.scope = :scope
AND c.generation = COALESCE(CAST(:generation AS bigint), (SELECT g.generation
        FROM "prism_memory"."semantic_memory_rag_scope_generations" g
        WHERE g.tenant_id = :tenant
        AND g.scope = :scope), 0)
AND c.metadata @> :filter
AND c.text_tsv @@ CAST(:tsquery AS tsquery)
ORDER BY (SELECT COALESCE(sum(w.idf * CAST(cardinality(u.positions) AS float8) * (CAST(:k1 AS float8) + 1) / (CAST(cardinality(u.positions) AS float8) + CAST(:k1 AS float8) * (1 - CAST(:b AS float8) + CAST(:b AS float8) * c.term_count / CAST(:avgdl AS float8)))), 0)
    FROM unnest(c.text_tsv) AS u
    JOIN unnest(CAST(:terms AS text[]), CAST(:idfs AS float8[])) AS w(term, idf)
    ON u.lexeme = w.term) DESC, c.source_id, c.chunk_index
LIMIT :limit
