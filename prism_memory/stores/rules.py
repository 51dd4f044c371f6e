"""The exclusion rules of recall and the governance invariants, stated once.

SQL backends translate :func:`is_recallable` into their query; the in-memory store calls it. The
conformance suite proves both agree.

Governance invariants every backend keeps (``docs/semantics.md`` states the same, one line each):

1. A re-put of an existing id changes nothing: not consent, text, ``occurred_at``, lineage or any
   other field (a retry or replay cannot undo ``set_consent``, ``correct``, a hold or time).
2. A governance call (correct, revoke, grant, hold, forget) is all-or-nothing: its tombstones and
   its data change commit together (:meth:`~prism_memory.stores.base.VectorStore.apply_governance`).
3. An entry is excluded by its own tombstone, not only by its sources' (fail closed).
4. Tombstones of different causes and reasons coexist; a re-grant removes only its own.
5. A new entry reusing a forgotten id starts without the old id's tombstones, and lineage may only
   name entries that exist.
6. The host's ``on_invalidate`` hook runs after the change is committed; its failure cannot undo or
   block it.
7. No entry derived from a forgotten, revoked or corrected source is ever recallable, now or after
   any later call: a write's lineage check (:meth:`~prism_memory.stores.base.VectorStore.put_entries`)
   and a governance call's lineage walk (:class:`~prism_memory.stores.base.LineageWalk`) run inside
   the unit of work that applies them, serialised per thread, and a new entry inherits the
   tombstones on its sources that invalidate it (:func:`inherited_tombstones`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..models import MemoryRecord
from .base import RecallFilter, Tombstone

__all__ = [
    "TRAVELLING_SCOPES",
    "inherited_tombstones",
    "invalidates",
    "is_recallable",
    "is_visible",
    "travels",
]

TRAVELLING_SCOPES = frozenset({"user", "profile"})
"""Consent scopes whose entries a resource-wide recall reaches from the resource's other threads."""


def travels(record: MemoryRecord) -> bool:
    """Whether ``record`` may be recalled from other threads of its tenant + resource (when the
    caller asks for a resource-wide recall): its effective consent scope is ``user`` or
    ``profile``. A ``thread`` entry (the default) never leaves its thread."""
    return record.effective_consent.scope in TRAVELLING_SCOPES


def is_visible(record: MemoryRecord, *, require_consent: bool) -> bool:
    """Consent part of the rules: visible, not revoked, explicit when required, not on legal hold."""
    if require_consent and record.consent is None:
        return False
    consent = record.effective_consent
    return consent.visible and consent.revoked_at is None and not record.legal_hold


def invalidates(tombstone: Tombstone, record: MemoryRecord) -> bool:
    """Whether ``tombstone`` (on one of ``record``'s lineage sources) invalidates ``record``."""
    if tombstone.reason == "corrected":
        return tombstone.created_at > record.written_at
    return True


def inherited_tombstones(
    records: Sequence[MemoryRecord], stored: Mapping[str, Iterable[Tombstone]]
) -> list[Tombstone]:
    """The tombstones the new ``records`` take over from their lineage sources when written.

    A new entry gets, as its own, a copy of every tombstone on one of its sources that
    invalidates it (:func:`invalidates`): ``stored`` holds the tombstones of sources already in
    the thread, and sources among ``records`` pass on what they inherit themselves. So an entry
    derived from an entry that a revocation, hold or correction excludes stays excluded however
    long the chain grows after the call (each tombstone keeps its cause: a re-grant lifts the
    copies with the originals).
    """
    new = {record.id: record for record in records}
    marks: dict[str, dict[tuple[str, str], Tombstone]] = {}
    grew = True
    while grew:  # a source later in ``records`` may pass marks on to one before it
        grew = False
        for record in records:
            own = marks.setdefault(record.id, {})
            for source in record.lineage.source_ids if record.lineage else ():
                passed = marks.get(source, {}).values() if source in new else stored.get(source, ())
                for tombstone in passed:
                    key = (tombstone.cause_id, tombstone.reason)
                    if key not in own and invalidates(tombstone, record):
                        own[key] = Tombstone(
                            record.id, tombstone.cause_id, tombstone.reason, tombstone.created_at
                        )
                        grew = True
    return [tombstone for own in marks.values() for tombstone in own.values()]


def is_recallable(
    record: MemoryRecord,
    recall_filter: RecallFilter,
    source_tombstones: Iterable[Tombstone] = (),
    own_tombstones: Iterable[Tombstone] = (),
) -> bool:
    """Whether ``record`` may be recalled, injected or shown as adjacent.

    ``source_tombstones`` are the tombstones whose ``entry_id`` is one of the record's lineage
    sources (in the record's own thread); ``own_tombstones`` those whose ``entry_id`` is the
    record's id. Both exclude by the same rule (:func:`invalidates`).
    """
    if record.status != "indexed":
        return False
    if not is_visible(record, require_consent=recall_filter.require_consent):
        return False
    if (
        recall_filter.occurred_after is not None
        and record.occurred_at < recall_filter.occurred_after
    ):
        return False
    if any(invalidates(tombstone, record) for tombstone in own_tombstones):
        return False
    return not any(invalidates(tombstone, record) for tombstone in source_tombstones)
