"""Governance: consent, correction, forgetting, legal hold and retention sweeps.

Each change is one :class:`~prism_memory.stores.base.GovernanceChange` that the store applies
in one unit of work, lineage walk included; ``on_invalidate`` hears of it after the commit.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from ..errors import CapExceededError, LineageCapError, NotFoundError, ValidationError
from ..models import (
    IndexStatus,
    MemoryIdentity,
    MemoryRecord,
    RetentionResult,
    TombstoneReason,
    check_key,
    check_text,
)
from ..stores.base import (
    ClaimedEntry,
    ConsentUpdate,
    GovernanceChange,
    LineageWalk,
    every_record,
    walk_lineage,
)
from ..working import canonical_json
from .core import MemoryContext, ModelGuard, maybe_await

__all__ = ["MAX_RETENTION_DAYS", "GovernanceService", "check_days", "check_retention_rule"]

MAX_RETENTION_DAYS = 36_525
"""Ceiling of ``retention_days`` and ``max_age_days`` (100 years): larger windows would reach
before year 1, which no datetime can hold."""

logger = logging.getLogger("prism_memory.memory")


class GovernanceService:
    """:meth:`Memory.set_consent`, :meth:`~Memory.correct`, :meth:`~Memory.forget`,
    :meth:`~Memory.forget_before` and :meth:`~Memory.apply_retention` of one thread."""

    __slots__ = ("_ctx", "_models")

    def __init__(self, ctx: MemoryContext, models: ModelGuard) -> None:
        self._ctx = ctx
        self._models = models

    async def get(self, identity: MemoryIdentity, entry_id: str) -> MemoryRecord:
        """One stored entry, whatever its state; :class:`NotFoundError` if absent."""
        found = await self._ctx.backend.entries.get_entries(
            identity, [check_key(entry_id, "entry id")]
        )
        if not found:
            raise NotFoundError("no such entry in this thread")
        return found[0]

    async def index_status(self, wanted: Sequence[str]) -> dict[str, IndexStatus]:
        """``id -> pending | indexed | failed`` for the ``wanted`` ids the thread holds."""
        status = await self._ctx.backend.ledger.index_status(self._ctx.identity, wanted)
        return {entry_id: state for entry_id, (state, _) in status.items()}

    async def set_consent(
        self, entry_id: str, *, visible: bool | None, source: str | None, consent_scope: str | None
    ) -> MemoryRecord:
        """See :meth:`Memory.set_consent <prism_memory.memory.Memory.set_consent>`
        (``consent_scope``: its ``scope``, the use the consent allows)."""
        ctx = self._ctx
        identity = ctx.identity
        record = await self.get(identity, entry_id)
        now = ctx.clock()
        update = ConsentUpdate(
            entry_id=record.id,
            revoke_walk=self._walk([record.id], "revoked"),
            visible=visible,
            source=source,
            scope=consent_scope,
        )
        update.applied_to(record.effective_consent, now)  # a bad source or scope: nothing sent
        # the store decides revoke-or-grant against the consent it reads under the thread's lock
        change = GovernanceChange(consent_update=update)
        result = await ctx.backend.governance.apply_governance(identity, change, now=now)
        if result.walked:
            await self._notify([record.id, *result.dependents])
        assert result.record is not None
        return ctx.scrubbed(result.record)

    async def correct(self, entry_id: str, text: str) -> MemoryRecord:
        """See :meth:`Memory.correct <prism_memory.memory.Memory.correct>`."""
        ctx = self._ctx
        identity = ctx.identity
        record = await self.get(identity, entry_id)
        if not isinstance(text, str) or not text.strip():
            raise ValidationError("corrected text must be a non-empty string")
        check_text(text, "corrected text")
        clean = ctx.scrubber.text(text)
        payload = len(clean.encode()) + len(canonical_json(dict(record.metadata)).encode())
        if payload > ctx.limits.payload_bytes:
            raise CapExceededError(f"entry payload is {payload} bytes, over the cap")
        await self._models.check_write(identity)
        vector = await ctx.embed_entry(clean, "corrected embedding")  # fails before any write
        now = ctx.clock()
        change = GovernanceChange(
            walk=self._walk([record.id], "corrected"),
            text=(record.id, clean, vector),
            text_model=ctx.embedding_model,
        )
        result = await ctx.backend.governance.apply_governance(identity, change, now=now)
        corrected = result.record
        assert corrected is not None
        if ctx.next_writer is not None:  # the new text's vector of a migration's next model
            await ctx.next_writer.write(
                [
                    ClaimedEntry(
                        scope=identity,
                        id=corrected.id,
                        revision=corrected.revision,
                        text=corrected.text,
                        attempts=0,
                    )
                ]
            )
        await self._notify(result.dependents)
        return ctx.scrubbed(corrected)

    def _walk(
        self, roots: Sequence[str], reason: TombstoneReason, *, delete: bool = False
    ) -> LineageWalk:
        """The lineage walk the store runs inside the governance call (this memory's caps)."""
        return LineageWalk(
            roots=tuple(roots),
            reason=reason,
            max_depth=self._ctx.limits.lineage_depth,
            max_entries=self._ctx.limits.lineage_edges,
            delete_dependents=delete,
        )

    async def _notify(self, affected: Sequence[str]) -> None:
        """Tell ``on_invalidate`` about a committed change; its failure cannot undo the change.

        The hook's exception is logged and re-raised: the caller learns of it, and the data change
        (already committed) stands.
        """
        hook = self._ctx.on_invalidate
        if hook is None or not affected:
            return
        try:
            await maybe_await(hook(list(affected)))
        except Exception:
            logger.exception("on_invalidate failed after the change was committed")
            raise

    # ---- deletion ----------------------------------------------------------------------------

    async def forget(self, wanted: Sequence[str] | None, *, hold: bool) -> int:
        """See :meth:`Memory.forget <prism_memory.memory.Memory.forget>` (``wanted``: the checked
        ids, ``None`` for the whole thread)."""
        ctx = self._ctx
        identity = ctx.identity
        store = ctx.backend.entries
        if wanted is None:
            targets = [
                record.id
                async for record in every_record(store, identity)
                if hold or not record.legal_hold
            ]
        else:
            targets = [r.id for r in await store.get_entries(identity, wanted)]
        if not targets:
            return 0
        now = ctx.clock()
        if hold:
            change = GovernanceChange(walk=self._walk(targets, "held"), hold=tuple(targets))
            result = await ctx.backend.governance.apply_governance(identity, change, now=now)
            await self._notify([*targets, *result.dependents])
            return 0
        if wanted is not None and len(targets) > ctx.limits.delete_batch:
            # named ids over several batches: all-or-nothing, so check every lineage cap first
            # (one batch is checked by the store itself, before it changes anything)
            walk = self._walk(targets, "forgotten")
            await walk_lineage(
                lambda batch, limit: store.dependents(identity, batch, limit=limit),
                targets,
                max_depth=walk.max_depth,
                max_entries=walk.max_entries,
            )
        deleted, blocked = await self._delete(identity, targets, "forgotten", now)
        _raise_blocked(deleted, blocked)
        return deleted

    async def _delete(
        self, identity: MemoryIdentity, roots: Sequence[str], reason: TombstoneReason, now: datetime
    ) -> tuple[int, list[str]]:
        """Delete ``roots`` and their dependents, one transaction per batch of roots.

        A batch whose lineage is over the caps is retried root by root; roots still over the caps
        are left in place and returned as blocked, so one wide source never stops a sweep.
        """
        deleted = 0
        blocked: list[str] = []
        hook_error: Exception | None = None
        step = self._ctx.limits.delete_batch
        batches = [list(roots[i : i + step]) for i in range(0, len(roots), step)]
        while batches:
            batch = batches.pop(0)
            # a derived entry under legal hold stays, excluded by its own tombstone
            change = GovernanceChange(
                walk=self._walk(batch, reason, delete=True), delete=tuple(batch)
            )
            try:
                result = await self._ctx.backend.governance.apply_governance(
                    identity, change, now=now
                )
            except CapExceededError:
                if len(batch) == 1:
                    blocked.extend(batch)
                else:
                    batches[:0] = [[root] for root in batch]
                continue
            deleted += result.deleted
            try:
                await self._notify([*batch, *result.dependents])
            except Exception as exc:  # noqa: BLE001 - the sweep goes on; re-raised below
                hook_error = hook_error or exc
        if hook_error is not None:
            raise hook_error
        return deleted, blocked

    async def forget_before(self, occurred_before: datetime) -> int:
        """See :meth:`Memory.forget_before <prism_memory.memory.Memory.forget_before>`."""
        ctx = self._ctx
        identity = ctx.identity
        total = 0
        blocked: list[str] = []
        while True:
            page = await ctx.backend.entries.list_oldest(
                identity,
                limit=ctx.limits.delete_batch * 4 + len(blocked),
                occurred_before=occurred_before,
                include_held=False,
            )
            due = [r.id for r in page if r.id not in blocked]
            if not due:
                _raise_blocked(total, blocked)
                return total
            deleted, stuck = await self._delete(identity, due, "forgotten", ctx.clock())
            total += deleted
            blocked.extend(stuck)

    async def apply_retention(
        self, days: float | None, max_entries: int | None, batch: int
    ) -> RetentionResult:
        """See :meth:`Memory.apply_retention <prism_memory.memory.Memory.apply_retention>`
        (``days``: the checked age window, ``batch``: the resolved ``batch_size``)."""
        ctx = self._ctx
        store = ctx.backend.entries
        identity = ctx.identity
        now = ctx.clock()
        scanned = await store.list_oldest(identity, limit=batch)
        deletable = [r for r in scanned if not r.legal_hold]
        doomed: list[str] = []
        if days is not None:
            cutoff = now - timedelta(days=days)
            doomed = [r.id for r in deletable if r.occurred_at < cutoff]
        if max_entries is not None:
            overflow = await store.count_by_thread(identity) - max_entries
            for record in deletable:
                if len(doomed) >= overflow:
                    break
                if record.id not in doomed:
                    doomed.append(record.id)
        deleted, blocked = await self._delete(identity, doomed, "retention", now)
        return RetentionResult(deleted=deleted, scanned=len(scanned), blocked=tuple(blocked))


def check_days(days: object, name: str) -> float:
    """``days`` (``retention_days``, ``max_age_days``) as a positive number of days, at most
    :data:`MAX_RETENTION_DAYS`."""
    if (
        isinstance(days, bool)
        or not isinstance(days, int | float)
        or not days > 0
        or not math.isfinite(days)
    ):
        raise ValidationError(f"{name} must be a positive number")
    if days > MAX_RETENTION_DAYS:
        raise CapExceededError(f"{name} is over the ceiling {MAX_RETENTION_DAYS}")
    return days


def check_retention_rule(
    max_age_days: float | None, max_entries: int | None, retention: timedelta | None
) -> float | None:
    """The age window of :meth:`Memory.apply_retention <prism_memory.memory.Memory.apply_retention>`
    (``max_age_days``, else the memory's ``retention``), with ``max_entries`` checked: at least
    one rule, else :class:`ValidationError`."""
    default = None if retention is None else retention / timedelta(days=1)
    days = max_age_days if max_age_days is not None else default
    if days is not None:
        days = check_days(days, "max_age_days")
    if max_entries is not None and (
        isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0
    ):
        raise ValidationError("max_entries must be a non-negative integer")
    if days is None and max_entries is None:
        raise ValidationError(
            "no retention rule: pass max_age_days/max_entries or set retention_days"
        )
    return days


def _raise_blocked(deleted: int, blocked: Sequence[str]) -> None:
    if blocked:
        raise LineageCapError(
            f"deleted {deleted} entries; {len(blocked)} were left because their lineage is over "
            "the caps (their ids are in .blocked)",
            deleted=deleted,
            blocked=tuple(blocked),
        )
