"""Async repositories over prism_memory's tables.

A repository is *given* an :class:`~sqlalchemy.ext.asyncio.AsyncSession` and the tables; it builds
statements and executes them, and never commits: the unit of work (``async with session.begin()``)
belongs to the adapter one layer up (:mod:`prism_memory.postgres.store`). The hot writes and reads
do not come here at all: remember's batch insert, the bulk import, recall's search and neighbours
(on engines prism_memory made) and the claims run on the asyncpg driver
(:mod:`prism_memory.postgres._adapter`).

Two styles, chosen per path:

* **ORM, where it is natural and not a hot path** (:mod:`.mapped`, and the tombstones).
  :class:`WorkingRepository`, :class:`ShareGrantRepository` and :class:`TombstoneRepository` go
  through the typed mapped classes of the table set (``tables.orm.WorkingMemory``,
  ``.ShareGrant``, ``.Tombstone``; see :mod:`prism_memory.postgres.orm`): ``session.get`` by
  primary key; ORM-enabled ``insert ... on_conflict``, ``update`` and ``delete`` on the mapped
  class, rows returned as mapped objects (``RETURNING``, ``populate_existing``). Writes stay single
  statements -- upserts, and the working document's conditional ``UPDATE ... WHERE version =
  :expected`` -- so concurrent writers neither collide nor lose updates.
* **Core statements and named SQL** (:mod:`.entries`, :mod:`.indexing`). :class:`EntryRepository`
  and :class:`IndexingRepository` never build ORM objects: updates, deletes and reads by key are
  Core statements over the Core table; text replacement, dependents, the lineage lock, vector
  writes and the session path of recall execute the named statements of
  :mod:`prism_memory.postgres.statements`, with bound parameters. Rows become records in
  :mod:`prism_memory.postgres.rows`.
"""

from __future__ import annotations

from .entries import EntryRepository, TombstoneRepository
from .indexing import IndexingRepository
from .mapped import ShareGrantRepository, WorkingRepository

__all__ = [
    "EntryRepository",
    "IndexingRepository",
    "ShareGrantRepository",
    "TombstoneRepository",
    "WorkingRepository",
]
