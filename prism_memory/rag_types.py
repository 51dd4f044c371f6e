"""The RAG store's typed models: scopes, chunks, access constraints, grants and hits.

Pure values with validation on construction (every bad input raises a
:class:`~prism_memory.errors.ValidationError` subclass); nothing here knows about storage. The
stores (:mod:`prism_memory.stores.rag_base`) and the public :mod:`prism_memory.rag` package both
import from here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from .errors import CapExceededError, ValidationError
from .models import Vector, check_ids, check_json, check_key

__all__ = [
    "ACL",
    "MAX_ACL_GROUPS",
    "MAX_ACL_PRINCIPALS",
    "MAX_CHUNKS_PER_CALL",
    "MAX_CHUNK_CHARS",
    "MAX_FILTER_KEYS",
    "AccessConstraint",
    "Authorization",
    "Chunk",
    "IngestResult",
    "MetadataFilter",
    "RagHit",
    "RagScope",
    "SourceAccess",
    "check_filter",
    "check_generation",
    "check_metadata",
    "check_model",
    "check_text",
    "chunk_digest",
]

MAX_ACL_GROUPS: Final = 32
"""Most group ids one :class:`AccessConstraint` or one source grant may name."""
MAX_ACL_PRINCIPALS: Final = 1024
"""Most principal ids one source grant may name."""
MAX_CHUNKS_PER_CALL: Final = 4096
"""Most chunks one ``upsert`` (and so one ingested source) may carry."""
MAX_CHUNK_CHARS: Final = 16_000
"""Longest chunk text (characters) a store accepts."""
MAX_FILTER_KEYS: Final = 16
"""Most keys one metadata ``filter`` may test."""
_MAX_METADATA_BYTES: Final = 64 * 1024
_MAX_GENERATION: Final = 2**63 - 1
_MAX_MODEL: Final = 256
_SCOPE_KEYS: Final = ("tenant_id", "resource_id", "collection")
"""The keys a scope mapping may have (:meth:`RagScope.of`)."""

ACL: Final = "acl"
"""``authorization="acl"``: access control on, but no verified principal -- denies everything."""

JsonScalar = str | int | float | bool | None
MetadataFilter = Mapping[str, JsonScalar]
"""Metadata equality filter: every key must be present in a chunk's metadata with an equal JSON
scalar value (``True`` never equals ``1``). It selects; it never authorises."""


def check_text(value: object, name: str, *, allow_empty: bool = False) -> str:
    """A string without NUL bytes or lone surrogates (PostgreSQL and UTF-8 reject both)."""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string")
    if not allow_empty and not value.strip():
        raise ValidationError(f"{name} must not be empty")
    if "\x00" in value:
        raise ValidationError(f"{name} contains a NUL byte")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{name} contains a lone surrogate") from exc
    return value


def check_generation(value: object, name: str = "generation") -> int:
    """A generation number: an integer in ``[0, 2**63)``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_GENERATION:
        raise ValidationError(f"{name} must be an integer in [0, 2**63)")
    return value


def check_model(value: object, name: str = "embedding_model") -> str | None:
    """``None`` or an embedding model identifier: a non-empty printable string of at most 256
    characters (the rule of :func:`prism_memory.embedding.embedder_model`)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value.strip()
        or len(value) > _MAX_MODEL
        or not value.isprintable()
    ):
        # never the value: a model name may be a secret
        raise ValidationError(
            f"{name} must be None or a non-empty printable string of at most {_MAX_MODEL} "
            "characters"
        )
    return value


def check_metadata(value: object, name: str = "metadata") -> dict[str, Any]:
    """A JSON object (finite numbers, no NUL, at most 64 KiB), returned as a plain JSON copy."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{name} must be a mapping")
    check_json(value, name, json_only=True)
    encoded = json.dumps(dict(value), ensure_ascii=False, sort_keys=True)
    if len(encoded.encode("utf-8")) > _MAX_METADATA_BYTES:
        raise CapExceededError(f"{name} is larger than {_MAX_METADATA_BYTES} bytes as JSON")
    loaded: dict[str, Any] = json.loads(encoded)
    return loaded


