"""``--embedder module:factory``: the embedder an operator names, loaded and checked."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ..embedding import Embedder, embedder_model


def load_embedder(spec: str, width: int | None) -> Embedder:
    """The embedder an import path names: ``module:attribute``.

    The attribute is an :class:`~prism_memory.Embedder` instance, or a factory called with no
    arguments -- or with ``dimensions=width`` when it accepts that keyword and the table's width is
    pinned (so ``prism_memory:HashEmbedder`` fits any table). There is no default: the commands
    that write vectors (``worker``, ``rebuild``) use the model the operator names, and it must
    have a ``model`` identity (:func:`~prism_memory.embedding.embedder_model`), recorded with
    every vector.
    """
    from ..errors import ConfigurationError

    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"--embedder must look like module:factory; got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigurationError(
                f"--embedder: no module named {module_name!r}; it must be importable where "
                "prism-memory runs (installed in this environment, or its folder on PYTHONPATH)"
            ) from exc
        raise ConfigurationError(f"--embedder: importing {module_name!r} failed: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigurationError(f"{module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if (callable(target) and not hasattr(target, "embed")) or isinstance(target, type):
        try:
            accepts = "dimensions" in inspect.signature(target).parameters
        except (TypeError, ValueError):
            accepts = False
        try:
            target = target(dimensions=width) if accepts and width is not None else target()
        except Exception as exc:
            raise ConfigurationError(f"--embedder {spec!r} failed to build: {exc}") from exc
    if not hasattr(target, "embed") or not hasattr(target, "dimensions"):
        raise ConfigurationError(f"--embedder {spec!r} did not give an Embedder")
    if embedder_model(target) is None:
        raise ConfigurationError(
            f"--embedder {spec!r} has no `model` identity; give it one (a short string naming "
            "the model and its version): it is recorded with every vector, and checked"
        )
    embedder: Embedder = target
    return embedder
