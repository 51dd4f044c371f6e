"""Governance changes and the lineage walk a store resolves inside its unit of work
(re-exported by :mod:`prism_memory.stores.base`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .._windowed import OwnVector
from ..errors import CapExceededError, NotFoundError
from ..models import (
    MemoryConsent,
    MemoryRecord,
    TombstoneReason,
    check_id_collection,
    parse,
)
from ._records import Tombstone


@dataclass(frozen=True, slots=True)
class LineageWalk:
    """Tombstone ``roots`` and their transitive lineage dependents with ``reason``.

    The store finds the dependents *inside* the unit of work that applies the change, serialised
    with the thread's writes (:meth:`VectorStore.put_entries` checks lineage under the same
    serialisation), so an entry derived from a root while the call runs is either seen and
    tombstoned or refused. More than ``max_depth`` levels or ``max_entries`` dependents raise
    :class:`~prism_memory.errors.CapExceededError` and nothing changes.
    """

    roots: tuple[str, ...]
    reason: TombstoneReason
    max_depth: int
    max_entries: int
    delete_dependents: bool = False
    """Also delete the dependents, except those under legal hold (their tombstone excludes them)."""


@dataclass(frozen=True, slots=True)
class ConsentUpdate:
    """Change one entry's consent, decided against the entry as stored inside the unit of work.

    The store reads the entry in the unit of work that applies the change (serialised with the
    thread's writers) and :func:`expand_walk` applies ``visible``, ``source`` and ``scope`` to the
    consent in force *there*: revoking an entry whose consent was in force runs ``revoke_walk``
    (tombstoning it and its dependents); granting one that was revoked removes the ``revoked``
    tombstones it caused. Decided from a read taken before the transaction, a revoke racing a
    grant (or a provenance change racing either) could store a revoked consent after the grant
    had lifted the tombstones, and the entry's dependents would be recallable again.
    """

    entry_id: str
    revoke_walk: LineageWalk
    """The walk a revocation runs (its roots: this entry), with the memory's caps."""
    visible: bool | None = None
    source: str | None = None
    scope: str | None = None

    def applied_to(self, current: MemoryConsent, now: datetime) -> MemoryConsent:
        """``current`` with this update: a revoke stamps ``revoked_at``, a grant ``granted_at``.

        :class:`~prism_memory.errors.ValidationError` (naming the field) for a bad source or scope.
        """
        changes: dict[str, Any] = {}
        if self.source is not None:
            changes["source"] = self.source
        if self.scope is not None:
            changes["scope"] = self.scope
        if self.visible is False:
            changes.update(visible=False, revoked_at=now)
        elif self.visible is True:
            changes.update(visible=True, revoked_at=None, granted_at=now)
        return parse(MemoryConsent, {**current.model_dump(), **changes}, "consent")


@dataclass(frozen=True, slots=True)
class GovernanceChange:
    """The whole effect of one governance call, which a store applies all-or-nothing.

    Applied in this order inside one unit of work: find ``walk``'s dependents, add ``tombstones``
    (and the walk's), change ``consent`` or ``text`` of one entry, set legal hold on ``hold``,
    delete ``delete`` (and the walk's dependents to delete), then remove the tombstones
    ``untombstone = (cause_id, reason)`` caused (a re-grant).
    """

    walk: LineageWalk | None = None
    tombstones: tuple[Tombstone, ...] = ()
    consent: tuple[str, MemoryConsent] | None = None
    """``(entry_id, consent)``: replace that entry's consent (no re-embed)."""
    consent_update: ConsentUpdate | None = None
    """A consent change :func:`expand_walk` resolves into ``consent``, and ``walk`` or
    ``untombstone``, against the entry as the unit of work reads it."""
    text: tuple[str, str, OwnVector] | None = None
    """``(entry_id, text, vector)``: set new text and its vector at once (revision + 1,
    ``indexed``, ``written_at = now``), as :meth:`GovernancePrimitives.replace_text
    <prism_memory.stores.primitives.GovernancePrimitives.replace_text>`."""
    text_model: str | None = None
    """The ``model`` of the embedder that made ``text``'s vector (its ``embedding_model``)."""
    hold: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    untombstone: tuple[str, TombstoneReason] | None = None


@dataclass(frozen=True, slots=True)
class GovernanceResult:
    """What :meth:`VectorStore.apply_governance` changed."""

    record: MemoryRecord | None
    """The entry whose consent or text changed, as stored afterwards."""
    held: int = 0
    deleted: int = 0
    dependents: tuple[str, ...] = ()
    """The lineage dependents ``walk`` found (and tombstoned), for ``on_invalidate``."""
    walked: bool = False
    """The change's lineage walk ran (a consent update revokes only an entry whose consent was in
    force): ``on_invalidate`` is told about its roots and ``dependents``."""

    @classmethod
    def after_walk(
        cls,
        record: MemoryRecord | None,
        *,
        held: int,
        deleted: int,
        dependents: tuple[str, ...] | None,
    ) -> GovernanceResult:
        """The result of a change whose walk found ``dependents`` (``None``: no walk ran), as
        :func:`expand_walk` returns them."""
        return cls(
            record=record,
            held=held,
            deleted=deleted,
            dependents=dependents or (),
            walked=dependents is not None,
        )


DependentsOf = Callable[[Sequence[str], int], Awaitable[list[tuple[str, tuple[str, ...]]]]]
"""``(source_ids, limit) -> [(id, sources)]``, as :meth:`VectorStore.dependents` in one scope."""


async def walk_lineage(
    dependents_of: DependentsOf, roots: Sequence[str], *, max_depth: int, max_entries: int
) -> dict[str, str]:
    """Transitive lineage dependents of ``roots``: ``dependent id -> root that caused it``.

    :class:`~prism_memory.errors.CapExceededError` past ``max_depth`` levels or ``max_entries``
    dependents. Stores call it inside their unit of work (see :class:`LineageWalk`).
    """
    cause: dict[str, str] = {root: root for root in roots}
    frontier = list(roots)
    found: dict[str, str] = {}
    for depth in range(max_depth + 1):
        if not frontier:
            break
        # room for every already-seen row plus one more fresh row than the cap allows
        rows = await dependents_of(frontier, max_entries + len(cause) + 1)
        fresh = [(dep, sources) for dep, sources in rows if dep not in cause]
        if not fresh:
            break
        if depth == max_depth:
            raise CapExceededError(f"lineage is deeper than {max_depth}; nothing was changed")
        frontier = []
        for dep, sources in fresh:
            origin = next((cause[s] for s in sources if s in cause), roots[0])
            cause[dep] = found[dep] = origin
            frontier.append(dep)
        if len(found) > max_entries:
            raise CapExceededError(
                f"lineage touches over {max_entries} entries; nothing was changed"
            )
    return found


async def expand_walk(
    change: GovernanceChange,
    dependents_of: DependentsOf,
    records_of: Callable[[Sequence[str]], Awaitable[list[MemoryRecord]]],
    now: datetime,
) -> tuple[GovernanceChange, tuple[str, ...] | None]:
    """``change`` made plain: its ``consent_update`` and ``walk`` resolved into a consent, plain
    tombstones, deletes and tombstone removal; and the dependents the walk found (``None``: no
    walk ran, see :attr:`GovernanceResult.walked`).

    A store calls it inside the unit of work that applies the change (``dependents_of`` and
    ``records_of`` read through that unit of work): a consent update is decided against the entry
    as read there (:class:`~prism_memory.errors.NotFoundError` if it is absent), each root is
    tombstoned by itself, each dependent by the root that caused it, and with
    ``delete_dependents`` the dependents not under legal hold join ``delete``. A ``hold`` or
    ``delete`` that is not a collection of ids (a bare ``str``) raises
    :class:`~prism_memory.errors.ValidationError` before anything is read.
    """
    check_id_collection(change.hold, "hold")
    check_id_collection(change.delete, "delete")
    update = change.consent_update
    if update is not None:
        change = await _resolve_consent(change, update, records_of, now)
    walk = change.walk
    if walk is None:
        return change, None
    found = await walk_lineage(
        dependents_of, walk.roots, max_depth=walk.max_depth, max_entries=walk.max_entries
    )
    marks = [Tombstone(root, root, walk.reason, now) for root in walk.roots]
    marks += [Tombstone(dep, origin, walk.reason, now) for dep, origin in found.items()]
    delete = change.delete
    if walk.delete_dependents and found:
        held = {r.id for r in await records_of(list(found)) if r.legal_hold}
        delete = (*delete, *(dep for dep in found if dep not in held))
    expanded = replace(change, walk=None, tombstones=(*change.tombstones, *marks), delete=delete)
    return expanded, tuple(found)


async def _resolve_consent(
    change: GovernanceChange,
    update: ConsentUpdate,
    records_of: Callable[[Sequence[str]], Awaitable[list[MemoryRecord]]],
    now: datetime,
) -> GovernanceChange:
    """``change`` with ``update`` decided against the stored entry (see :class:`ConsentUpdate`)."""
    stored = await records_of([update.entry_id])
    if not stored:
        raise NotFoundError("the entry does not exist in this scope")
    current = stored[0].effective_consent
    consent = update.applied_to(current, now)
    change = replace(change, consent_update=None, consent=(update.entry_id, consent))
    was_active = current.visible and current.revoked_at is None
    if update.visible is False and was_active:
        return replace(change, walk=update.revoke_walk)
    if update.visible is True and not was_active:
        return replace(change, untombstone=(update.entry_id, "revoked"))
    return change
