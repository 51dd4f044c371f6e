"""The governance role of the store contract: :class:`GovernanceStore`. Re-exported by
:mod:`prism_memory.stores.base`.
"""

from __future__ import annotations

import abc
from datetime import datetime

from ..models import MemoryIdentity
from ._governance import GovernanceChange, GovernanceResult

__all__ = ["GovernanceStore"]


class GovernanceStore(abc.ABC):
    """Governance: consent, correction, forgetting and legal hold, one change at a time.

    One abstract method, :meth:`apply_governance`. An adapter without transactions may take it
    from :class:`~prism_memory.stores.primitives.GovernancePrimitives` instead, by writing six
    smaller primitives.
    """

    @abc.abstractmethod
    async def apply_governance(
        self, scope: MemoryIdentity, change: GovernanceChange, *, now: datetime
    ) -> GovernanceResult:
        """Apply ``change`` all-or-nothing, in one unit of work serialised with the thread's
        writes (:meth:`put_entries`); :class:`~prism_memory.errors.NotFoundError` (nothing
        changed) if its ``consent`` or ``text`` entry is absent.

        The one write path of every governance call (forget, hold, consent, correct): resolve the
        change with :func:`expand_walk` -- its lineage walk and its consent update, read in that
        same unit of work -- then, in :class:`GovernanceChange`'s order, add its tombstones
        (keyed by ``(entry_id, cause_id, reason)``, an existing one takes the new time), replace
        the ``consent`` (no re-embed) or the ``text`` with its vector (revision + 1, ``indexed``,
        ``written_at = now``, ``text_model`` as its ``embedding_model``; consent, lineage,
        sequence and metadata kept), set legal hold on ``hold``, delete ``delete``, and remove
        the tombstones ``untombstone`` names. Return :class:`GovernanceResult` with the changed
        record, the counts and the walk's dependents (``walked``: a walk ran).
        """
