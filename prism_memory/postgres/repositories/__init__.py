"""Async repositories over prism_memory's tables: the one API the stores call for their tables,
hot paths included.

A repository is given the store's :class:`~prism_memory.postgres._executor.Executor` -- then each
call is a unit of work of its own, on the asyncpg driver for a named statement or in a session for
a Core/ORM one, as the executor decides -- or a unit the caller opened
(:class:`~prism_memory.postgres._executor.SessionUnit`,
:class:`~prism_memory.postgres._executor.DriverUnit`) -- then each call runs inside it, and the
caller commits. A repository never commits, and never executes around the executor.

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
  Core statements over the Core table; remember's insert and the bulk import, recall's search and
  neighbours, lineage, text replacement, claims and vector writes run the named statements of
  :mod:`prism_memory.postgres.statements`, with bound parameters. Rows become records in
  :mod:`prism_memory.postgres.rows`. :class:`GenerationRepository` (:mod:`.generations`) runs the
  vector generations' named statements the same way.
"""

from __future__ import annotations

from .entries import EntryRepository, TombstoneRepository
from .generations import GenerationRepository
from .indexing import IndexingRepository
from .mapped import ShareGrantRepository, WorkingRepository

__all__ = [
    "EntryRepository",
    "GenerationRepository",
    "IndexingRepository",
    "ShareGrantRepository",
    "TombstoneRepository",
    "WorkingRepository",
]
