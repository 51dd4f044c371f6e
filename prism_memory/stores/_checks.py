"""Adapter helpers: the argument checks every store applies alike (re-exported by
:mod:`prism_memory.stores.base`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ValidationError
from ..models import Vector
from ._records import NewEntry

MAX_SWITCH_LAG_SECONDS = 3600.0
"""The largest ``max_lag_seconds`` of :meth:`~prism_memory.stores.base.VectorGenerations.switch_generation`."""


def check_max_lag(max_lag_seconds: object) -> float:
    """Adapter helper: ``switch_generation``'s ``max_lag_seconds``, a finite number of seconds
    from 0 to :data:`MAX_SWITCH_LAG_SECONDS`."""
    if (
        isinstance(max_lag_seconds, bool)
        or not isinstance(max_lag_seconds, int | float)
        or not math.isfinite(max_lag_seconds)
        or not 0 <= max_lag_seconds <= MAX_SWITCH_LAG_SECONDS
    ):
        raise ValidationError(
            f"max_lag_seconds must be a number of seconds from 0 to {MAX_SWITCH_LAG_SECONDS:g}"
        )
    return float(max_lag_seconds)


def not_ready_message(missing: int, recent: int, max_lag_seconds: float) -> str:
    """Adapter helper: the message of the
    :class:`~prism_memory.errors.GenerationNotReadyError` a refused switch raises."""
    if not max_lag_seconds:
        return (
            f"{missing} indexed entries have no vector of the model at their current revision: "
            "run the backfill to its end, or force the switch"
        )
    return (
        f"{missing} indexed entries written over {max_lag_seconds:g} s ago have no vector of the "
        f"model at their current revision ({recent} written since have none either, within the "
        "lag allowed): run the backfill (with --follow it keeps up with writers), or force the "
        "switch"
    )


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
