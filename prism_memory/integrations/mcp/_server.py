"""The memory server: prism_memory's facade as MCP tools and a prompt, on the official SDK.

Every tool works on one identity that the model never names: over stdio the server's configured
:class:`~prism_memory.integrations.mcp.McpIdentity`; over HTTP the identity the host's
authentication attached to the request (see :func:`~prism_memory.integrations.mcp.http_app`).
Arguments a tool does not declare (``tenant_id``, ``thread_id``…) are refused, not ignored.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import pydantic
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, GetPromptResult, InputRequiredResult, ToolAnnotations
from mcp.types import Tool as MCPTool
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from pydantic import Field

from ... import Memory, __version__, create_memory
from ..._validation import parse
from ...embedding import Embedder
from ...errors import ConfigurationError, PrismMemoryError, ValidationError
from ...limits import Limits
from ...models import MemoryConsent
from ...stores.base import VectorStore, WorkingStore
from ...stores.memory import InMemoryVectorStore, InMemoryWorkingStore
from ._identity import McpIdentity
from ._models import (
    ConsentResult,
    CorrectResult,
    ExportResult,
    ForgetResult,
    Hit,
    RecallOutput,
    RememberOutput,
    WorkingMemory,
)
from ._stdio import serve_stdio

__all__ = ["IDENTITY_STATE_KEY", "PrismMcpServer"]

logger = logging.getLogger("prism_memory.mcp")

IDENTITY_STATE_KEY = "prism_memory_identity"
"""Where :func:`http_app` puts the authenticated identity in the ASGI scope's ``state``."""

_WORKING = {
    "resource": "the user's structured state (one document shared by all their conversations)",
    "thread": "this conversation's structured state (one document per conversation)",
}


def instructions(working_scope: Literal["resource", "thread"]) -> str:
    """The server's instructions to the model; whose working memory it is follows
    ``working_scope`` (``create_memory``'s, ``"resource"`` by default)."""
    return (
        "Long-term memory of the current user and conversation. Call `recall` before answering "
        "when earlier facts may matter, `remember` for durable facts worth keeping (preferences, "
        f"names, decisions), `get_working_memory`/`update_working_memory` for {_WORKING[working_scope]}. "
        "Ids come from remember and recall results. The user and conversation are fixed by the "
        "host: no argument selects another."
    )


_MEMORY_OPTIONS = frozenset(
    {
        "schema",
        "validate_working_memory",
        "working_memory_template",
        "limits",
        "redactor",
        "secrets",
        "require_consent",
        "importance_from",
        "on_invalidate",
        "retention_days",
        "working_scope",
        "indexing",
        "clock",
    }
)

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

EntryId = Annotated[
    str,
    Field(min_length=1, max_length=256, description="a memory id from remember or recall"),
]


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else 'failed'}"


def _invalid_arguments(tool: str, exc: pydantic.ValidationError) -> str:
    # where and why, never the rejected value (it may be a secret the model was handed)
    problems = sorted(
        {
            f"{'.'.join(str(part) for part in e['loc']) or 'arguments'}: {e['msg']}"
            for e in exc.errors()
        }
    )
    return f"ValidationError: {tool} arguments rejected: {'; '.join(problems)}"


