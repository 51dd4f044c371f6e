""":class:`~prism_memory.embedding.HashEmbedder`'s vector of one text: a pure function, so a
large batch can be hashed on worker threads (:mod:`prism_memory._offload`)."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from .models import Vector

__all__ = ["hash_vector"]

_TOKEN = re.compile(r"\w+", re.UNICODE)


def hash_vector(text: str, dimensions: int) -> Vector:
    """Word unigrams and character trigrams of ``text`` hashed (BLAKE2b) into ``dimensions``
    signed buckets, L2-normalised, as float32."""
    vector = np.zeros(dimensions, dtype=np.float64)
    words = _TOKEN.findall(text.lower())
    features = [f"w:{word}" for word in words]
    for word in words:
        padded = f" {word} "
        features.extend(f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2))
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimensions
        sign = 1.0 if digest[4] & 1 else -1.0
        weight = 2.0 if feature.startswith("w:") else 0.5
        vector[bucket] += sign * weight
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        vector[0] = 1.0
        norm = 1.0
    return (vector / norm).astype(np.float32)
