"""The memory server over stdio: the SDK's transport, with every line checked first.

Each line of stdin passes :func:`~._wire.refusal` before the SDK parses it: a malformed one (bad
JSON, a batch, a wrong ``jsonrpc``, string ``params``, nesting past 200, over 20 MiB) is answered
with one fixed JSON-RPC error instead of being dropped without a reply. A line past
:data:`~._wire.MAX_MESSAGE_BYTES` is dropped as it arrives, so an endless line never fills memory. When the
client closes the server's stdout, the server logs one line and returns instead of failing with
the task group's exception.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, JSONRPCError

from ._wire import MAX_MESSAGE_BYTES, TOO_LARGE, error_reply, refusal

__all__ = ["serve_stdio"]

logger = logging.getLogger("prism_memory.mcp")

_TOO_LONG = object()
_CHUNK = 1 << 16


def _lines(fd: int) -> Iterator[bytes | object]:
    """The lines of ``fd`` (``_TOO_LONG`` for one over the cap, whose bytes are dropped as they
    come); ``os.read`` on the descriptor, so no buffered object's lock is held by the thread."""
    pending = bytearray()
    dropping = False
    while True:
        try:
            chunk = os.read(fd, _CHUNK)
        except OSError:
            chunk = b""
        if not chunk:
            if dropping:
                yield _TOO_LONG
            elif pending:
                yield bytes(pending)
            return
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if dropping:
                dropping = False
                yield _TOO_LONG
            else:
                pending += chunk[start : end + 1]
                yield bytes(pending)
            pending.clear()
            start = end + 1
        if not dropping:
            pending += chunk[start:]
            if len(pending) > MAX_MESSAGE_BYTES:
                pending.clear()
                dropping = True


class _CheckedLines:
    """The acceptable lines of stdin for the SDK's stdio reader; the others are answered here,
    on the server's own write stream (so answers never interleave on stdout).

    A daemon thread reads the descriptor: a server that stops (its client closed stdout) is not
    held by a read that waits for input that never comes.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.replies: Any = None  # the transport's write stream, set once it is open
        self._received: MemoryObjectReceiveStream[bytes | object | None] | None = None

    def start(self) -> None:
        """Start the reading thread (inside the event loop that consumes the lines)."""
        sender, self._received = anyio.create_memory_object_stream[bytes | object | None](0)
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            try:
                for line in _lines(self._fd):
                    anyio.from_thread.run(sender.send, line, token=token)
                anyio.from_thread.run(sender.send, None, token=token)
            except Exception:  # noqa: BLE001, S110 - the loop is gone: no one left to feed
                pass

        threading.Thread(target=pump, name="prism-memory mcp stdin", daemon=True).start()

    def __aiter__(self) -> _CheckedLines:
        return self

    async def __anext__(self) -> str:
        assert self._received is not None, "start() first"
        while True:
            try:
                line = await self._received.receive()
            except anyio.EndOfStream:
                line = None
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
    lines = _CheckedLines(sys.stdin.fileno())
    lines.start()
    try:
        async with stdio_server(stdin=cast("Any", lines)) as (read_stream, write_stream):
            lines.replies = write_stream
            await server.run(read_stream, write_stream, server.create_initialization_options())
    except BaseExceptionGroup as group:
        _gone, rest = group.split(_client_gone)
        if rest is not None or _gone is None:
            raise
        logger.warning("client closed stdout; stopping")
