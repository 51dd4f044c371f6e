"""The raw JSON-RPC messages a memory server accepts, checked before the MCP SDK sees them.

The SDK answers a malformed message over HTTP with its validation text (which repeats the request,
secrets included) and over stdio with nothing at all (a client without a timeout waits forever).
Both transports pass every raw message through :func:`refusal` first: a message it refuses gets
one fixed JSON-RPC error -- ``-32700`` (parse error) or ``-32600`` (invalid request) -- whose text
never repeats anything of the request. Only the request's ``id`` comes back, when it is a valid
one, so that the client can match the answer to its request.

The size is bounded before parsing (:data:`MAX_MESSAGE_BYTES`) and the parser (pydantic-core's,
the SDK's own) refuses nesting deeper than 200 levels without recursing into it, so neither a huge
nor a deeply nested message can exhaust the server.
"""

from __future__ import annotations

import json
from typing import Any, Final

import pydantic
import pydantic_core
from mcp_types import INVALID_REQUEST, PARSE_ERROR, jsonrpc_message_adapter

__all__ = ["MAX_MESSAGE_BYTES", "encode", "error_reply", "refusal"]

MAX_MESSAGE_BYTES: Final = 20 * 1024 * 1024
"""The largest message either transport accepts: 20 MiB, room for the largest call the tools'
schemas allow (``remember`` of 100 texts of 16,000 characters, each escaped as ``\\uXXXX``
surrogate pairs) and little more."""

NOT_JSON: Final = "Parse error: the message is not valid UTF-8 JSON nested at most 200 levels deep"
TOO_LARGE: Final = "Invalid Request: a message may be at most 20 MiB"
BATCH: Final = "Invalid Request: JSON-RPC batches are not supported; send one message at a time"
NOT_OBJECT: Final = "Invalid Request: a message must be one JSON object"
VERSION: Final = 'Invalid Request: jsonrpc must be "2.0"'
BAD_ID: Final = "Invalid Request: id must be a string or an integer"
BAD_METHOD: Final = "Invalid Request: method must be a string"
BAD_PARAMS: Final = "Invalid Request: params must be an object"
NOT_MESSAGE: Final = "Invalid Request: not a JSON-RPC request, notification or response"


def _valid_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _shape_problem(message: dict[str, Any]) -> str | None:
    if message.get("jsonrpc") != "2.0":
        return VERSION
    request_id = message.get("id")
    null_error_id = request_id is None and "error" in message  # an error reply may carry null
    if "id" in message and not _valid_id(request_id) and not null_error_id:
        return BAD_ID
    if "method" in message:
        if not isinstance(message["method"], str):
            return BAD_METHOD
        if "params" in message and not isinstance(message["params"], dict):
            return BAD_PARAMS
    elif "id" not in message or ("result" not in message and "error" not in message):
        return NOT_MESSAGE
    try:
        jsonrpc_message_adapter.validate_python(message, by_name=False)
    except pydantic.ValidationError:
        return NOT_MESSAGE
    return None


def refusal(raw: bytes | str) -> dict[str, Any] | None:
    """The JSON-RPC error object answering ``raw``, or ``None`` when the message is acceptable.

    Never raises; the error's message is one of this module's fixed texts.
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_MESSAGE_BYTES:
        return error_reply(INVALID_REQUEST, TOO_LARGE)
    try:
        data.decode("utf-8")
        message: Any = pydantic_core.from_json(data)
    except ValueError:  # bad UTF-8, bad JSON, a lone surrogate escape, nesting over 200
        return error_reply(PARSE_ERROR, NOT_JSON)
    if isinstance(message, list):
        return error_reply(INVALID_REQUEST, BATCH)
    if not isinstance(message, dict):
        return error_reply(INVALID_REQUEST, NOT_OBJECT)
    problem = _shape_problem(message)
    if problem is None:
        return None
    request_id = message.get("id") if _valid_id(message.get("id")) else None
    return error_reply(INVALID_REQUEST, problem, request_id)


def error_reply(code: int, text: str, request_id: str | int | None = None) -> dict[str, Any]:
    """A JSON-RPC error response with ``code`` and the fixed ``text``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def encode(reply: dict[str, Any]) -> bytes:
    """``reply`` as compact JSON bytes."""
    return json.dumps(reply, separators=(",", ":")).encode("utf-8")
