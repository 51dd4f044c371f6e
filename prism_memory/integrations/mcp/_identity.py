"""Who a memory server serves: the host's identity, fixed by configuration or by authentication.

No tool argument ever names a tenant, resource or thread. Over stdio the identity is the server's
configuration; over HTTP an :data:`IdentityResolver` the host provides maps each request's
``Authorization`` header to one, and a request it maps to nothing is refused before any tool runs.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._validation import check_key
from ...errors import ConfigurationError

__all__ = [
    "IdentityResolver",
    "McpIdentity",
    "load_identity_resolver",
    "token_file_resolver",
    "token_resolver",
]


@dataclass(frozen=True, slots=True)
class McpIdentity:
    """The one scope a memory server (or one authenticated HTTP request) reads and writes."""

    tenant_id: str
    resource_id: str
    thread_id: str

    def __post_init__(self) -> None:
        for name in ("tenant_id", "resource_id", "thread_id"):
            check_key(getattr(self, name), name)

    @classmethod
    def from_mapping(cls, value: object, where: str) -> McpIdentity:
        """An identity from ``{"tenant_id": …, "resource_id": …, "thread_id": …}``."""
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{where} must be an object with tenant_id, resource_id, thread_id"
            )
        missing = [k for k in ("tenant_id", "resource_id", "thread_id") if k not in value]
        if missing:
            raise ConfigurationError(f"{where} lacks {', '.join(missing)}")
        extra = sorted(str(k) for k in value if k not in ("tenant_id", "resource_id", "thread_id"))
        if extra:
            raise ConfigurationError(
                f"{where} has unknown fields; only tenant_id, resource_id, thread_id"
            )
        return cls(
            tenant_id=value["tenant_id"],
            resource_id=value["resource_id"],
            thread_id=value["thread_id"],
        )


IdentityResolver = Callable[[str | None], "Awaitable[McpIdentity | None] | McpIdentity | None"]
"""Maps a request's ``Authorization`` header (``None`` when absent) to the identity it may use,
or to ``None`` to refuse the request (401). Sync or async. It must check the credential itself:
whatever it returns is trusted."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def _bearer(header: str | None) -> str | None:
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def token_resolver(tokens: Mapping[str, McpIdentity]) -> IdentityResolver:
    """A resolver for ``Authorization: Bearer <token>`` from a token -> identity mapping.

    A key is the token itself or ``sha256:<hex digest of the token>`` (so the file need not hold the
    token). Tokens are compared by digest in constant time; an unknown or missing token is refused.
    """
    table: list[tuple[bytes, McpIdentity]] = []
    for key, identity in tokens.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError("every token must be a non-empty string")
        if key.startswith("sha256:"):
            try:
                digest = bytes.fromhex(key.removeprefix("sha256:"))
            except ValueError:
                raise ConfigurationError("a sha256: token key must be 64 hex digits") from None
            if len(digest) != 32:
                raise ConfigurationError("a sha256: token key must be 64 hex digits")
        else:
            digest = _digest(key)
        table.append((digest, identity))
    if not table:
        raise ConfigurationError("the token mapping is empty: every request would be refused")

    def resolve(header: str | None) -> McpIdentity | None:
        token = _bearer(header)
        if token is None:
            return None
        presented = _digest(token)
        found: McpIdentity | None = None
        for digest, identity in table:  # every entry, so the time does not say which matched
            if hmac.compare_digest(digest, presented):
                found = identity
        return found

    return resolve


def token_file_resolver(path: str | Path) -> IdentityResolver:
    """:func:`token_resolver` over a JSON file ``{"<token>": {"tenant_id": …, "resource_id": …,
    "thread_id": …}, …}`` (keys may be ``sha256:<hex>``). Read once, at start."""
    try:
        raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(f"cannot read the token file: {exc.strerror}") from None
    except ValueError:
        raise ConfigurationError("the token file is not valid JSON") from None
    if not isinstance(raw, dict):
        raise ConfigurationError("the token file must hold one JSON object: token -> identity")
    tokens = {
        key: McpIdentity.from_mapping(value, f"token file entry {number}")
        for number, (key, value) in enumerate(raw.items(), start=1)
    }
    return token_resolver(tokens)


def load_identity_resolver(spec: str) -> IdentityResolver:
    """The host's resolver an import path names: ``module:function`` (see :data:`IdentityResolver`)."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError("--auth must look like module:function")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError:
        raise ConfigurationError(
            "--auth: its module cannot be imported where prism-memory runs"
        ) from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError("--auth: the module has no such attribute")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigurationError("--auth must name a callable")
    resolver: IdentityResolver = target
    return resolver


async def resolve_identity(resolver: IdentityResolver, header: str | None) -> McpIdentity | None:
    """Run ``resolver`` (sync or async) on ``header``; anything but an :class:`McpIdentity` refuses."""
    result = resolver(header)
    if inspect.isawaitable(result):
        result = await result
    return result if isinstance(result, McpIdentity) else None
