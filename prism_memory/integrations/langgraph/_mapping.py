"""How LangGraph's namespaces, keys and items map onto prism's threads, entries and records.

A namespace is one thread (its labels joined by ``.``), an item one entry whose id is the key and
whose text is the value as JSON; the package docstring says the whole mapping.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from langgraph.store.base import InvalidNamespaceError, Item, SearchItem

from ...errors import ValidationError
from ...models import MemoryConsent, MemoryIdentity, MemoryRecord, Vector
from ...stores.base import MetadataPatch, NewEntry, RecallFilter
from ...stores.rules import is_recallable

CATALOG_THREAD = "."
"""The thread listing the namespaces the store has written to; no namespace encodes to it
(labels are non-empty and hold no ``.``)."""
UNINDEXED: Mapping[str, Any] = {"langgraph": {"indexed": False}}
"""Metadata of an item stored without a vector (``index=False``, no index, or no text to embed)."""
ROLE = "langgraph"
TTL_KEY = "langgraph_ttl"
"""Metadata of an item put with a TTL: ``{"minutes": <ttl>, "expires_at": <ISO time>}``."""
VECTORS_KEY = "langgraph_vectors"
"""Metadata of an item whose fields yield several texts: the vectors of the second and later
texts (base64 of little-endian float32); the entry's own vector is the first text's."""


def utcnow() -> datetime:
    """The time a batch runs at (every op of the batch sees the same one)."""
    return datetime.now(UTC)


def thread_of(namespace: tuple[str, ...]) -> str:
    """The prism thread that holds ``namespace``'s items."""
    return ".".join(namespace)


def namespace_of(thread: str) -> tuple[str, ...]:
    """The namespace whose items ``thread`` holds (the inverse of :func:`thread_of`)."""
    return tuple(thread.split("."))


def check_namespace(namespace: tuple[str, ...]) -> None:
    """Refuse the empty namespace, as LangGraph's stores do for a get or a put."""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")


def is_indexed(record: MemoryRecord) -> bool:
    """Whether ``record``'s item was stored with a vector (search scores only those)."""
    return record.metadata.get("langgraph", {}).get("indexed", True) is not False


def is_visible(record: MemoryRecord, now: datetime) -> bool:
    """Whether ``get`` and ``search`` show ``record``: prism's exclusion rules (consent, hold)
    and its TTL (an expired item is never shown, swept or not)."""
    return is_recallable(record, RecallFilter(now=now)) and not is_expired(record, now)


def check_ttl(ttl: object) -> float | None:
    """A put's ``ttl`` in minutes: ``None`` (no expiry) or a positive finite number."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise ValidationError("ttl must be a number of minutes or None")
    if ttl <= 0:
        raise ValidationError("ttl must be a positive number of minutes")
    return float(ttl)


def ttl_of(record: MemoryRecord) -> Mapping[str, Any] | None:
    """``record``'s TTL metadata (:data:`TTL_KEY`), or ``None`` when it does not expire."""
    found = record.metadata.get(TTL_KEY)
    return found if isinstance(found, Mapping) else None


def ttl_metadata(minutes: float, now: datetime) -> dict[str, Any]:
    """The TTL metadata of an item that lives ``minutes`` from ``now``."""
    return {"minutes": minutes, "expires_at": (now + timedelta(minutes=minutes)).isoformat()}


def is_expired(record: MemoryRecord, now: datetime) -> bool:
    """Whether ``record``'s TTL has run out at ``now`` (its sweep may not have run yet)."""
    ttl = ttl_of(record)
    return ttl is not None and datetime.fromisoformat(ttl["expires_at"]) <= now


def refresh_patch(record: MemoryRecord, now: datetime) -> MetadataPatch | None:
    """The write that restarts ``record``'s TTL at ``now`` (``None``: it has no TTL)."""
    ttl = ttl_of(record)
    if ttl is None:
        return None
    values = {TTL_KEY: ttl_metadata(float(ttl["minutes"]), now)}
    return MetadataPatch(record.revision, record.written_at, values)


def encode_vectors(vectors: list[Vector]) -> list[str]:
    """``vectors`` as :data:`VECTORS_KEY` stores them."""
    return [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii") for v in vectors]


def extra_vectors(record: MemoryRecord) -> list[Vector]:
    """The vectors of ``record``'s second and later field texts (:data:`VECTORS_KEY`)."""
    found = record.metadata.get(VECTORS_KEY)
    if not isinstance(found, list):
        return []
    return [np.frombuffer(base64.b64decode(text), dtype="<f4") for text in found]


def new_entry(
    entry_id: str,
    text: str,
    *,
    metadata: Mapping[str, Any],
    consent: MemoryConsent | None,
    occurred_at: datetime,
) -> NewEntry:
    """A new entry as the store writes it: its own role, full importance, no lineage, and a
    sequence the store assigns (so an item keeps its place among the namespace's items)."""
    return NewEntry(
        id=entry_id,
        text=text,
        role=ROLE,
        metadata=metadata,
        consent=consent,
        sequence=None,
        occurred_at=occurred_at,
        importance=1.0,
        lineage=None,
    )


def value_of(record: MemoryRecord) -> dict[str, Any]:
    """The value ``record`` stores: its text read as a JSON object, or -- for an entry not written
    as one (e.g. ``remember({"id": "p", "text": "plain"})`` through :meth:`PrismStore.memory`) --
    ``{"text": <the entry's text>}``, so one foreign entry never breaks a read or a search."""
    try:
        value = json.loads(record.text)
    except (ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {"text": record.text}


def item_of(record: MemoryRecord, namespace: tuple[str, ...]) -> Item:
    """The LangGraph item ``record`` stores (its value: :func:`value_of`)."""
    return Item(
        value=value_of(record),
        key=record.id,
        namespace=namespace,
        created_at=record.created_at,
        updated_at=record.written_at,
    )


def search_item(item: Item, score: float | None) -> SearchItem:
    """``item`` as a search result with its ``score`` (``None``: not ranked)."""
    return SearchItem(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
        score=score,
    )


@dataclass(frozen=True, slots=True)
class Owner:
    """The tenant and resource a store is bound to: every scope it reads or writes is theirs."""

    tenant_id: str
    resource_id: str

    def scope(self, thread: str) -> MemoryIdentity:
        """The prism scope of ``thread`` under this tenant and resource."""
        return MemoryIdentity(
            tenant_id=self.tenant_id, resource_id=self.resource_id, thread_id=thread
        )
