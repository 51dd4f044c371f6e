"""The framework examples in ``examples/`` run offline, on both backends, and do what they say:
recalled memories reach the model as one chronological system block, the turn is remembered
afterwards, and a user's facts follow them into their other conversations."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, SystemPromptPart, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from prism_memory import HashEmbedder, InMemoryVectorStore, create_memory, entry_digest
from prism_memory.context import SEMANTIC_HEADER

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"prism_examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


pydantic_example = load("pydantic_ai_memory")
langgraph_example = load("langgraph_memory")

# Remembered in this order (so this is the chronological order); the query below matches the last
# one best and the first one least, so score order and chronological order differ.
FACTS = [
    "Ada's cat is called Pixel",
    "Ada is allergic to peanuts and to cats",
    "Ada is allergic to peanuts: no peanut snacks, ever",
]
QUERY = "which snacks are bad for my peanut allergy?"


@pytest.fixture(params=["memory", "postgres"])
async def vector_store(request: pytest.FixtureRequest):
    if request.param == "memory":
        return InMemoryVectorStore()
    make_postgres_stores = request.getfixturevalue("make_postgres_stores")
    return (await make_postgres_stores(dimension=64)).vector_store


def memory_of(store, thread: str):
    return create_memory(
        tenant_id="acme",
        resource_id="user-ada",
        thread_id=thread,
        embedder=HashEmbedder(dimensions=64),
        vector_store=store,
    )


async def seed(store) -> None:
    async with memory_of(store, "chat-1") as chat1:
        await chat1.remember(
            [{"text": text, "consent": {"scope": "user"}} for text in FACTS]
            + [{"text": "peanut snacks were discussed in chat one only"}],
            wait=True,
        )


def memory_lines(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("- ")]


async def test_pydantic_ai_example_runs(vector_store):
    answers = await pydantic_example.main(vector_store)
    assert answers[1] == "I remember: Ada is allergic to peanuts"


async def test_pydantic_ai_gets_one_chronological_memory_block_and_remembers_the_turn(vector_store):
    await seed(vector_store)
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("Avoid anything with peanuts.")])

    agent = pydantic_example.build_agent(FunctionModel(model))
    async with memory_of(vector_store, "chat-2") as chat2:
        answer = await pydantic_example.chat_turn(agent, chat2, QUERY)
        assert answer == "Avoid anything with peanuts."
        blocks = [
            part.content
            for message in seen[0]
            for part in getattr(message, "parts", ())
            if isinstance(part, SystemPromptPart) and SEMANTIC_HEADER in part.content
        ]
        assert len(blocks) == 1
        assert memory_lines(blocks[0]) == FACTS  # chronological, the thread-only entry left out
        ranked = await chat2.recall(QUERY, scope="resource")
        assert [hit.text for hit in ranked.hits] != FACTS  # so the block is not in score order
        for role, text in (("user", QUERY), ("assistant", answer)):
            stored = await chat2.get(entry_digest(role, text))
            assert stored.thread_id == "chat-2"
            assert stored.effective_consent.scope == "thread"


async def test_langgraph_example_runs(vector_store):
    answers = await langgraph_example.main(vector_store)
    assert answers == ["I remember: Ada prefers answers in French"]


async def test_langgraph_nodes_recall_one_chronological_block_and_remember(vector_store):
    await seed(vector_store)
    blocks: list[str] = []

    async def model(block: str, user_message: str) -> str:
        blocks.append(block)
        assert user_message == QUERY
        return "No peanut snacks."

    graph = langgraph_example.build_graph(model)
    async with memory_of(vector_store, "chat-2") as chat2:
        state = await graph.ainvoke(
            {"messages": [{"role": "user", "content": QUERY}]},
            context=langgraph_example.MemoryContext(chat2),
        )
        assert state["messages"][-1] == {"role": "assistant", "content": "No peanut snacks."}
        assert blocks == [state["memory_block"]]
        assert blocks[0].startswith(SEMANTIC_HEADER)
        assert memory_lines(blocks[0]) == FACTS
        result = await chat2.recall("peanut snacks", top_k=10, include_pending=True)
        assert {hit.text for hit in result.hits} == {QUERY, "No peanut snacks."}
