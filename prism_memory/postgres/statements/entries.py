# ruff: noqa: S608 - SQL text is built only from validated, quoted identifiers; values are bound.
"""Entries by key: the batch insert of new entries, reads by id, a text replacement, and the
thread's advisory lock that serialises its writers."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ...models import MemoryIdentity
from ..rows import INSERT_COLUMNS, scope_params
from ..tables import PrismTables
from ._base import TableSql, windows_of

__all__ = [
    "RowSql",
    "begin_locked_statement",
    "records_statement",
    "thread_lock_key",
    "thread_lock_literal",
]


class RowSql(TableSql):
    """Statements over entries by key, for one table set."""

    @functools.cached_property
    def records(self) -> str:
        """The records of ``:ids`` in the thread, each once (:meth:`stored_of_ids`)."""
        return f"SELECT {self.columns()} {self.stored_of_ids('e.*')}"

    @functools.cached_property
    def known_ids(self) -> str:
        """Those of ``:ids`` the thread holds, each once (:meth:`stored_of_ids`)."""
        return f"SELECT e.id {self.stored_of_ids(self.key_of('e'))}"

    @functools.cached_property
    def index_status(self) -> str:
        """``id, status, last_error`` of those of ``:ids`` the thread holds, each once
        (:meth:`stored_of_ids`)."""
        found = self.stored_of_ids(f"{self.key_of('e')}, e.status, e.last_error")
        return f"SELECT e.id, e.status, e.last_error {found}"

    @functools.cached_property
    def lock_thread(self) -> str:
        """Serialise the writers of one thread until the transaction ends (sequence assignment).
        No table: a transaction-scoped advisory lock on the hash of the thread's key."""
        return "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"

    @functools.cached_property
    def insert(self) -> str:
        """One batch of new entries in one statement, run under :attr:`lock_thread`: the exact form.

        The rows arrive as parallel arrays (``unnest ... WITH ORDINALITY``: one bound parameter per
        column however many rows). Ids that exist are left out (never rewritten: ``ON CONFLICT DO
        NOTHING`` semantics, exact because every writer of the thread holds the lock); the new rows get
        their sequences in input order -- an explicit one as given, otherwise one past the largest
        so far (the thread's, read on the ``(scope, sequence)`` index, or an earlier row's of this
        batch) -- and are inserted ``indexed`` where a vector came with them, else ``pending``
        (leased where ``leased``); tombstones an earlier, forgotten entry of the same id left behind
        are deleted. Returns ``id, sequence`` of the inserted rows.

        The existing ids are looked up first, one descent of the primary key per row
        (:meth:`stored_key`). Speculative insertion (``ON CONFLICT``) costs less than that lookup,
        so the store tries :attr:`insert_new` first and runs this form only for a batch that mixes
        stored and new ids.
        """
        return self._insert(lookup=True)

    @functools.cached_property
    def insert_new(self) -> str:
        """:attr:`insert` for a batch expected to be new: numbered as if no id existed, each row
        inserted unless its primary key is taken (``ON CONFLICT DO NOTHING``: one probe of the
        primary key per row, whatever the table's statistics). Exact when every id is new, or
        every id exists (nothing inserted); for a batch that mixes the two, the sequences after a
        skipped row leave a gap, so the store rolls it back and runs :attr:`insert` instead."""
        return self._insert(lookup=False)

    @functools.cached_property
    def insert_new_appended(self) -> str:
        """:attr:`insert_new` for a batch without an explicit sequence, the usual case: each row
        numbered one past the thread's top plus its ordinal, with no window over the batch (the
        numbers the window of :attr:`insert_new` gives such a batch). Returns one row,
        ``inserted, first``: how many rows it inserted and the first one's sequence (when it
        inserted all of them, the rows hold ``first, first + 1, ...`` in input order)."""
        return self._insert(lookup=False, explicit=False)

    def _insert(self, *, lookup: bool, explicit: bool = True) -> str:
        scope = "tenant_id = :tenant AND resource_id = :resource AND thread_id = :thread"
        before = "ORDER BY ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        if lookup:
            # the ids that exist: one descent of the primary key per row (stored_key)
            existing = (
                "existing AS (SELECT i.id FROM unnest(CAST(:ids AS text[])) AS i(id) "
                f"WHERE {self.stored_key(self.thread_key_parts('i.id'), tenant=':tenant')}), "
            )
            new_only = "WHERE NOT EXISTS (SELECT 1 FROM existing x WHERE x.id = i.id) "
            # no ON CONFLICT: under the lock ``existing`` is exact, and a speculative insertion
            # costs about a third of the statement; a row some other writer slipped in without
            # the lock fails the whole statement (unique violation), it never half-applies
            conflict = ""
        else:
            existing = new_only = ""
            conflict = "ON CONFLICT (tenant_id, resource_id, thread_id, id) DO NOTHING "
        if explicit:
            numbered = (
                # autos: how many new rows before this one take an automatic sequence
                "fresh AS (SELECT i.*, count(*) FILTER (WHERE i.sequence IS NULL) OVER w AS autos "
                f"FROM input i {new_only}WINDOW w AS ({before})), "
                # an automatic sequence is one past the largest so far: the thread's top or an
                # earlier explicit sequence, each plus the automatic rows in between
                "numbered AS (SELECT f.*, coalesce(f.sequence, f.autos + 1 + "
                "greatest(top.v, max(f.sequence - f.autos) OVER w)) AS seq FROM fresh f, top "
                f"WINDOW w AS ({before})), "
            )
        else:  # every row automatic, none left out (no lookup): its ordinal past the top
            numbered = "numbered AS (SELECT i.*, top.v + i.ord AS seq FROM input i, top), "
        returned = (
            "SELECT id, sequence FROM inserted"
            if explicit
            else "SELECT count(*) AS inserted, min(sequence) AS first FROM inserted"
        )
        columns = ", ".join(
            f"coalesce(u.{column}, CAST(:all_{param} AS {kind})) AS {column}"
            if uniform
            else f"u.{column}"
            for param, column, kind, uniform in INSERT_COLUMNS
        )
        arrays = ", ".join(f"CAST(:{param} AS {kind}[])" for param, _, kind, _ in INSERT_COLUMNS)
        names = ", ".join(column for _, column, _, _ in INSERT_COLUMNS)
        return (
            # one array per column -- or, for a column whose rows all hold one value, NULL and
            # that value (:func:`~prism_memory.postgres.rows.insert_params`)
            f"WITH input AS (SELECT {columns}, u.ord FROM unnest({arrays}) WITH ORDINALITY "
            f"AS u({names}, ord)), "
            f"{existing}"
            f"top AS (SELECT coalesce(max(sequence), -1) AS v FROM {self.entries} WHERE {scope}), "
            f"{numbered}"
            f"inserted AS (INSERT INTO {self.entries} (tenant_id, resource_id, thread_id, id, "
            "text, role, metadata, consent_explicit, consent_source, consent_scope, "
            "consent_visible, consent_granted_at, consent_revoked_at, sequence, occurred_at, "
            "created_at, written_at, importance, legal_hold, status, revision, attempts, "
            "claimed_by, claimed_until, embedding, embedding_model, window_embeddings, "
            "text_tsv, term_count) "
            "SELECT :tenant, :resource, :thread, n.id, n.text, n.role, n.metadata, "
            "n.consent_explicit, n.consent_source, n.consent_scope, n.consent_visible, "
            "n.consent_granted_at, n.consent_revoked_at, n.seq, n.occurred_at, "
            "CAST(:now AS timestamptz), CAST(:now AS timestamptz), n.importance, false, "
            "CASE WHEN n.embedding IS NULL THEN 'pending' ELSE 'indexed' END, 1, 0, "
            "CASE WHEN n.leased THEN CAST(:worker AS text) END, "
            "CASE WHEN n.leased THEN CAST(:until AS timestamptz) END, n.embedding, "
            "CASE WHEN n.embedding IS NOT NULL THEN CAST(:model AS text) END, "
            f"{windows_of('n.ord')}, "
            "array_to_tsvector(string_to_array(n.terms, ' ')), n.term_count "
            f"FROM numbered n ORDER BY n.ord {conflict}RETURNING id, sequence), "
            f"cleared AS (DELETE FROM {self.invalidation} WHERE {scope} "
            "AND entry_id IN (SELECT id FROM inserted)) "
            f"{returned}"
        )

    @functools.cached_property
    def known_keys(self) -> str:
        """Which ``(tenant, resource, thread, id)`` of the arrays exist (one primary-key descent
        each, :meth:`stored_key`); returns their ordinals (1-based)."""
        return (
            "SELECT k.ord FROM unnest(CAST(:tenants AS text[]), CAST(:resources AS text[]), "
            "CAST(:threads AS text[]), CAST(:ids AS text[])) WITH ORDINALITY "
            "AS k(tenant_id, resource_id, thread_id, id, ord) "
            f"WHERE {self.stored_key(self.key_of('k'))}"
        )

    @functools.cached_property
    def models_of(self) -> str:
        """The recorded models of the threads of the arrays (ordinal, model; one row per distinct
        pair), each thread read on its ``(scope, sequence)`` index range."""
        return (
            "SELECT DISTINCT k.ord, e.embedding_model FROM unnest(CAST(:tenants AS text[]), "
            "CAST(:resources AS text[]), CAST(:threads AS text[])) WITH ORDINALITY "
            f"AS k(tenant_id, resource_id, thread_id, ord) JOIN {self.entries} e "
            "ON e.tenant_id = k.tenant_id AND e.resource_id = k.resource_id "
            "AND e.thread_id = k.thread_id WHERE e.embedding_model IS NOT NULL"
        )

    @functools.cached_property
    def replace_text(self) -> str:
        """New text and its vector at once: revision + 1, indexed, ``written_at = now``."""
        return (
            f"UPDATE {self.entries} e SET text = :text, embedding = :embedding, "
            "embedding_model = CAST(:model AS text), "
            "window_embeddings = CAST(:window_embeddings AS vector[]), "
            "text_tsv = array_to_tsvector(CAST(:lexical_terms AS text[])), "
            "term_count = :term_count, "
            "revision = e.revision + 1, status = 'indexed', attempts = 0, last_error = NULL, "
            "next_attempt_at = NULL, claimed_by = NULL, claimed_until = NULL, written_at = :now "
            "WHERE e.tenant_id = :tenant AND e.resource_id = :resource AND e.thread_id = :thread "
            f"AND e.id = :id RETURNING {self.columns()}"
        )


