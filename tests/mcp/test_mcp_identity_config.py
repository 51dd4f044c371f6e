"""The identity configuration of the memory server, refused early and precisely: identities, token
mappings and files, bearer headers, and the host's resolver named by import path (issue 47's
mutation run). Every refusal is a :class:`ConfigurationError` that repeats no token."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from prism_memory.errors import ConfigurationError, ValidationError
from prism_memory.integrations.mcp import (
    McpIdentity,
    load_identity_resolver,
    token_file_resolver,
    token_resolver,
)
from prism_memory.integrations.mcp._identity import resolve_identity

ADA = McpIdentity("tenant-a", "ada", "chat-1")
BOB = McpIdentity("tenant-b", "bob", "chat-9")
FIELDS = {"tenant_id": "t", "resource_id": "r", "thread_id": "th"}


def test_an_identity_checks_each_of_its_keys() -> None:
    for name in ("tenant_id", "resource_id", "thread_id"):
        values: dict[str, Any] = {**FIELDS, name: ""}
        with pytest.raises(ValidationError, match=name):
            McpIdentity(**values)
        values[name] = "a\x00b"
        with pytest.raises(ValidationError, match=name):
            McpIdentity(**values)
    identity = McpIdentity(**FIELDS)
    assert identity == McpIdentity("t", "r", "th")
    with pytest.raises(dataclasses.FrozenInstanceError):
        identity.tenant_id = "tenant-b"  # type: ignore[misc]
    assert {identity: 1}[McpIdentity("t", "r", "th")] == 1  # hashable: a mapping key


def test_from_mapping_takes_exactly_the_three_fields() -> None:
    assert McpIdentity.from_mapping(FIELDS, "here") == McpIdentity("t", "r", "th")
    with pytest.raises(ConfigurationError, match="here must be an object"):
        McpIdentity.from_mapping(["t", "r", "th"], "here")
    with pytest.raises(ConfigurationError, match="here lacks resource_id, thread_id"):
        McpIdentity.from_mapping({"tenant_id": "t"}, "here")
    with pytest.raises(ConfigurationError, match=r"here lacks thread_id$"):
        McpIdentity.from_mapping({"tenant_id": "t", "resource_id": "r"}, "here")
    with pytest.raises(ConfigurationError, match="here has unknown fields"):
        McpIdentity.from_mapping({**FIELDS, "role": "admin"}, "here")


def test_token_keys_are_checked() -> None:
    for bad in ("sha256:zz", "sha256:" + "ab" * 31, "sha256:" + "ab" * 33):
        with pytest.raises(ConfigurationError, match="64 hex digits") as caught:
            token_resolver({bad: ADA})
        assert bad not in str(caught.value)
    with pytest.raises(ConfigurationError, match="non-empty string"):
        token_resolver({"": ADA})
    with pytest.raises(ConfigurationError, match="non-empty string"):
        token_resolver({1: ADA})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="empty"):
        token_resolver({})
    digest = "sha256:" + hashlib.sha256(b"tok").hexdigest().upper()
    assert token_resolver({digest: ADA})("Bearer tok") == ADA  # hex in either case


def test_bearer_headers() -> None:
    resolve = token_resolver({"token-ada": ADA, "token-bob": BOB})
    assert resolve("Bearer token-ada") == ADA
    assert resolve("Bearer token-bob") == BOB
    assert resolve("bearer token-ada") == ADA  # the scheme is case-insensitive
    assert resolve("  Bearer   token-ada  ") == ADA
    for refused in (
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic token-ada",
        "token-ada",
        "Bearer token-ada2",
        "Bearer token-ad",
        "Bearer TOKEN-ADA",
    ):
        assert resolve(refused) is None, refused


def test_two_keys_of_one_token_the_last_wins_and_both_are_looked_at() -> None:
    digest = "sha256:" + hashlib.sha256(b"shared").hexdigest()
    resolve = token_resolver({"shared": ADA, digest: BOB})
    assert resolve("Bearer shared") == BOB  # every entry compared: the time tells nothing


def test_token_files(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tok-1": FIELDS, "tok-2": {**FIELDS, "thread_id": "x"}}))
    resolve = token_file_resolver(path)
    assert resolve("Bearer tok-1") == McpIdentity("t", "r", "th")
    assert resolve("Bearer tok-2") == McpIdentity("t", "r", "x")
    assert token_file_resolver(str(path))("Bearer tok-1") == McpIdentity("t", "r", "th")

    cases = {
        "missing.json": (None, "cannot read the token file"),
        "bad.json": ("{not json", "not valid JSON"),
        "list.json": (json.dumps([FIELDS]), "one JSON object"),
        "entry.json": (json.dumps({"tok": FIELDS, "tok-2": ["x"]}), "token file entry 2 must"),
        "fields.json": (json.dumps({"tok": {"tenant_id": "t"}}), "token file entry 1 lacks"),
    }
    for name, (text, message) in cases.items():
        target = tmp_path / name
        if text is not None:
            target.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigurationError, match=message) as caught:
            token_file_resolver(target)
        assert "tok" not in str(caught.value).replace("token", "")


def _host_resolver(header: str | None) -> McpIdentity | None:
    return ADA if header == "Bearer host" else None


class _Holder:
    @staticmethod
    def nested(header: str | None) -> McpIdentity | None:
        return BOB if header else None


NOT_CALLABLE = 3


def test_load_identity_resolver_by_import_path() -> None:
    module = __name__
    assert load_identity_resolver(f"{module}:_host_resolver")("Bearer host") == ADA
    assert load_identity_resolver(f"{module}:_Holder.nested")("x") == BOB
    for spec, message in (
        (f"{module}._host_resolver", "module:function"),
        (f":{module}", "module:function"),
        (f"{module}:", "module:function"),
        ("no_such_module_xyz:f", "cannot be imported"),
        (f"{module}:missing", "no such attribute"),
        (f"{module}:_Holder.missing", "no such attribute"),
        (f"{module}:NOT_CALLABLE", "must name a callable"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            load_identity_resolver(spec)


async def test_resolve_identity_awaits_and_refuses_anything_else() -> None:
    async def later(header: str | None) -> McpIdentity | None:
        return ADA if header else None

    assert await resolve_identity(later, "x") == ADA
    assert await resolve_identity(later, None) is None
    assert await resolve_identity(_host_resolver, "Bearer host") == ADA
    assert await resolve_identity(lambda _: "tenant-a", "x") is None  # type: ignore[arg-type,return-value]
    assert await resolve_identity(lambda _: FIELDS, "x") is None  # type: ignore[arg-type,return-value]
