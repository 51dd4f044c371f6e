"""The private services behind the :class:`~prism_memory.memory.Memory` facade, one per concern.

``Memory`` checks a call's arguments and delegates here; every service shares one frozen
:class:`~prism_memory._memory.core.MemoryContext` (scope, stores, embedder, limits, scrubber, clock,
policy, hooks). Data flows one way: facade -> service -> store contract; nothing here imports the
facade, the CLI or ``postgres/``.

* ``core``: the context, the scrubbing of records and errors, the embedding-model guard.
* ``session``: this memory's place in the indexing queue (join, ``done`` futures, drain on close).
* ``working_memory``: the working-memory document.
* ``remember``: redaction, caps, ids, importance, and the one hand-over of a write to the queue.
* ``recall``: search, re-rank, neighbours, model checks of what is ranked; the context provider.
* ``governance``: consent, correction, forgetting, legal hold, retention sweeps.
* ``sharing``: share grants between threads.
* ``export``: export pages and re-indexing.
"""
