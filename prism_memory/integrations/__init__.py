"""Adapters for the agent frameworks hosts already run (each an extra; see docs/integrations.md).

* :mod:`prism_memory.integrations.langgraph` -- :class:`~prism_memory.integrations.langgraph.PrismStore`,
  a LangGraph ``BaseStore`` over prism_memory's stores (extra ``langgraph``);
* :mod:`prism_memory.integrations.langchain` -- ``PrismVectorStore`` over the RAG store, a retriever
  over :meth:`prism_memory.Memory.recall`, and bridges between LangChain ``Embeddings`` and prism's
  :class:`~prism_memory.Embedder` (extra ``langchain``).

Both are built on the public API (``create_memory``, :class:`~prism_memory.Memory`, the store
contracts), so this package imports nothing private of the facade.
"""
