"""A large thread's search index built a slice at a time, so the event loop runs meanwhile."""

from __future__ import annotations

import anyio.lowlevel

from .._offload import OFFLOAD_CHARS, terms_of_texts
from ._memory_index import _SearchIndex
from ._memory_rows import _Thread

BUILD_SLICE = 1024
"""The event loop runs again after at most this many postings are added (a few ms)."""


async def build_index(thread: _Thread, width: int | None = None) -> None:
    """Build ``thread``'s search index before a search needs it, letting the event loop run
    between slices: the texts' missing terms on worker threads, then each row's postings
    :data:`BUILD_SLICE` terms at a time (a row of 16,000 characters of distinct words has
    ~2,000). Given up -- the search then builds it in one step, as for a small thread -- when a
    write to the thread comes in meanwhile. The index is the one the search would build."""
    index = thread.index
    if index is not None and (width is None or index.width is None or index.width == width):
        return
    writes = thread.writes
    rows = thread.indexed_rows()
    if sum(len(row.record.text) for row in rows) <= OFFLOAD_CHARS:
        return  # small: built in place when the search asks
    bare = [row.record for row in rows if not thread.has_terms(row.record)]
    made = await terms_of_texts([record.text for record in bare])
    if thread.writes != writes:
        return
    for record, terms in zip(bare, made, strict=True):
        thread.keep_terms(record.id, record.text, terms)
    built = _SearchIndex(width)
    for row in rows:
        assert row.vector is not None
        terms = thread.terms_of(row.record)
        at = built.add(row.record, row.vector, terms, row.windows, post=False)
        distinct = terms.distinct if at is not None else []
        for start in range(0, len(distinct), BUILD_SLICE):
            assert at is not None
            built.post(at, distinct[start : start + BUILD_SLICE])
            await anyio.lowlevel.checkpoint()
            if thread.writes != writes:
                return
    thread.index = built
