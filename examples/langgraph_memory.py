"""prism_memory inside a LangGraph graph: a node that recalls, a model node, a node that remembers.

The graph is ``START -> recall -> respond -> remember -> END``. The memory of the conversation
travels in LangGraph's run context (``context_schema``), so one compiled graph serves every user
and thread. ``recall`` puts the user's recalled memories into the state as **one system block**,
oldest first (``scope="resource"``: the user's ``user``/``profile`` facts from their other
conversations too); ``remember`` stores the turn once the answer exists.

Runs offline: ``respond`` is a plain function standing in for a chat model. Put your model call
there (with the block as the system message) in production.

    python examples/langgraph_memory.py
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from prism_memory import HashEmbedder, InMemoryVectorStore, Memory, VectorStore, create_memory

Respond = Callable[[str, str], Awaitable[str]]
"""``respond(system_block, user_message) -> answer``: the model call."""


class ChatState(TypedDict, total=False):
    """The graph's state: the conversation so far and this turn's recalled-memory block."""

    messages: Annotated[list[dict[str, str]], operator.add]
    memory_block: str


@dataclass
class MemoryContext:
    """Per-run context: the memory of this user's conversation."""

    memory: Memory


def _last_user_message(state: ChatState) -> str:
    return next(m["content"] for m in reversed(state["messages"]) if m["role"] == "user")


def build_graph(respond: Respond) -> Any:
    """Compile ``recall -> respond -> remember`` around a model call."""

    async def recall(state: ChatState, runtime: Runtime[MemoryContext]) -> dict[str, Any]:
        provider = runtime.context.memory.context_provider(
            working=False, scope="resource", include_pending=True, max_tokens=1000
        )
        return {"memory_block": await provider.render(_last_user_message(state))}

    async def respond_node(state: ChatState) -> dict[str, Any]:
        answer = await respond(state.get("memory_block", ""), _last_user_message(state))
        return {"messages": [{"role": "assistant", "content": answer}]}

    async def remember(state: ChatState, runtime: Runtime[MemoryContext]) -> dict[str, Any]:
        user, answer = _last_user_message(state), state["messages"][-1]["content"]
        await runtime.context.memory.remember(
            [{"role": "user", "text": user}, {"role": "assistant", "text": answer}]
        )
        return {}

    graph = StateGraph(ChatState, context_schema=MemoryContext)
    graph.add_node("recall", recall)
    graph.add_node("respond", respond_node)
    graph.add_node("remember", remember)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", "respond")
    graph.add_edge("respond", "remember")
    graph.add_edge("remember", END)
    return graph.compile()


async def echo_model(system_block: str, user_message: str) -> str:
    """A stand-in model: answers with the memory lines it was given."""
    lines = [line[2:] for line in system_block.splitlines() if line.startswith("- ")]
    return "I remember: " + "; ".join(lines) if lines else "I don't know you yet."


async def main(vector_store: VectorStore | None = None) -> list[str]:
    """A fact told in one conversation is used by the graph in the next."""
    store = vector_store or InMemoryVectorStore()
    # one user's conversations: same tenant, resource (the user), embedder and store
    ada: dict[str, Any] = {
        "tenant_id": "acme",
        "resource_id": "user-ada",
        "embedder": HashEmbedder(dimensions=64),
        "vector_store": store,
    }
    graph = build_graph(echo_model)
    answers: list[str] = []
    async with create_memory(thread_id="chat-1", **ada) as chat1:
        await chat1.remember(
            {"text": "Ada prefers answers in French", "consent": {"scope": "profile"}}, wait=True
        )
    async with create_memory(thread_id="chat-2", **ada) as chat2:
        state = await graph.ainvoke(
            {"messages": [{"role": "user", "content": "In which language should answers be?"}]},
            context=MemoryContext(chat2),
        )
        answers.append(state["messages"][-1]["content"])
    for answer in answers:
        print(answer)
    return answers


if __name__ == "__main__":
    asyncio.run(main())
