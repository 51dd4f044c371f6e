"""The memory server's own surface, in process through the SDK's in-memory transport (a call with
no HTTP request: the configured identity), in memory (issue 47's mutation run): its options and
refusals, each tool's hints and arguments, the scopes of remember and recall, export pages, the
prompt's scopes and errors, and how an error becomes one line."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from prism_memory import HashEmbedder
from prism_memory.errors import ConfigurationError
from prism_memory.integrations.mcp import McpIdentity, PrismMcpServer
from prism_memory.integrations.mcp._server import _one_line
from prism_memory.limits import Limits

ADA = McpIdentity("tenant-a", "ada", "chat-1")
ADA_ELSEWHERE = McpIdentity("tenant-a", "ada", "chat-2")


def _server(**options: Any) -> PrismMcpServer:
    return PrismMcpServer(embedder=HashEmbedder(), identity=ADA, **options)


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def _error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    [content] = result.content
    return str(getattr(content, "text", ""))


def test_options_and_identity_are_checked() -> None:
    every = {
        "schema": None,
        "validate_working_memory": True,
        "working_memory_template": None,
        "limits": Limits(),
        "redactor": None,
        "secrets": ["s"],
        "require_consent": False,
        "importance_from": None,
        "on_invalidate": None,
        "retention_days": None,
        "working_scope": "thread",
        "indexing": None,
        "clock": None,
    }
    for name, value in every.items():
        PrismMcpServer(embedder=HashEmbedder(), memory_options={name: value})
    for refused in ("tenant_id", "vector_store", "embedder", "identity"):
        with pytest.raises(ConfigurationError, match="memory_options"):
            PrismMcpServer(embedder=HashEmbedder(), memory_options={refused: "x"})
    with pytest.raises(ConfigurationError, match="identity must be an McpIdentity"):
        PrismMcpServer(embedder=HashEmbedder(), identity=("t", "r", "th"))  # type: ignore[arg-type]
    server = PrismMcpServer(embedder=HashEmbedder())
    assert server.identity is None
    assert server.name == "prism-memory"
    assert PrismMcpServer(embedder=HashEmbedder(), name="mine").name == "mine"


async def test_without_an_identity_a_stdio_call_is_refused() -> None:
    async with Client(PrismMcpServer(embedder=HashEmbedder())) as client:
        message = await _error(client, "recall", query="tea")
        assert "no identity configured" in message


async def test_the_tools_hints_and_the_instructions() -> None:
    async with Client(_server()) as client:
        # working memory is the user's by default (create_memory's working_scope="resource")
        assert client.instructions is not None
        assert "Call `recall` before answering" in client.instructions
        assert "one document shared by all their conversations" in client.instructions
        assert "no argument selects another" in client.instructions
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    read_only = {name for name, tool in tools.items() if tool.annotations.read_only_hint}
    assert read_only == {"recall", "get_working_memory", "export_memory"}
    destructive = {name for name, tool in tools.items() if tool.annotations.destructive_hint}
    assert destructive == {"forget"}
    assert all(tool.annotations.open_world_hint is False for tool in tools.values())
    assert set(tools["recall"].input_schema["properties"]) == {"query", "top_k", "scope"}
    assert tools["remember"].input_schema["required"] == ["texts"]
    assert "ctx" not in tools["remember"].input_schema["properties"]


async def test_scopes_pages_and_overwrites() -> None:
    server = _server()
    async with Client(server) as client:
        own = (await _call(client, "remember", texts=["Ada sings in a choir"]))["ids"]
        shared = (await _call(client, "remember", texts=["Ada is a soprano"], scope="user"))["ids"]
        hits = (await _call(client, "recall", query="Ada choir soprano", top_k=5))["hits"]
        assert {hit["id"] for hit in hits} == {*own, *shared}
        assert {hit["scope"] for hit in hits} == {"thread", "user"}
        assert all(hit["visible"] is True and hit["shared"] is False for hit in hits)
        top = (await _call(client, "recall", query="Ada choir soprano", top_k=1))["hits"]
        assert len(top) == 1

        first = await _call(client, "export_memory", limit=1)
        assert len(first["entries"]) == 1
        assert first["next_cursor"] is not None
        second = await _call(client, "export_memory", cursor=first["next_cursor"], limit=1)
        assert len(second["entries"]) == 1
        assert first["entries"][0]["id"] != second["entries"][0]["id"]

        assert await _call(client, "update_working_memory", data={"a": 1}) == {
            "version": 1,
            "data": {"a": 1},
        }
        assert await _call(client, "update_working_memory", data={"b": 2}) == {
            "version": 2,
            "data": {"b": 2},
        }
    server.identity = ADA_ELSEWHERE  # the same user in another conversation
    async with Client(server) as client:
        hits = (await _call(client, "recall", query="Ada choir soprano", scope="resource"))["hits"]
        assert [hit["id"] for hit in hits] == shared
        assert hits[0]["shared"] is True
        assert (await _call(client, "recall", query="Ada choir soprano"))["hits"] == []


@pytest.mark.parametrize("context_scope", ["thread", "resource"])
async def test_the_prompt_follows_its_scope(context_scope: str) -> None:
    server = _server(context_scope=context_scope)
    async with Client(server) as client:
        empty = await client.get_prompt("memory_context", {})
        assert [getattr(m.content, "text", "") for m in empty.messages] == ["(no memory yet)"]
        await _call(client, "remember", texts=["Ada plays the oboe"], scope="user")
    server.identity = ADA_ELSEWHERE
    async with Client(server) as client:
        prompt = await client.get_prompt("memory_context", {"query": "oboe"})
    text = "".join(getattr(m.content, "text", "") for m in prompt.messages)
    assert ("Ada plays the oboe" in text) is (context_scope == "resource")


async def test_a_prompt_without_an_identity_or_over_a_cap_fails() -> None:
    server = _server()
    server.identity = None
    async with Client(server) as client:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK hides the prompt's error
            await client.get_prompt("memory_context", {"query": "q"})
    server = _server(memory_options={"limits": Limits(query_terms=2)})
    async with Client(server) as client:
        with pytest.raises(Exception):  # noqa: B017, PT011
            await client.get_prompt("memory_context", {"query": "bees wasps hornets ants"})
        ok = await client.get_prompt("memory_context", {"query": "ab"})
        assert ok.messages


def test_one_line() -> None:
    assert _one_line(ValueError("first\nsecond")) == "ValueError: first"
    assert _one_line(ValueError("  padded  \n")) == "ValueError: padded"
    assert _one_line(ValueError("")) == "ValueError: failed"


async def test_argument_errors_name_where_and_why_only() -> None:
    async with Client(_server()) as client:
        message = await _error(client, "recall", query="tea", top_k=0)
        assert message.startswith("ValidationError: recall arguments rejected: top_k: ")
        message = await _error(client, "remember", texts=[], scope="nowhere")
        assert message.startswith("ValidationError: remember arguments rejected: ")
        assert "scope: " in message
        assert "texts: " in message
        assert "nowhere" not in message
        message = await _error(client, "get_working_memory", extra=1)
        assert message == (
            "get_working_memory takes only: no arguments; "
            "the user and conversation are fixed by the host"
        )
        message = await _error(client, "correct", id="x", text="y", thread_id="z")
        assert message.startswith("correct takes only: id, text;")


async def test_the_instructions_and_the_id_argument() -> None:
    async with Client(_server()) as client:
        instructions = client.instructions or ""
        assert instructions.startswith("Long-term memory of the current user and conversation.")
        assert "no argument selects another" in instructions
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        entry_id = tools["correct"].input_schema["properties"]["id"]
        assert entry_id["description"] == "a memory id from remember or recall"
        assert (entry_id["minLength"], entry_id["maxLength"]) == (1, 256)
        # one character is an id (unknown here); 257 are refused as arguments
        missing = await _error(client, "revoke_consent", id="a")
        assert missing.startswith("NotFoundError: ")
        assert (await _call(client, "forget", ids=["b" * 256])) == {"deleted": 0}
        too_long = await _error(client, "forget", ids=["b" * 257])
        assert too_long.startswith("ValidationError: forget arguments rejected: ids.0: ")


async def test_the_tools_defaults() -> None:
    """remember returns once its memories are searchable; recall gives 5 hits and export pages of
    100 unless asked otherwise."""
    async with Client(_server()) as client:
        texts = [f"Ada's fact number {n} about violins" for n in range(100)]
        first = await _call(client, "remember", texts=texts)
        assert first["pending"] == []
        assert len(first["ids"]) == 100
        await _call(client, "remember", texts=["Ada's last fact about violins"])
        hits = (await _call(client, "recall", query="Ada fact violins"))["hits"]
        assert len(hits) == 5
        page = await _call(client, "export_memory")
        assert len(page["entries"]) == 100
        assert page["next_cursor"] is not None


async def test_the_prompt_is_described() -> None:
    async with Client(_server()) as client:
        [prompt] = (await client.list_prompts()).prompts
    assert prompt.name == "memory_context"
    assert prompt.description == (
        "The memory block for a system prompt: the working-memory document and the memories "
        "relevant to `query`, in chronological order."
    )
    assert [(a.name, a.required) for a in prompt.arguments or []] == [("query", False)]


def _descriptions(schema: dict[str, Any]) -> dict[str, str]:
    """Every described property of an output schema (``$defs`` included), by name."""
    found: dict[str, str] = {}
    for part in [schema, *schema.get("$defs", {}).values()]:
        for name, prop in part.get("properties", {}).items():
            if "description" in prop:
                found[f"{part.get('title')}.{name}"] = prop["description"]
    return found


async def test_what_the_results_say_about_themselves() -> None:
    async with Client(_server()) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    described: dict[str, str] = {}
    for tool in tools.values():
        described.update(_descriptions(tool.output_schema or {}))
    assert described == {
        "RememberOutput.ids": "one id per remembered text, in order",
        "RememberOutput.pending": (
            "ids not yet searchable (their embedding failed and is being retried)"
        ),
        "Hit.id": "the memory's id, for forget / correct / revoke_consent",
        "Hit.score": "overall rank score (similarity, recency, importance)",
        "Hit.similarity": "how closely the text matches the query",
        "Hit.scope": "thread: this conversation only; user/profile: follows the user",
        "Hit.shared": "true when another conversation of this user owns it",
        "Hit.visible": "consent in force (always true in recall results)",
        "RecallOutput.pending": "memories of this conversation not yet searchable",
        "ConsentResult.visible": "false: revoked, never recalled until restored",
        "WorkingMemory.version": "0 before the first write; pass it as expected_version",
        "ExportResult.next_cursor": "pass it back as cursor for the next page; null at the end",
    }