def thread_lock_key(scope: MemoryIdentity) -> str:
    """The text :attr:`RowSql.lock_thread` hashes into the thread's advisory lock."""
    return "\x1f".join((scope.tenant_id, scope.resource_id, scope.thread_id))


def begin_locked_statement(scope: MemoryIdentity) -> str:
    """``BEGIN ISOLATION LEVEL READ COMMITTED`` and :attr:`RowSql.lock_thread` for ``scope`` as one
    simple-query message (one round trip; the lock key is inlined by :func:`thread_lock_literal`,
    so it hashes to the same lock as the bound form)."""
    return (
        "BEGIN ISOLATION LEVEL READ COMMITTED; "
        f"SELECT pg_advisory_xact_lock(hashtextextended({thread_lock_literal(scope)}, 0))"
    )


def thread_lock_literal(scope: MemoryIdentity) -> str:
    """:func:`thread_lock_key` as an escaped ``E''`` string literal (backslashes doubled, quotes
    doubled: the same text under any ``standard_conforming_strings``)."""
    key = thread_lock_key(scope).replace("\\", "\\\\").replace("'", "''")
    return f"E'{key}'"


def records_statement(
    tables: PrismTables, scope: MemoryIdentity, ids: Sequence[str]
) -> tuple[str, dict[str, Any]]:
    """:attr:`RowSql.records` and its bound values: the stored records of ``ids``."""
    return RowSql.for_tables(tables).records, {**scope_params(scope), "ids": list(ids)}
