"""A LangGraph store over prism_memory: :class:`PrismStore` (extra ``langgraph``).

``PrismStore`` is a ``langgraph.store.base.BaseStore``: pass it as ``store=`` to
``create_react_agent`` or ``builder.compile(store=...)``. ``PrismStore()`` keeps items in memory,
``PrismStore(index=...)`` takes LangGraph's ``IndexConfig`` exactly as ``InMemoryStore(index=...)``
does, and ``PrismStore.from_conn_string(url)`` is an async context manager on PostgreSQL (call
``await store.setup()`` once), as ``AsyncPostgresStore.from_conn_string`` is.

How LangGraph's model maps onto prism_memory's
----------------------------------------------
* The store is bound to **one tenant** (``tenant_id``) and one **resource** (``resource_id``): it
  never reads or writes another tenant's rows, whatever namespace a caller names.
* A **namespace** is one prism **thread**: ``("users", "u1", "memories")`` is the thread
  ``"users.u1.memories"`` (labels cannot hold ``.``, so the mapping is one-to-one). Isolation
  between namespaces is prism's per-thread isolation; a search over a namespace *prefix* reads the
  threads under it one by one, because that is what LangGraph asks for. Each namespace's search is
  exact (every item of the thread is scored; nothing is cut before the filter).
* An **item** is one semantic-memory entry of that thread: its ``id`` is the item's key, its text
  is the value as JSON (so export and recall show it). Each text the fields of
  ``IndexConfig.fields`` (or ``index=[...]`` on the put) pick out gets a vector: the entry's own
  is the first text's, the others are kept in its metadata (so governance covers them), and a
  search scores the item by its best, as LangGraph's stores do. An item put with ``ttl`` (or
  under ``TTLConfig.default_ttl``) keeps its expiry in its metadata and is never returned once
  expired; ``sweep_ttl`` deletes it through prism's forget. The entry's
  ``created_at`` and ``written_at`` are the item's ``created_at`` and ``updated_at``. A value must
  be JSON (else :class:`~prism_memory.ValidationError`) within ``Limits.payload_bytes`` (else
  :class:`~prism_memory.CapExceededError`), and is scrubbed by the store's ``secrets`` and
  ``redactor`` before it is embedded or stored; an entry whose text is not a JSON object reads as
  ``{"text": <its text>}``.
* **Governance** uses prism_memory's own calls on :meth:`PrismStore.memory`, a
  :class:`~prism_memory.Memory` of the namespace's thread: ``set_consent(key, visible=False)``
  revokes an item, ``forget(ids=[key], hold=True)`` holds it, ``export_memory``, ``apply_retention``
  and ``forget`` work as on any thread. A revoked or held item is invisible to ``get`` and
  ``search``; overwriting it keeps its consent (writes never loosen governance) and overwriting a
  held item raises :class:`~prism_memory.AccessDeniedError`; ``delete`` is a real delete, except
  that an item under legal hold stays (only ``Memory.forget(ids=[key])`` lifts a hold).

Distance is always cosine.
"""

from __future__ import annotations

import importlib

from ...errors import ConfigurationError

try:  # every module of this package imports LangGraph; this package module runs first
    importlib.import_module("langgraph.store.base")
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigurationError(
        "prism_memory.integrations.langgraph needs LangGraph: pip install 'prism-memory[langgraph]'"
    ) from exc

from ._store import PrismStore

__all__ = ["PrismStore"]
