"""A file's lines, read in chunks so no line over a limit is ever held whole, and what names the
file in a checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import ValidationError
from ..limits import CEILINGS
from ._entry import Located, RawVector
from ._service import ImportLineError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "FileEntries",
    "ReadMeter",
    "check_limit",
    "file_identity",
    "json_lines",
    "loads_entry",
    "located",
]

MAX_LINE_BYTES = 8 * CEILINGS["payload_bytes"]
"""The longest line (8 MiB) :func:`~prism_memory.importing.read_jsonl` reads: the largest entry
payload an import takes (``payload_bytes``' 1 MiB ceiling) JSON-escaped at worst (6 bytes per
byte), with a 16,000-dimension vector and the other fields."""
MAX_DOCUMENT_BYTES = 2 * CEILINGS["export_bytes"]
"""The longest line (64 MiB) :func:`~prism_memory.importing.read_export` and
:func:`~prism_memory.importing.read_mem0` read, whose lines may each hold a whole export page
(``export_bytes``' 32 MiB ceiling, escaped) or a JSON document; also the largest file either takes
as one pretty-printed JSON document."""

_CHUNK = 64 * 1024
_HEAD = 64 * 1024
"""Bytes of a file's start its fingerprint covers."""

Source = str | os.PathLike[str] | IO[str]


class _Lines:
    """The physical lines (split at ``\\n``) of a text or binary handle, read ``_CHUNK`` at a time;
    a line longer than ``limit`` bytes is refused once its first ``limit + 1`` bytes are read."""

    def __init__(self, handle: IO[Any], limit: int) -> None:
        self._handle = handle
        self.limit = limit
        self.number = 0
        self._piece = b""
        self._at = 0

    def _more(self) -> bool:
        piece = self._handle.read(_CHUNK)
        if isinstance(piece, str):
            piece = piece.encode("utf-8", "surrogatepass")
        self._piece, self._at = piece, 0
        return bool(piece)

    def _too_long(self, what: str) -> ImportLineError:
        return ImportLineError(
            f"line {self.number}: {what} is longer than the line limit of {self.limit} bytes "
            "(max_line_bytes, --max-line-bytes)",
            line=self.number,
        )

    def next_line(self) -> bytes | None:
        """The next line without its ``\\n``, or ``None`` at the end of the file."""
        self.number += 1
        parts: list[bytes] = []
        size = 0
        while True:
            if self._at >= len(self._piece) and not self._more():
                return b"".join(parts) if parts else None
            end = self._piece.find(b"\n", self._at)
            stop = len(self._piece) if end < 0 else end
            size += stop - self._at
            if size > self.limit:
                raise self._too_long("the line")
            parts.append(self._piece[self._at : stop])
            self._at = stop if end < 0 else end + 1
            if end >= 0:
                return b"".join(parts)

    def rest(self, held: int) -> bytes:
        """The rest of the file after the current line, refused when ``held`` bytes and it are
        over the limit (a JSON document read whole)."""
        parts: list[bytes] = []
        size = held
        while self._at < len(self._piece) or self._more():
            chunk = self._piece[self._at :]
            self._at = len(self._piece)
            size += len(chunk)
            if size > self.limit:
                raise self._too_long("the JSON document starting on this line")
            parts.append(chunk)
        return b"".join(parts)


def _decode(raw: bytes, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportLineError(f"line {number}: not valid UTF-8", line=number) from None


def check_limit(limit: object) -> int:
    """``limit`` as a line limit: a positive integer (:class:`ValidationError` otherwise)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError("max_line_bytes must be a positive integer")
    return limit


_VECTOR_KEY = re.compile(r'"vector"\s*:\s*\[')
_MARK = uuid.uuid4().hex
"""What stands for a cut-out vector while the rest of its line is parsed: a string no file holds
(it is drawn afresh by each process)."""


def loads_entry(text: str) -> Any:
    """``json.loads(text)``, except that a top-level ``"vector"`` array of plain numbers is cut
    out before the rest is parsed and comes back as a :class:`RawVector` (parsing ~400 numbers is
    nine tenths of a line's JSON, and a re-import needs none of it). The cut is taken only when it
    is unambiguous -- one ``"vector": [`` in the line, no string, object or array inside it up to
    its ``]`` (so the cut splits no token of the rest), and the parsed rest holding the mark at
    its top level -- else the whole line is parsed. The cut text is parsed as JSON when its entry
    turns out new: what is not a JSON array of numbers is refused then, naming the line."""
    found = _VECTOR_KEY.search(text)
    if found is not None:
        start = found.end() - 1
        end = text.find("]", start)
        inside = text[start + 1 : end]
        if (
            end > 0
            and '"' not in inside
            and "{" not in inside
            and "[" not in inside
            and _VECTOR_KEY.search(text, end) is None
        ):
            try:
                rest = json.loads(f'{text[:start]}"{_MARK}"{text[end + 1 :]}')
            except ValueError:
                rest = None
            if isinstance(rest, dict) and rest.get("vector") == _MARK:
                rest["vector"] = RawVector(text[start : end + 1])
                return rest
    return json.loads(text)


class ReadMeter:
    """How far a reader is in its file: ``consumed`` bytes of lines read so far, of ``size`` (the
    file's, ``None`` when the source is no file whose size is known)."""

    __slots__ = ("consumed", "size")

    def __init__(self, source: Source | None) -> None:
        self.consumed = 0
        self.size: int | None = None
        try:
            if source is None:
                pass
            elif isinstance(source, str | os.PathLike):
                self.size = os.stat(source).st_size
            elif hasattr(source, "fileno"):
                self.size = os.fstat(source.fileno()).st_size
        except (OSError, ValueError):
            self.size = None


def json_lines(
    source: Source,
    limit: int,
    decode: Callable[[str], Any] = json.loads,
    meter: ReadMeter | None = None,
) -> Iterator[tuple[int, Any, bool]]:
    """``(line number, decoded JSON, False)`` of each non-blank line (JSONL), or -- when the first
    such line is not a JSON document on its own (a pretty-printed file) -- ``(its number, the
    whole file decoded, True)``. Line numbers are the file's physical ones, blank lines counted;
    no line (and no document) over ``limit`` bytes is held whole. Each line is decoded by
    ``decode`` (:func:`loads_entry` for JSONL entries); ``meter`` counts the bytes read."""
    handle = open(source, "rb") if isinstance(source, str | os.PathLike) else source  # noqa: SIM115
    meter = meter if meter is not None else ReadMeter(None)
    try:
        lines = _Lines(handle, limit)
        first = True
        while (raw := lines.next_line()) is not None:
            number = lines.number
            meter.consumed += len(raw) + 1
            if not raw.strip():
                continue
            text = _decode(raw, number)
            try:
                decoded = decode(text)
            except ValueError as exc:
                if not first:
                    raise ImportLineError(f"line {number}: not valid JSON", line=number) from exc
                text = _decode(raw + b"\n" + lines.rest(len(raw) + 1), number)
                meter.consumed += len(text)
                try:
                    decoded = json.loads(text)
                except ValueError:
                    raise ImportLineError(f"line {number}: not valid JSON", line=number) from exc
                yield number, decoded, True
                return
            first = False
            yield number, decoded, False
    finally:
        if handle is not source:
            handle.close()


def located(fields: dict[str, Any], number: int, position: int | None = None) -> Located:
    """``fields`` with where they stand: line ``number``, entry ``position`` of a JSON value
    holding several (a document, an array, a page)."""
    where = f"line {number}" if position is None else f"line {number}, entry {position}"
    return Located(fields, number, where)


def file_identity(source: Source, reader: str, **options: Any) -> str | None:
    """What names a file source in a checkpoint: the reader and its options (a digest), the
    file's resolved path, size, modification time and a digest of its first 64 KiB. ``None`` for
    a handle that is no named file."""
    path = source if isinstance(source, str | os.PathLike) else getattr(source, "name", None)
    if not isinstance(path, str | os.PathLike):
        return None
    where = Path(path).resolve()
    try:
        status = where.stat()
        with where.open("rb") as handle:
            head = handle.read(_HEAD)
    except OSError:
        return None
    settings = json.dumps(options, sort_keys=True, default=str).encode()
    return json.dumps(
        {
            "reader": reader,
            "options": hashlib.sha256(settings).hexdigest()[:32],
            "path": str(where),
            "size": status.st_size,
            "mtime_ns": status.st_mtime_ns,
            "head": hashlib.sha256(head).hexdigest()[:32],
        },
        sort_keys=True,
    )


class FileEntries(Iterator[dict[str, Any]]):
    """The entries a reader yields from a file, and ``source_id``: what names the file (and the
    reader's options) in an import's checkpoint (:func:`file_identity`, computed when first
    asked), so a checkpoint left by another file is not resumed; :meth:`estimated_total` tells a
    progress bar how many entries the file holds."""

    __slots__ = ("_entries", "_identity", "_known", "_meter", "_yielded")

    def __init__(
        self,
        entries: Iterator[dict[str, Any]],
        identity: Callable[[], str | None],
        meter: ReadMeter | None = None,
    ) -> None:
        self._entries = entries
        self._identity = identity
        self._known: list[str | None] = []
        self._meter = meter
        self._yielded = 0

    def __next__(self) -> dict[str, Any]:
        entry = next(self._entries)
        self._yielded += 1
        return entry

    def estimated_total(self) -> int | None:
        """How many entries the file holds: exact once it is read to its end, else the entries
        so far scaled by the share of the file's bytes they took; ``None`` before the first entry
        or when the file's size is unknown (a pipe, a handle of no file)."""
        meter = self._meter
        if meter is None or meter.size is None or not self._yielded or not meter.consumed:
            return None
        if meter.consumed >= meter.size:
            return self._yielded
        return max(self._yielded, round(self._yielded * meter.size / meter.consumed))

    @property
    def source_id(self) -> str | None:
        """The file's identity, or ``None`` for a handle that is no named file."""
        if not self._known:
            self._known.append(self._identity())
        return self._known[0]
