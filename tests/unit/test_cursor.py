"""Opaque page cursors: round trip and rejection of anything that is not ours."""

from __future__ import annotations

import base64
import json

import pytest

from prism_memory._cursor import decode_cursor, encode_cursor
from prism_memory.errors import ValidationError


def raw_cursor(payload) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "position", [(0, "a"), (42, "m_abc"), (2**62, "ünïcødé/🙂"), (7, ""), (-1, "x=y")]
)
def test_round_trip(position):
    cursor = encode_cursor("export", position)
    assert decode_cursor("export", cursor) == position


def test_cursor_is_url_safe_without_padding():
    cursor = encode_cursor("rebuild", (123456, "id/with+chars?"))
    assert "=" not in cursor
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_none_decodes_to_none():
    assert decode_cursor("export", None) is None


def test_a_cursor_of_another_kind_is_rejected():
    cursor = encode_cursor("rebuild", (3, "a"))
    with pytest.raises(ValidationError):
        decode_cursor("export", cursor)


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "!!!not base64!!!",
        "abc",
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        raw_cursor([1, "a"]),
        raw_cursor(5),
        raw_cursor({"v": 2, "k": "export", "s": 1, "i": "a"}),
        raw_cursor({"v": 1, "k": "export", "s": 1}),
        raw_cursor({"v": 1, "k": "export", "i": "a"}),
        raw_cursor({"v": 1, "k": "export", "s": "1", "i": "a"}),
        raw_cursor({"v": 1, "k": "export", "s": 1.5, "i": "a"}),
        raw_cursor({"v": 1, "k": "export", "s": 1, "i": 2}),
        raw_cursor({"v": 1, "s": 1, "i": "a"}),
    ],
)
def test_garbage_is_a_validation_error(garbage):
    with pytest.raises(ValidationError):
        decode_cursor("export", garbage)


def test_deeply_nested_garbage_is_a_validation_error():
    cursor = base64.urlsafe_b64encode(b"[" * 100_000).decode()
    with pytest.raises(ValidationError):
        decode_cursor("export", cursor)


def test_the_cursor_format_is_pinned():
    # cursors handed out by one release must decode in the next: compact JSON, URL-safe base64
    cursor = encode_cursor("export", (3, "a"))
    assert cursor == base64.urlsafe_b64encode(
        b'{"v":1,"k":"export","s":3,"i":"a"}'
    ).decode().rstrip("=")
    assert decode_cursor("export", raw_cursor({"v": 1, "k": "export", "s": 9, "i": "z"})) == (
        9,
        "z",
    )


def _cursor_of_length(length: int) -> str:
    # '{"v":1,"k":"export","s":0,"i":"' + id + '"}' is 33 bytes + the id; 4 characters per 3 bytes
    cursor = encode_cursor("export", (0, "x" * (length * 3 // 4 - 33)))
    assert len(cursor) == length
    return cursor


def test_a_cursor_of_1024_characters_is_accepted_and_a_longer_one_refused():
    assert decode_cursor("export", _cursor_of_length(1024)) == (0, "x" * 735)
    with pytest.raises(ValidationError):
        decode_cursor("export", _cursor_of_length(1028))


@pytest.mark.parametrize("kind", ["export", "rebuild"])
def test_a_cursor_of_the_right_kind_but_another_version_is_refused(kind):
    with pytest.raises(ValidationError):
        decode_cursor(kind, raw_cursor({"v": 2, "k": kind, "s": 1, "i": "a"}))
    assert decode_cursor(kind, raw_cursor({"v": 1, "k": kind, "s": 1, "i": "a"})) == (1, "a")
