"""Embedders for real models, each behind an optional extra.

* :class:`~prism_memory.embedders.openai.OpenAIEmbedder` -- any OpenAI-compatible ``/embeddings``
  HTTP endpoint (``pip install 'prism-memory[openai]'``, which brings ``httpx``);
* :class:`~prism_memory.embedders.sentence_transformers.SentenceTransformerEmbedder` -- a local
  sentence-transformers model run off the event loop
  (``pip install 'prism-memory[sentence-transformers]'``).

Import them from their modules; importing this package needs neither extra. Both honour the
128-text batch cap, check every vector (finite, the configured width), bound each call with a
timeout, retry transient failures with exponential backoff, and stop promptly when cancelled.
"""

from ._retry import RetryPolicy

__all__ = ["RetryPolicy"]
