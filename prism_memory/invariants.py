"""Invariant scorer bodies for evaluation harnesses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .context import ContextBlock
from .models import ExportPage, MemoryRecord, RecallHit, RecallResult

__all__ = ["InvariantScore", "revoked_ids_absent"]


@dataclass(frozen=True, slots=True)
class InvariantScore:
    """A scorer result. ``metadata["invariant"]`` is true: a 0 must not be averaged away."""

    score: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


def _ids_in(environment: object) -> set[str]:
    """Every entry id an environment exposes (recall results, blocks, export pages, records)."""
    if isinstance(environment, RecallResult):
        return {h.id for h in environment.hits} | {r.id for r in environment.adjacent}
    if isinstance(environment, ExportPage):
        return {str(entry["id"]) for entry in environment.entries}
    if isinstance(environment, ContextBlock):
        return set(environment.entry_ids)
    if isinstance(environment, RecallHit | MemoryRecord):
        return {environment.id}
    if isinstance(environment, str):
        return {environment}
    if isinstance(environment, Mapping):
        return {str(environment["id"])} if "id" in environment else set()
    if isinstance(environment, Iterable):
        found: set[str] = set()
        for item in environment:
            found |= _ids_in(item)
        return found
    return set()


def revoked_ids_absent(environment: object, denied_ids: Iterable[str]) -> InvariantScore:
    """Score 1.0 when none of ``denied_ids`` appears in ``environment``, else 0.0.

    ``environment`` is what reached (or could reach) a prompt or a caller: a
    :class:`~prism_memory.RecallResult`, context blocks, an export page, records, hits, ids, or an
    iterable of those. The result is marked ``invariant`` so a harness must not average a 0 away.
    """
    denied = {str(i) for i in denied_ids}
    leaked = sorted(_ids_in(environment) & denied)
    return InvariantScore(
        score=0.0 if leaked else 1.0,
        metadata={"invariant": True, "leaked": leaked, "checked": len(denied)},
    )