def check_filter(value: object) -> dict[str, JsonScalar] | None:
    """A metadata filter (see :data:`MetadataFilter`), or ``None``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValidationError("filter must be a mapping of metadata keys to JSON scalars")
    if len(value) > MAX_FILTER_KEYS:
        raise CapExceededError(f"filter tests {len(value)} keys; the cap is {MAX_FILTER_KEYS}")
    checked: dict[str, JsonScalar] = {}
    for position, (key, item) in enumerate(value.items()):
        if not isinstance(key, str):
            raise ValidationError(f"filter key #{position} must be a string")
        check_text(key, f"filter key #{position}")
        if not (item is None or isinstance(item, str | int | float | bool)):
            raise ValidationError(f"filter value #{position} must be a JSON scalar")
        check_json(item, f"filter value #{position}")
        checked[key] = item
    return checked


def chunk_digest(text: str) -> str:
    """The content digest of a chunk's text (SHA-256, hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class RagScope:
    """Where RAG chunks live: a tenant, a resource and an optional collection.

    Each part is validated like a memory scope key (non-empty, printable, at most 256
    characters). Generations, chunks and source grants all belong to one scope; nothing crosses
    scopes, and nothing ever crosses tenants.
    """

    tenant_id: str
    resource_id: str
    collection: str | None = None

    def __post_init__(self) -> None:
        check_key(self.tenant_id, "tenant_id")
        check_key(self.resource_id, "resource_id")
        if self.collection is not None:
            check_key(self.collection, "collection")

    @property
    def key(self) -> str:
        """The scope's storage key within its tenant (a JSON array of resource and collection)."""
        return json.dumps([self.resource_id, self.collection], ensure_ascii=False)

    @classmethod
    def of(cls, value: RagScope | Mapping[str, Any]) -> RagScope:
        """``value`` as a :class:`RagScope` (a mapping with the same keys is accepted)."""
        if isinstance(value, RagScope):
            return value
        if not isinstance(value, Mapping):
            raise ValidationError("scope must be a RagScope or a mapping")
        unknown = len(set(value) - set(_SCOPE_KEYS))
        if unknown:
            # the keys themselves are never repeated: a caller may have pasted a secret as one
            raise ValidationError(
                f"scope has {unknown} unknown key{'s' if unknown > 1 else ''}; "
                f"the allowed keys are {', '.join(_SCOPE_KEYS)}"
            )
        return cls(
            tenant_id=value.get("tenant_id"),  # type: ignore[arg-type]  # validated in __post_init__
            resource_id=value.get("resource_id"),  # type: ignore[arg-type]
            collection=value.get("collection"),
        )


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a source document with its embedding.

    ``index`` is the chunk's position in its source (0-based); ``digest`` is the SHA-256 of
    ``text`` (computed when not given; a given digest must match). ``metadata`` is the host's JSON
    object, filterable at query time -- it never carries authorisation. ``embedding_model`` is the
    ``model`` of the embedder that made ``embedding`` (``None``: not recorded, e.g. a row written
    before revision ``prism_memory_0012``); :func:`prism_memory.rag.ingest` records it.
    """

    source_id: str
    index: int
    text: str
    embedding: Vector
    metadata: Mapping[str, Any] = field(default_factory=dict)
    digest: str = ""
    embedding_model: str | None = None

    def __post_init__(self) -> None:
        check_key(self.source_id, "source_id")
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise ValidationError("chunk index must be an integer")
        if not 0 <= self.index < MAX_CHUNKS_PER_CALL:
            raise ValidationError(f"chunk index must be in [0, {MAX_CHUNKS_PER_CALL})")
        check_text(self.text, "chunk text")
        if len(self.text) > MAX_CHUNK_CHARS:
            raise CapExceededError(f"chunk text is longer than {MAX_CHUNK_CHARS} characters")
        object.__setattr__(self, "metadata", check_metadata(self.metadata, "chunk metadata"))
        expected = chunk_digest(self.text)
        if self.digest and self.digest != expected:
            raise ValidationError("chunk digest does not match its text")
        object.__setattr__(self, "digest", expected)
        check_model(self.embedding_model, "chunk embedding_model")


@dataclass(frozen=True, slots=True)
class AccessConstraint:
    """A host-verified caller: a principal, the groups it belongs to and, optionally, the access
    version the host resolved for it.

    Applied inside the query, before ranking: a chunk is visible only if its source has a grant,
    in the same tenant and scope, to ``principal_id`` or to one of ``group_ids`` -- and, when
    ``access_version`` is set, only a grant at exactly that version counts (a stale grant denies).
    """

    principal_id: str
    group_ids: tuple[str, ...] = ()
    access_version: int | None = None

    def __post_init__(self) -> None:
        check_key(self.principal_id, "principal_id")
        groups = check_ids(self.group_ids, "group_ids", cap=MAX_ACL_GROUPS)
        object.__setattr__(self, "group_ids", groups)
        if self.access_version is not None:
            _check_version(self.access_version)


Authorization = AccessConstraint | Literal["acl"] | None
"""What ``query``/``lexical_query`` accept: a constraint, ``"acl"`` (deny all), or ``None`` (no ACL)."""


def _check_version(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_GENERATION:
        raise ValidationError("access_version must be an integer >= 1")
    return value


@dataclass(frozen=True, slots=True)
class SourceAccess:
    """The grants of one source: principals and groups, all at one ``access_version``.

    Setting it replaces the source's previous grants; empty ``principal_ids`` and ``group_ids``
    revoke every grant.
    """

    principal_ids: tuple[str, ...]
    group_ids: tuple[str, ...]
    access_version: int

    def __post_init__(self) -> None:
        for name, cap in (("principal_ids", MAX_ACL_PRINCIPALS), ("group_ids", MAX_ACL_GROUPS)):
            object.__setattr__(self, name, check_ids(getattr(self, name), name, cap=cap))
        _check_version(self.access_version)

    @classmethod
    def of(
        cls, principal_ids: Sequence[str], group_ids: Sequence[str], access_version: int
    ) -> SourceAccess:
        """The grants a store is asked to set, checked as given: a bare ``str`` (which would
        grant each of its characters) or any non-collection raises
        :class:`~prism_memory.errors.ValidationError`, more ids than the caps
        :class:`~prism_memory.errors.CapExceededError`."""
        return cls(
            check_ids(principal_ids, "principal_ids", cap=MAX_ACL_PRINCIPALS),
            check_ids(group_ids, "group_ids", cap=MAX_ACL_GROUPS),
            access_version,
        )

    def allows(self, authorization: AccessConstraint) -> bool:
        """Whether these grants admit ``authorization`` (the rule both backends apply)."""
        if (
            authorization.access_version is not None
            and authorization.access_version != self.access_version
        ):
            return False
        if authorization.principal_id in self.principal_ids:
            return True
        return any(group in self.group_ids for group in authorization.group_ids)


@dataclass(frozen=True, slots=True)
class RagHit:
    """One retrieved chunk and why it ranked where it did.

    ``score`` orders the hits: the cosine similarity for ``query``, the BM25 score for
    ``lexical_query``, the fused similarity of :func:`prism_memory.ranking.fuse` for
    ``hybrid_query``. ``semantic`` is the true cosine and ``lexical`` the raw BM25 against the
    scope's statistics (``None`` when the leg that produced the hit did not compute it).
    ``embedding`` is the chunk's stored vector and ``embedding_model`` the model that made it
    (``None`` when the chunk does not record one).
    """

    source_id: str
    chunk_index: int
    text: str
    metadata: Mapping[str, Any]
    generation: int
    score: float
    semantic: float | None = None
    lexical: float | None = None
    embedding: Vector | None = field(default=None, compare=False, repr=False)
    embedding_model: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        """``(source_id, chunk_index)``: the chunk's identity within a scope and generation."""
        return (self.source_id, self.chunk_index)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What :func:`prism_memory.rag.ingest` did to one source.

    ``unchanged`` is true when the text chunked to the stored digests and metadata: nothing was
    embedded or written. ``embedded`` counts the chunks sent to the embedder (chunks whose digest
    was already stored reuse their vector).
    """

    source_id: str
    generation: int
    chunks: int
    embedded: int
    unchanged: bool
