"""Conformance checks of recall's optional reranking stage (:mod:`prism_memory.reranking`).

A reranker is the host's model: whatever a store selects and the fusion orders is handed to it,
so these checks make sure, on every backend, that it is shown only entries that passed every
exclusion rule, that its order decides the hits before the cut to ``top_k`` and that its failures
are typed. :class:`RecordingReranker` is the test double they use (hosts may use it too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from ..errors import ConfigurationError, RerankerError
from ..indexing import IndexingPolicy
from ._support import ConformanceKit, _Case, _check, _raises

__all__ = ["RERANK_CHECKS", "RecordingReranker"]


class RecordingReranker:
    """A reranker that scores each text with ``score(text)`` and records every call it gets.

    ``calls`` holds ``(query, texts)`` per call, so a test can say exactly what the reranker was
    shown. ``score`` defaults to the text's length (longer first); ``depth`` bounds how many
    candidates it is shown (see :class:`~prism_memory.reranking.Reranker`).
    """

    def __init__(
        self,
        score: Callable[[str], Any] | None = None,
        *,
        model: str = "recording-reranker",
        depth: int | None = None,
    ) -> None:
        self.model = model
        self.depth = depth
        self._score = score or (lambda text: float(len(text)))
        self.calls: list[tuple[str, list[str]]] = []

    @property
    def shown(self) -> list[str]:
        """Every text any call was shown, in order."""
        return [text for _, texts in self.calls for text in texts]

    async def rerank(self, query: str, texts: Sequence[str]) -> Any:
        """``score(text)`` of each text, after recording the call."""
        self.calls.append((query, list(texts)))
        return [self._score(text) for text in texts]


_WORDS = ("pear", "fig", "kiwi", "lime", "plum", "date", "yuzu", "sloe")


async def reranker_orders_the_fused_best_before_the_cut(kit: ConformanceKit) -> None:
    """A reranker reorders the fused best ``4 × top_k`` (or its ``depth``) and then the cut is
    made: an entry the fusion ranked below ``top_k`` can lead. Fused scores are kept, ties go by
    sequence then id, and ``explain`` names the reranker and its score."""
    case = _Case(kit)
    texts = {f"e{i}": f"orchard {_WORDS[i]} note {i}" for i in range(8)}
    memory = case.memory()
    await memory.remember([{"id": i, "text": t} for i, t in texts.items()], wait=True)
    plain = await memory.recall("orchard", top_k=2, explain=True)
    fused = [hit.id for hit in (await memory.recall("orchard", top_k=8)).hits]
    _check(all(hit.rerank_score is None for hit in plain.hits), "no reranker: no rerank score")
    _check(all(e.reranker is None for e in plain.explanations or ()), "nor a reranker named")
    # the reranker likes the fusion's last two candidates best: they lead, past the cut at 2
    wanted = {texts[fused[-1]]: 2.0, texts[fused[-2]]: 1.0}
    reranker = RecordingReranker(lambda text: wanted.get(text, 0.0), model="likes-the-last")
    got = await memory.recall("orchard", top_k=2, reranker=reranker, explain=True)
    order = [hit.id for hit in got.hits]
    _check(order == [fused[-1], fused[-2]], f"reranked order {order}, fused {fused}")
    _check(len(reranker.calls) == 1, "one call per recall")
    query, shown = reranker.calls[0]
    _check(query == "orchard", "the reranker is given the query")
    _check(shown == [texts[i] for i in fused], "it is shown the fused order, all 8 candidates")
    _check([hit.rerank_score for hit in got.hits] == [2.0, 1.0], "each hit has its score")
    fused_scores = {hit.id: hit.score for hit in (await memory.recall("orchard", top_k=8)).hits}
    _check(all(hit.score == fused_scores[hit.id] for hit in got.hits), "fused scores are kept")
    explained = got.explanations or ()
    _check(len(explained) == 2, "one explanation per hit")
    _check(all(e.reranker == "likes-the-last" for e in explained), "explain names the reranker")
    _check([e.rerank_score for e in explained] == [2.0, 1.0], "and its score per hit")
    _check([e.rank for e in explained] == [1, 2], "ranks are the reranked order")
    _check(all("likes-the-last" in e.how["rerank"] for e in explained), "how says it reordered")
    # ties (all 0) go by sequence, then id: the remember order
    flat = RecordingReranker(lambda text: 0, model="flat")
    tied = await memory.recall("orchard", top_k=3, reranker=flat)
    _check([h.id for h in tied.hits] == ["e0", "e1", "e2"], "ties by sequence")
    # depth bounds what it is shown (never fewer than top_k), and the memory's own reranker
    shallow = RecordingReranker(lambda text: -len(text), model="shallow", depth=3)
    own = case.memory(reranker=shallow)
    hits = (await own.recall("orchard", top_k=2)).hits
    _check(shallow.calls[-1][1] == [texts[i] for i in fused[:3]], "depth 3: the fused best 3")
    _check({h.id for h in hits} <= set(fused[:3]), "the hits come from what it was shown")
    await own.recall("orchard", top_k=5)
    _check(len(shallow.calls[-1][1]) == 5, "never fewer than top_k")
    empty = RecordingReranker()
    lonely = case.memory(thread="thread-empty")
    _check(not (await lonely.recall("orchard", reranker=empty)).hits, "an empty thread: no hit")
    _check(not empty.calls, "no candidates: the reranker is not called")
    for opened in (memory, own, lonely):
        await opened.aclose()


async def reranker_sees_only_recallable_entries(kit: ConformanceKit) -> None:
    """Revoked, invisible, forgotten, held, invalidated, non-consented, expired, not-yet-embedded,
    other threads' and ungranted parent entries never reach the reranker; text it sees is
    scrubbed."""
    case = _Case(kit)
    now = case.clock()
    reranker = RecordingReranker()
    memory = case.memory(retention_days=30, reranker=reranker)
    old = now - timedelta(days=40)
    entries: list[dict[str, Any]] = [
        {"id": "ok", "text": "zebra visible fact", "consent": {"source": "user"}},
        {"id": "legacy", "text": "zebra legacy fact"},  # no consent: out when it is required
        {"id": "hidden", "text": "zebra invisible fact", "consent": {"visible": False}},
        {"id": "revoked", "text": "zebra revoked fact", "consent": {"source": "user"}},
        {"id": "derived", "text": "zebra derived fact", "lineage": {"source_ids": ["revoked"]}},
        {"id": "forgotten", "text": "zebra forgotten fact", "consent": {"source": "user"}},
        {"id": "held", "text": "zebra held fact", "consent": {"source": "user"}},
        {"id": "expired", "text": "zebra expired fact", "occurred_at": old, "consent": {}},
        {"id": "secret", "text": "zebra token sk-zz-123 fact", "consent": {"source": "user"}},
    ]
    await memory.remember(entries, wait=True)
    await memory.set_consent("revoked", visible=False)
    await memory.forget(ids=["forgotten"])
    await memory.forget(ids=["held"], hold=True)
    other = case.memory(thread="thread-2")
    await other.remember([{"id": "o1", "text": "zebra other thread fact"}], wait=True)
    parent = case.memory(thread="parent")
    await parent.remember(
        [{"id": "p1", "text": "zebra granted fact"}, {"id": "p2", "text": "zebra ungranted fact"}],
        wait=True,
    )
    await parent.share_with("thread-1", ["p1"])
    # then only a worker-only memory writes on thread-3: its entry stays pending (no vector)
    writer = case.memory(thread="thread-3")
    await writer.remember([{"id": "indexed", "text": "zebra indexed fact"}], wait=True)
    await writer.aclose()
    worker_only = case.memory(
        thread="thread-3", indexing=IndexingPolicy(in_process=False), reranker=reranker
    )
    await worker_only.remember([{"id": "pending", "text": "zebra pending fact"}])
    scrubbing = case.memory(reranker=reranker, secrets=["sk-zz-123"], retention_days=30)

    await memory.recall("zebra fact", top_k=8)
    await memory.recall("zebra fact", top_k=8, require_consent=True)
    await memory.recall("zebra fact", top_k=8, share_from_parent_thread_id="parent")
    await scrubbing.recall("zebra fact", top_k=8)
    pending = await worker_only.recall("zebra fact", top_k=8)
    _check(pending.pending == 1, "the pending entry is still pending")
    seen = set(reranker.shown)
    shown = ("zebra visible fact", "zebra legacy fact", "zebra granted fact", "zebra indexed fact")
    for text in shown:
        _check(text in seen, "the reranker is shown the recallable entries")
    never = [e["text"] for e in entries if e["id"] not in ("ok", "legacy", "secret")]
    never += ["zebra other thread fact", "zebra ungranted fact", "zebra pending fact"]
    leaked = sorted(text for text in never if text in seen)
    _check(not leaked, f"excluded entries reached the reranker: {leaked}")
    strict = reranker.calls[1][1]
    _check("zebra legacy fact" not in strict, "consent required: the legacy entry is not shown")
    _check(any(text.startswith("zebra token") for text in seen), "the own memory's text as is")
    _check("sk-zz-123" not in " ".join(reranker.calls[3][1]), "a scrubbing memory shows scrubbed")
    for opened in (memory, other, parent, worker_only, scrubbing):
        await opened.aclose()


class _Failing:
    model = "failing"

    async def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        raise ValueError(f"cannot score {query} against {texts[0]}")


class _Sync:
    model = "sync"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        return [0.0] * len(texts)


async def reranker_errors_are_typed(kit: ConformanceKit) -> None:
    """A failing reranker raises :class:`RerankerError` with its exception as the cause; a wrong
    count, a non-finite score, booleans or non-numbers too; none quotes the query, a text or a
    score. A reranker that is no :class:`~prism_memory.reranking.Reranker` is refused up front."""
    case = _Case(kit)
    memory = case.memory()
    await memory.remember(
        [{"id": "a", "text": "quokka alpha"}, {"id": "b", "text": "quokka beta"}], wait=True
    )
    error = await _raises(
        RerankerError, memory.recall("quokka", reranker=_Failing()), "a failing reranker"
    )
    _check(isinstance(error.__cause__, ValueError), "its exception is the cause")
    _check("quokka" not in str(error), "the message quotes neither the query nor a text")
    bad: list[tuple[str, Callable[[str], Any] | None, Any]] = [
        ("nan", lambda text: float("nan"), None),
        ("inf", lambda text: float("inf"), None),
        ("bool", lambda text: True, None),
        ("text", lambda text: "7.5", None),
        ("nested", lambda text: [1.0], None),
    ]
    for name, score, _ in bad:
        refused = await _raises(
            RerankerError,
            memory.recall("quokka", reranker=RecordingReranker(score, model=name)),
            f"a {name} score",
        )
        _check("7.5" not in str(refused) and "quokka" not in str(refused), "no value quoted")

    class _Short(RecordingReranker):
        async def rerank(self, query: str, texts: Sequence[str]) -> Any:
            return [1.0] * (len(texts) - 1)

    await _raises(RerankerError, memory.recall("quokka", reranker=_Short()), "a wrong count")
    wrongs: tuple[tuple[str, Any], ...] = (
        ("a sync rerank", _Sync()),
        ("no model", RecordingReranker(model="")),
        ("no rerank", object()),
        ("a depth of 0", RecordingReranker(depth=0)),
        ("a depth over 128", RecordingReranker(depth=129)),
    )
    for name, wrong in wrongs:
        await _raises(ConfigurationError, memory.recall("quokka", reranker=wrong), name)
        try:
            case.memory(reranker=wrong)
        except ConfigurationError:
            pass
        else:
            raise AssertionError(f"create_memory accepted {name}")
    await memory.aclose()


RERANK_CHECKS = {
    "reranker_orders_the_fused_best_before_the_cut": reranker_orders_the_fused_best_before_the_cut,
    "reranker_sees_only_recallable_entries": reranker_sees_only_recallable_entries,
    "reranker_errors_are_typed": reranker_errors_are_typed,
}
"""The reranking stage's checks, by name."""
