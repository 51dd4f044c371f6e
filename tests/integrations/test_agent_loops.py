"""A real LangGraph agent loop (create_react_agent, a scripted chat model, tools on the store),
offline: it remembers across the threads of one user and forgets on request -- on PrismStore in
memory and on PostgreSQL, and identically on LangGraph's own InMemoryStore."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import InjectedStore, create_react_agent
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

pytestmark = [
    pytest.mark.postgres,
    # create_react_agent (langgraph.prebuilt), what LangGraph users run, is deprecated since 1.0
    pytest.mark.filterwarnings("ignore::langgraph.warnings.LangGraphDeprecatedSinceV10"),
]


class ScriptedModel(BaseChatModel):
    """A chat model that calls the tool a message names (``"recall: peanuts"`` calls ``recall``
    with ``text="peanuts"``) and then answers with what the tool returned."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            reply = AIMessage(content=str(last.content))
        else:
            verb, _, text = str(last.content).partition(": ")
            call = {"name": verb, "args": {"text": text}, "id": f"call-{len(messages)}"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def _user(config: RunnableConfig) -> tuple[str, str]:
    return ("memories", config["configurable"]["user_id"])


@tool
async def remember(
    text: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]
) -> str:
    """Remember a fact about the user."""
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    await store.aput(_user(config), key, {"text": text})
    return f"saved: {text}"


@tool
async def recall(
    text: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]
) -> str:
    """Recall what is known about a topic."""
    found = await store.asearch(_user(config), query=text, limit=1)
    return found[0].value["text"] if found else "nothing"


@tool
async def forget(
    text: str, config: RunnableConfig, store: Annotated[BaseStore, InjectedStore()]
) -> str:
    """Forget what is known about a topic."""
    found = await store.asearch(_user(config), query=text, limit=1)
    for item in found:
        await store.adelete(item.namespace, item.key)
    return f"forgot: {found[0].value['text']}" if found else "nothing to forget"


@pytest.fixture(params=["langgraph-inmemory", "memory", "postgres"])
def agent_store(request: pytest.FixtureRequest, fake_embeddings, store_on):
    index = {"dims": fake_embeddings.dims, "embed": fake_embeddings}
    if request.param == "langgraph-inmemory":

        @asynccontextmanager
        async def langgraph_store() -> AsyncIterator[BaseStore]:
            yield InMemoryStore(index=index)

        return langgraph_store
    return lambda: store_on(request.param)(index=index)


async def test_the_agent_remembers_across_threads_and_forgets_on_request(agent_store) -> None:
    async with agent_store() as store:
        agent = create_react_agent(
            ScriptedModel(), [remember, recall, forget], store=store, checkpointer=InMemorySaver()
        )

        async def say(user: str, thread: str, message: str) -> str:
            config = {"configurable": {"user_id": user, "thread_id": thread}}
            state = await agent.ainvoke({"messages": [("user", message)]}, config)
            return str(state["messages"][-1].content)

        assert (
            await say("ada", "t1", "remember: Ada is allergic to peanuts")
            == "saved: Ada is allergic to peanuts"
        )
        assert await say("ada", "t1", "remember: Ada lives in Lyon") == "saved: Ada lives in Lyon"
        # another thread of the same user
        assert await say("ada", "t2", "recall: peanuts allergy") == "Ada is allergic to peanuts"
        # another user
        assert await say("bob", "t3", "recall: peanuts allergy") == "nothing"
        assert (
            await say("ada", "t4", "forget: peanuts allergy")
            == "forgot: Ada is allergic to peanuts"
        )
        assert await say("ada", "t5", "recall: peanuts allergy") == "Ada lives in Lyon"
        assert await say("ada", "t5", "forget: Lyon") == "forgot: Ada lives in Lyon"
        assert await say("ada", "t6", "recall: Lyon") == "nothing"
        assert await store.asearch(("memories",)) == []
