"""SentenceTransformerReranker through sentence-transformers' real ``CrossEncoder``, on a tiny BERT
built and saved here (random weights, a WordPiece vocabulary written by the test): no download.

Random weights say nothing of relevance, so these tests check the mechanics: the scores are the
CrossEncoder's own, one per text, in order, batched, off the event loop, and recall orders by them.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built here, never fetched

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sentence_transformers = pytest.importorskip("sentence_transformers")

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory  # noqa: E402
from prism_memory.embedders import RetryPolicy  # noqa: E402
from prism_memory.embedders.cross_encoder import SentenceTransformerReranker  # noqa: E402
from prism_memory.errors import ConfigurationError, RerankerError  # noqa: E402

WORDS = [
    "the",
    "a",
    "user",
    "likes",
    "coffee",
    "tea",
    "garden",
    "rocket",
    "peanut",
    "allergy",
    "train",
    "leaves",
    "at",
    "nine",
    "budget",
    "falcon",
    "project",
    "deploy",
    "friday",
    "weather",
    "report",
    "lunch",
    "pasta",
]
TEXTS = [
    "the user likes coffee",
    "peanut allergy",
    "the train leaves at nine",
    "rocket budget",
    "falcon project deploy friday",
    "weather report",
    "lunch pasta",
]


def _tiny_bert(folder: Path, labels: int) -> Path:
    """A 1-layer, 16-wide BERT sequence classifier with ``labels`` outputs and its tokenizer."""
    folder.mkdir()
    vocab = folder / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    torch.manual_seed(7)
    config = transformers.BertConfig(
        vocab_size=5 + len(WORDS),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        initializer_range=0.2,  # spread the random scores so their order is clear
        num_labels=labels,
    )
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    # positional: the vocabulary file (``vocab_file`` before transformers 5, ``vocab`` since)
    tokenizer = transformers.BertTokenizer(str(vocab))
    assert tokenizer.unk_token_id not in tokenizer(" ".join(WORDS))["input_ids"]  # real word ids
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_bert(tmp_path_factory.mktemp("cross") / "tiny-bert", labels=1)


@pytest.fixture(scope="module")
def direct(tiny_model: Path) -> sentence_transformers.CrossEncoder:
    """The same model through sentence-transformers directly, to compare with."""
    return sentence_transformers.CrossEncoder(str(tiny_model), device="cpu")


def _expected(direct, query: str, texts: list[str]) -> np.ndarray:
    pairs = [(query, text) for text in texts]
    return np.asarray(direct.predict(pairs, show_progress_bar=False), dtype=np.float64)


async def test_scores_are_the_cross_encoders_own_one_per_text(tiny_model, direct):
    reranker = SentenceTransformerReranker(tiny_model, model_id="tiny-bert@test")
    scores = await reranker.rerank("coffee allergy", TEXTS)
    assert isinstance(scores, list)
    assert len(scores) == len(TEXTS)
    assert all(isinstance(score, float) for score in scores)
    np.testing.assert_allclose(scores, _expected(direct, "coffee allergy", TEXTS), rtol=1e-5)
    assert len(set(scores)) == len(scores)  # distinct: the order below is decided by them
    assert await reranker.rerank("coffee", []) == []


async def test_pairs_are_scored_in_capped_batches_off_the_event_loop(tiny_model, direct):
    reranker = SentenceTransformerReranker(tiny_model, model_id="tiny-bert", batch_size=3)
    sizes: list[int] = []
    threads: list[int] = []
    original = reranker._predict

    def spy(pairs: list[tuple[str, str]]):
        sizes.append(len(pairs))
        threads.append(threading.get_ident())
        return original(pairs)

    reranker._predict = spy  # type: ignore[method-assign]
    scores = await reranker.rerank("train budget", TEXTS)
    assert sizes == [3, 3, 1]
    assert threading.get_ident() not in threads
    np.testing.assert_allclose(scores, _expected(direct, "train budget", TEXTS), rtol=1e-5)


async def test_recall_orders_its_hits_by_the_cross_encoder(tiny_model, direct):
    reranker = SentenceTransformerReranker(tiny_model, model_id="tiny-bert@test")
    memory = create_memory(
        tenant_id="t",
        resource_id="r",
        thread_id="th",
        embedder=HashEmbedder(dimensions=32),
        vector_store=InMemoryVectorStore(),
        reranker=reranker,
    )
    await memory.remember([{"id": f"e{i}", "text": t} for i, t in enumerate(TEXTS)], wait=True)
    result = await memory.recall("coffee train", top_k=3, explain=True)
    # 7 entries, 4 x 3 = 12 fetched: every entry is scored; the best 3 by its score are the hits
    expected = _expected(direct, "coffee train", TEXTS)
    best = [f"e{i}" for i in np.argsort(-expected, kind="stable")[:3]]
    assert [hit.id for hit in result.hits] == best
    np.testing.assert_allclose(
        [hit.rerank_score for hit in result.hits], sorted(expected, reverse=True)[:3], rtol=1e-5
    )
    assert result.explanations is not None
    assert [e.reranker for e in result.explanations] == ["tiny-bert@test"] * 3
    assert "tiny-bert@test" in result.explanations[0].how["rerank"]
    await memory.aclose()


async def test_a_model_with_several_labels_is_refused(tmp_path, tiny_model):
    two = _tiny_bert(tmp_path / "two-labels", labels=2)
    reranker = SentenceTransformerReranker(two, model_id="two-labels")
    with pytest.raises(RerankerError, match="more than one score"):
        await reranker.rerank("coffee", TEXTS[:2])


async def test_a_model_error_is_retried_then_typed(tiny_model):
    flaky = SentenceTransformerReranker(
        tiny_model, model_id="tiny", retry=RetryPolicy(max_attempts=2, backoff_seconds=0.01)
    )
    calls = 0

    def failing(pairs):
        nonlocal calls
        calls += 1
        raise RuntimeError("out of memory while reading: the user likes coffee")

    flaky._predict = failing  # type: ignore[method-assign]
    with pytest.raises(RerankerError) as caught:
        await flaky.rerank("coffee", ["the user likes coffee"])
    assert caught.value.transient
    assert calls == 2
    assert "coffee" not in str(caught.value)


async def test_cancellation_returns_promptly(tiny_model):
    slow = SentenceTransformerReranker(tiny_model, model_id="tiny")
    gate = threading.Event()
    slow._predict = lambda pairs: gate.wait(5) and [0.0] * len(pairs)  # type: ignore[method-assign]
    task = asyncio.ensure_future(slow.rerank("coffee", ["tea"]))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.set()


def test_configuration_is_checked_up_front(tiny_model, tmp_path):
    with pytest.raises(ConfigurationError, match="model_id"):
        SentenceTransformerReranker(tiny_model)
    with pytest.raises(ConfigurationError, match="depth"):
        SentenceTransformerReranker(tiny_model, model_id="tiny", depth=0)
    with pytest.raises(ConfigurationError, match="batch_size"):
        SentenceTransformerReranker(tiny_model, model_id="tiny", batch_size=129)
    with pytest.raises(ConfigurationError, match="max_length"):
        SentenceTransformerReranker(tiny_model, model_id="tiny", max_length=0)


async def test_a_missing_model_is_a_configuration_error(tmp_path):
    missing = SentenceTransformerReranker(tmp_path / "nothing-here", model_id="missing")
    with pytest.raises(ConfigurationError, match="cannot load"):
        await missing.rerank("coffee", ["tea"])
