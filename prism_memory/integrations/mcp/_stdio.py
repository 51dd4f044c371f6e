"""The memory server over stdio: the SDK's transport, with every line checked first.

Each line of stdin passes :func:`~._wire.refusal` before the SDK parses it: a malformed one (bad
JSON, a batch, a wrong ``jsonrpc``, string ``params``, nesting past 200, over 4 MiB) is answered
with one fixed JSON-RPC error instead of being dropped without a reply. A line is read at most
:data:`~._wire.MAX_MESSAGE_BYTES` at a time, so an endless line never fills memory. When the
client closes the server's stdout, the server logs one line and returns instead of failing with
the task group's exception.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, JSONRPCError

from ._wire import MAX_MESSAGE_BYTES, TOO_LARGE, error_reply, refusal

__all__ = ["serve_stdio"]

logger = logging.getLogger("prism_memory.mcp")

_TOO_LONG = object()


class _CheckedLines:
    """The acceptable lines of ``buffer`` for the SDK's stdio reader; the others are answered
    here, on the server's own write stream (so answers never interleave on stdout)."""

    def __init__(self, buffer: BinaryIO) -> None:
        self._buffer = buffer
        self.replies: Any = None  # the transport's write stream, set once it is open

    def _read_line(self) -> bytes | object | None:
        line = self._buffer.readline(MAX_MESSAGE_BYTES + 1)
        if not line:
            return None
        if len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n"):
            while True:  # drop the rest of the line, a bounded piece at a time
                rest = self._buffer.readline(MAX_MESSAGE_BYTES)
                if not rest or rest.endswith(b"\n"):
                    return _TOO_LONG
        return line

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anyio.to_thread.run_sync(self._read_line, abandon_on_cancel=True)
            if line is None:
                raise StopAsyncIteration
            if line is _TOO_LONG:
                reply: dict[str, Any] | None = error_reply(INVALID_REQUEST, TOO_LARGE)
            else:
                assert isinstance(line, bytes)
                if not line.strip():
                    continue
                reply = refusal(line)
                if reply is None:
                    return line.decode("utf-8")
            await self.replies.send(SessionMessage(JSONRPCError.model_validate(reply)))


def _client_gone(exc: BaseException) -> bool:
    return isinstance(exc, BrokenPipeError | ConnectionResetError | anyio.BrokenResourceError)


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` (the SDK's low-level server) over stdin/stdout until stdin ends or the
    client closes stdout."""
    lines = _CheckedLines(sys.stdin.buffer)
    try:
        async with stdio_server(stdin=cast("Any", lines)) as (read_stream, write_stream):
            lines.replies = write_stream
            await server.run(read_stream, write_stream, server.create_initialization_options())
    except BaseExceptionGroup as group:
        _gone, rest = group.split(_client_gone)
        if rest is not None or _gone is None:
            raise
        logger.warning("prism-memory mcp: the client closed stdout; the server stops")
