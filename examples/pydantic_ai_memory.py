"""prism_memory inside a pydantic-ai agent: recall before the turn, remember after it.

Each run gets the user's recalled memories as **one system block**, oldest first (the context
provider's chronological form, so a provider's cached prompt prefix stays valid), and the turn --
the user's message and the agent's answer -- is remembered afterwards. Facts the user marked as
their own (consent scope ``"user"``) travel to the user's other conversations; the rest stay in
this one.

Runs offline: pydantic-ai's ``FunctionModel`` stands in for the LLM. Swap in a real model name
(``Agent("openai:gpt-4o", ...)``) and a real embedder for production.

    python examples/pydantic_ai_memory.py
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, SystemPromptPart, TextPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from prism_memory import HashEmbedder, InMemoryVectorStore, Memory, VectorStore, create_memory


@dataclass
class MemoryDeps:
    """What each run of the agent gets: the memory of this user's conversation."""

    memory: Memory


def build_agent(model: Model) -> Agent[MemoryDeps, str]:
    """An agent whose system prompt carries the recalled memories as one block."""
    agent: Agent[MemoryDeps, str] = Agent(
        model,
        deps_type=MemoryDeps,
        system_prompt="You are a helpful assistant. Use the user's memories when relevant.",
    )

    @agent.system_prompt(dynamic=True)
    async def recalled_memories(ctx: RunContext[MemoryDeps]) -> str:
        query = ctx.prompt if isinstance(ctx.prompt, str) else ""
        provider = ctx.deps.memory.context_provider(
            working=False, scope="resource", include_pending=True, max_tokens=1000
        )
        return await provider.render(query)

    return agent


async def chat_turn(agent: Agent[MemoryDeps, str], memory: Memory, user_message: str) -> str:
    """Run one turn, then remember it (the user's words and the agent's answer)."""
    result = await agent.run(user_message, deps=MemoryDeps(memory))
    await memory.remember(
        [
            {"role": "user", "text": user_message},
            {"role": "assistant", "text": result.output},
        ]
    )
    return result.output


def system_blocks(messages: list[ModelMessage]) -> list[str]:
    """The system-prompt texts a model was sent, in order."""
    return [
        part.content
        for message in messages
        for part in getattr(message, "parts", ())
        if isinstance(part, SystemPromptPart)
    ]


def echo_memories(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in LLM: answers with the memory lines it was given (or says it has none)."""
    lines = [
        line[2:]
        for block in system_blocks(messages)
        for line in block.splitlines()
        if line.startswith("- ")
    ]
    answer = "I remember: " + "; ".join(lines) if lines else "I don't know you yet."
    return ModelResponse(parts=[TextPart(answer)])


async def main(vector_store: VectorStore | None = None) -> list[str]:
    """Two conversations of one user: a fact told in the first is used in the second."""
    store = vector_store or InMemoryVectorStore()
    # one user's conversations: same tenant, resource (the user), embedder and store
    ada: dict[str, Any] = {
        "tenant_id": "acme",
        "resource_id": "user-ada",
        "embedder": HashEmbedder(dimensions=64),
        "vector_store": store,
    }
    agent = build_agent(FunctionModel(echo_memories))
    answers = []
    async with create_memory(thread_id="chat-1", **ada) as chat1:
        await chat1.remember(
            {"text": "Ada is allergic to peanuts", "consent": {"scope": "user"}}, wait=True
        )
        answers.append(await chat_turn(agent, chat1, "Any snack ideas? Remember my allergy."))
    async with create_memory(thread_id="chat-2", **ada) as chat2:
        answers.append(
            await chat_turn(agent, chat2, "Which snacks should I avoid, given my allergy?")
        )
    for answer in answers:
        print(answer)
    return answers


if __name__ == "__main__":
    asyncio.run(main())