async def _unknown_methods_unnamed(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    """Server middleware: the SDK answers an unknown method with the method's name as the error's
    ``data``; the name is the caller's and may be anything, so the answer carries no data."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        if exc.code != METHOD_NOT_FOUND:
            raise
        raise MCPError(METHOD_NOT_FOUND, "Method not found") from None


class PrismMcpServer(MCPServer[Any]):
    """An MCP server whose tools are one memory scope's remember, recall, forget, consent,
    correction, working memory and export, plus a ``memory_context`` prompt.

    ``identity`` is the scope of calls that arrive without an HTTP request (stdio, the SDK's
    in-memory transport). Calls over HTTP use the identity the authentication in front of the app
    attached to their request -- never ``identity`` -- and are refused without one.
    ``memory_options`` are :func:`~prism_memory.create_memory` keyword arguments (``schema``,
    ``working_memory_template``, ``limits``, ``require_consent``…). Stores default to fresh
    in-memory ones; the host owns (and closes) the stores it passes.
    """

    def __init__(
        self,
        *,
        embedder: Embedder,
        vector_store: VectorStore | None = None,
        working_store: WorkingStore | None = None,
        identity: McpIdentity | None = None,
        memory_options: Mapping[str, Any] | None = None,
        context_scope: Literal["thread", "resource"] = "resource",
        name: str = "prism-memory",
    ) -> None:
        options = dict(memory_options or {})
        unknown = set(options) - _MEMORY_OPTIONS
        if unknown:
            raise ConfigurationError(
                "memory_options takes create_memory's options other than identity and stores"
            )
        working_scope = options.get("working_scope", "resource")
        if working_scope not in ("resource", "thread"):
            raise ConfigurationError("working_scope must be 'resource' or 'thread'")
        # the tools' schemas carry the caps the memory enforces (refused by both, never clipped)
        self.limits = parse(Limits, options.get("limits") or {}, "limits")
        super().__init__(
            name,
            instructions=instructions(working_scope),
            version=__version__,
            log_level="WARNING",
            middleware=[_unknown_methods_unnamed],
        )
        self.working_scope: Literal["resource", "thread"] = working_scope
        if identity is not None and not isinstance(identity, McpIdentity):
            raise ConfigurationError("identity must be an McpIdentity")
        self.identity = identity
        self.embedder = embedder
        self.vector_store = vector_store if vector_store is not None else InMemoryVectorStore()
        self.working_store = working_store if working_store is not None else InMemoryWorkingStore()
        self._options = options
        self._context_scope: Literal["thread", "resource"] = context_scope
        self._arguments: dict[str, frozenset[str]] = {}
        self._prompt_arguments: dict[str, frozenset[str]] = {}
        self._register()

    # ---- identity and memory -----------------------------------------------------------------

    def identity_of(self, ctx: Context) -> McpIdentity:
        """The identity of the call ``ctx`` belongs to (see the class docs); refused if none."""
        request = ctx.request_context.request
        if request is None:
            if self.identity is None:
                raise ToolError("this server has no identity configured")
            return self.identity
        state = getattr(request, "scope", {}).get("state") or {}
        found = state.get(IDENTITY_STATE_KEY)
        if not isinstance(found, McpIdentity):
            raise ToolError("the request is not authenticated")
        return found

    @asynccontextmanager
    async def memory(self, ctx: Context) -> AsyncIterator[Memory]:
        """The :class:`~prism_memory.Memory` of the call's identity, open for the call."""
        who = self.identity_of(ctx)
        async with create_memory(
            tenant_id=who.tenant_id,
            resource_id=who.resource_id,
            thread_id=who.thread_id,
            embedder=self.embedder,
            vector_store=self.vector_store,
            working_store=self.working_store,
            **self._options,
        ) as memory:
            yield memory

    # ---- the SDK's entry points, narrowed ----------------------------------------------------

    async def list_tools(self) -> list[MCPTool]:
        """The tools, each schema closed (``additionalProperties: false``): no undeclared argument."""
        tools = await super().list_tools()
        return [
            tool.model_copy(
                update={"input_schema": {**tool.input_schema, "additionalProperties": False}}
            )
            for tool in tools
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Run a tool; an undeclared argument is refused, and a prism_memory error becomes a tool
        error carrying its type and one-line message (never a traceback)."""
        allowed = self._arguments.get(name)
        if allowed is not None and not set(arguments) <= allowed:
            names = ", ".join(sorted(allowed)) or "no arguments"
            raise ToolError(
                f"{name} takes only: {names}; the user and conversation are fixed by the host"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, PrismMemoryError):
                raise ToolError(_one_line(cause)) from None
            if isinstance(cause, pydantic.ValidationError):
                raise ToolError(_invalid_arguments(name, cause)) from None
            raise

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        """Render a prompt. An unknown prompt or an undeclared argument is refused before
        anything runs, and every failure is a JSON-RPC error carrying its type and one-line
        message, never an argument's value (neither in the reply nor in the server's log)."""
        allowed = self._prompt_arguments.get(name)
        if allowed is None:
            raise MCPError(INVALID_PARAMS, "NotFoundError: no such prompt; prompts/list names them")
        if not set(arguments or {}) <= allowed:
            names = ", ".join(sorted(allowed)) or "no arguments"
            raise MCPError(
                INVALID_PARAMS,
                f"ValidationError: {name} takes only: {names}; the user and conversation are "
                "fixed by the host",
            )
        try:
            return await super().get_prompt(name, arguments, context)
        except MCPError:
            raise
        except Exception as exc:  # noqa: BLE001 - its text may repeat an argument: typed, not echoed
            logger.warning("prism-memory mcp: the %s prompt failed: %s", name, type(exc).__name__)
            raise MCPError(
                INTERNAL_ERROR, f"{type(exc).__name__}: the {name} prompt failed"
            ) from None

    async def run_stdio_async(self) -> None:
        """Serve over stdin/stdout: every line checked before the SDK parses it (a malformed
        one gets a fixed JSON-RPC error, never silence), and a client that closes stdout stops
        the server with one logged line."""
        await serve_stdio(self._lowlevel_server)

    def _tool(self, fn: Callable[..., Any], annotations: ToolAnnotations) -> None:
        description = (inspect.getdoc(fn) or "").replace("{working}", _WORKING[self.working_scope])
        self.add_tool(fn, description=description, annotations=annotations)
        parameters = inspect.signature(fn).parameters
        self._arguments[fn.__name__] = frozenset(p for p in parameters if p != "ctx")

    # ---- the tools ---------------------------------------------------------------------------

    def _register(self) -> None:
        server = self
        top_k_cap = self.limits.top_k
        export_cap = self.limits.export_entries
        export_default = self.limits.resolve("export_entries", None)

        async def remember(
            ctx: Context,
            texts: Annotated[
                list[Annotated[str, Field(min_length=1, max_length=16_000)]],
                Field(
                    min_length=1,
                    max_length=100,
                    description="the facts to keep, one short self-contained statement each",
                ),
            ],
            scope: Annotated[
                Literal["thread", "user", "profile"],
                Field(
                    description="thread: recalled in this conversation only (default); user or "
                    "profile: also in the user's other conversations (recall with scope=resource)"
                ),
            ] = "thread",
        ) -> RememberOutput:
            """Store facts in long-term memory. Returns one id per text, in order; the same text
            remembered twice keeps one memory. Memories are searchable when this returns."""
            consent = MemoryConsent(source="agent", scope=scope)
            async with server.memory(ctx) as memory:
                entries = [{"text": text, "consent": consent} for text in texts]
                result = await memory.remember(entries, wait=True)
            return RememberOutput(ids=list(result.accepted), pending=list(result.pending))

        async def recall(
            ctx: Context,
            query: Annotated[
                str, Field(min_length=1, max_length=16_000, description="what to look for")
            ],
            top_k: int = min(5, top_k_cap),  # its schema: `capped` below
            scope: Annotated[
                Literal["thread", "resource"],
                Field(
                    description="thread: this conversation (default); resource: also the user's "
                    "user/profile memories from their other conversations"
                ),
            ] = "thread",
        ) -> RecallOutput:
            """Search long-term memory. Returns hits best first, each with its id and scores;
            revoked, forgotten and corrected-away memories never come back."""
            async with server.memory(ctx) as memory:
                result = await memory.recall(query, top_k=top_k, scope=scope)
            hits = [
                Hit(
                    id=hit.id,
                    text=hit.text,
                    score=hit.score,
                    similarity=hit.similarity,
                    occurred_at=hit.record.occurred_at,
                    scope=hit.record.effective_consent.scope,
                    shared=hit.shared,
                    visible=hit.record.effective_consent.visible,
                )
                for hit in result.hits
            ]
            return RecallOutput(hits=hits, pending=result.pending)

        async def forget(
            ctx: Context,
            ids: Annotated[
                list[EntryId],
                Field(min_length=1, max_length=100, description="ids of the memories to delete"),
            ],
        ) -> ForgetResult:
            """Delete memories for good, with everything derived from them. Returns how many stored
            memories went; an id this conversation does not hold deletes nothing."""
            async with server.memory(ctx) as memory:
                deleted = await memory.forget(ids=ids)
            return ForgetResult(deleted=deleted)

        async def revoke_consent(ctx: Context, id: EntryId) -> ConsentResult:
            """Withdraw consent for a memory: it (and what was derived from it) stops being
            recalled or exported, but is kept, so restore_consent can bring it back."""
            async with server.memory(ctx) as memory:
                record = await memory.set_consent(id, visible=False)
            return ConsentResult(id=record.id, visible=record.effective_consent.visible)

        async def restore_consent(ctx: Context, id: EntryId) -> ConsentResult:
            """Grant consent again for a memory revoked with revoke_consent."""
            async with server.memory(ctx) as memory:
                record = await memory.set_consent(id, visible=True)
            return ConsentResult(id=record.id, visible=record.effective_consent.visible)

        async def correct(
            ctx: Context,
            id: EntryId,
            text: Annotated[
                str, Field(min_length=1, max_length=16_000, description="the corrected fact")
            ],
        ) -> CorrectResult:
            """Replace a memory's text (keeping its id and consent); memories derived from the old
            text stop being recalled."""
            async with server.memory(ctx) as memory:
                record = await memory.correct(id, text)
            return CorrectResult(id=record.id, text=record.text)

        async def get_working_memory(ctx: Context) -> WorkingMemory:
            """Read the working-memory document, {working}: version 0 and empty data before the
            first update."""
            async with server.memory(ctx) as memory:
                record = await memory.get_working()
            if record is None:
                return WorkingMemory(version=0, data={})
            return WorkingMemory(version=record.version, data=dict(record.data))

        async def update_working_memory(
            ctx: Context,
            data: Annotated[
                dict[str, Any],
                Field(description="the whole new document (it replaces the old one)"),
            ],
            expected_version: Annotated[
                int | None,
                Field(
                    strict=True,
                    ge=0,
                    description="the version you read (0: none yet); the update fails if it "
                    "changed since. Omit to overwrite unconditionally",
                ),
            ] = None,
        ) -> WorkingMemory:
            """Replace the working-memory document, {working}; returns it with its new version."""
            async with server.memory(ctx) as memory:
                record = await memory.update_working(data, expected_version=expected_version)
            return WorkingMemory(version=record.version, data=dict(record.data))

        async def export_memory(
            ctx: Context,
            cursor: Annotated[
                str | None, Field(description="next_cursor of the previous page; omit to start")
            ] = None,
            limit: int = export_default,  # its schema: `capped` below
        ) -> ExportResult:
            """Export this conversation's consented memories (redacted), oldest first, a page at a
            time."""
            async with server.memory(ctx) as memory:
                page = await memory.export_memory(
                    identity=memory.identity, cursor=cursor, limit=limit
                )
            return ExportResult(
                entries=[dict(e) for e in page.entries], next_cursor=page.next_cursor
            )

        # caps known only now: set as evaluated annotations (the strings cannot name locals)
        capped = {
            recall: ("top_k", top_k_cap, "at most this many hits"),
            export_memory: ("limit", export_cap, "entries per page"),
        }
        for fn, (argument, cap, description) in capped.items():
            fn.__annotations__[argument] = Annotated[
                int, Field(strict=True, ge=1, le=cap, description=description)
            ]

        for fn, hints in (
            (remember, _WRITE),
            (recall, _READ),
            (forget, _DESTRUCTIVE),
            (revoke_consent, _WRITE),
            (restore_consent, _WRITE),
            (correct, _WRITE),
            (get_working_memory, _READ),
            (update_working_memory, _WRITE),
            (export_memory, _READ),
        ):
            self._tool(fn, hints)

        @self.prompt(
            name="memory_context",
            description="The memory block for a system prompt: the working-memory document and "
            "the memories relevant to `query`, in chronological order.",
        )
        async def memory_context(
            ctx: Context,
            query: Annotated[str, Field(description="what the next answer is about")] = "",
        ) -> str:
            try:
                async with server.memory(ctx) as memory:
                    provider = memory.context_provider(scope=server._context_scope)
                    text = await provider.render(query or None)
            except PrismMemoryError as exc:
                code = INVALID_PARAMS if isinstance(exc, ValidationError) else INTERNAL_ERROR
                raise MCPError(code, _one_line(exc)) from None
            except ToolError as exc:  # no identity: the same refusal as a tool's
                raise MCPError(INVALID_PARAMS, str(exc)) from None
            return text or "(no memory yet)"

        declared = inspect.signature(memory_context).parameters
        self._prompt_arguments["memory_context"] = frozenset(p for p in declared if p != "ctx")
