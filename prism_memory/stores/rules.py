"""The exclusion rules of recall, stated once in Python.

SQL backends translate :func:`is_recallable` into their query; the in-memory store calls it. The
conformance suite proves both agree.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..models import MemoryRecord
from .base import RecallFilter, Tombstone

__all__ = ["invalidates", "is_recallable", "is_visible"]


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


def is_recallable(
    record: MemoryRecord,
    recall_filter: RecallFilter,
    source_tombstones: Iterable[Tombstone] = (),
) -> bool:
    """Whether ``record`` may be recalled, injected or shown as adjacent.

    ``source_tombstones`` are the tombstones whose ``entry_id`` is one of the record's lineage
    sources (in the record's own thread).
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
    return not any(invalidates(tombstone, record) for tombstone in source_tombstones)
