"""Adapter helpers: the argument checks every store applies alike (re-exported by
:mod:`prism_memory.stores.base`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ValidationError
from ..models import Vector
from ._records import NewEntry


def check_limit(limit: int, name: str = "limit") -> None:
    """Adapter helper: a ``limit`` argument must be a non-negative integer."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValidationError(f"{name} must be a non-negative integer")


def check_entry_vectors(entries: Sequence[object], vectors: Sequence[Any] | Vector | None) -> None:
    """Adapter helper: ``put_entries``'s ``vectors``, when given, hold one vector per entry."""
    if vectors is not None and len(vectors) != len(entries):
        raise ValidationError(f"{len(vectors)} vectors for {len(entries)} entries")


def check_lease(lease_seconds: float) -> None:
    """Adapter helper: a lease must last a positive time."""
    if not lease_seconds > 0:
        raise ValidationError("lease_seconds must be positive")


def check_claim(limit: int, lease_seconds: float, per_scope: int | None = None) -> None:
    """Adapter helper: the arguments of ``claim_pending`` (and, with ``per_scope``,
    ``claim_pending_in``) -- non-negative counts and a lease of positive length."""
    check_limit(limit)
    if per_scope is not None:
        check_limit(per_scope, "per_scope")
    check_lease(lease_seconds)


def lineage_source_ids(entries: Sequence[NewEntry]) -> list[str]:
    """Every lineage source ``entries`` name: the ids a store looks up in the thread, in the same
    unit of work as the write (:func:`check_lineage_sources`, and the tombstones new rows
    inherit, :func:`~prism_memory.stores.rules.inherited_tombstones`)."""
    return sorted({s for e in entries if e.lineage is not None for s in e.lineage.source_ids})


def check_lineage_sources(entries: Sequence[NewEntry], known: set[str]) -> None:
    """Adapter helper: every lineage source of ``entries`` is among them or in ``known`` (the ids
    of :func:`lineage_source_ids` the thread holds); else :class:`~prism_memory.errors.ValidationError`
    naming the entry's position, never the id, and nothing may be written."""
    batch = {entry.id for entry in entries}
    for position, entry in enumerate(entries):
        if entry.lineage is not None and any(
            s not in batch and s not in known for s in entry.lineage.source_ids
        ):
            raise ValidationError(
                f"entries[{position}]: lineage names an entry unknown in this thread"
            )
