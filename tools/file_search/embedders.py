"""The `Embedder` interface and its two kinds: `local` (all-MiniLM-L6-v2 in-process, numpy) and `openai` (any
OpenAI-compatible `/v1/embeddings`, such as vLLM's pooling runner serving the same model). Both answer unit
vectors in batches, off the event loop."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import anyio
import httpx
import numpy as np

from tools.file_search.minilm import MiniLM


class EmbeddingFailed(RuntimeError):
    """The embedding service did not answer vectors: the message says what it answered."""


class Embedder(Protocol):
    name: str

    async def embed(self, texts: list[str]) -> np.ndarray:
        """One unit float32 row per text."""
        ...

    async def aclose(self) -> None: ...


class LocalEmbedder:
    """The model in this process, run in one worker thread at a time (numpy's BLAS uses the cores itself)."""

    name = "local"

    def __init__(self, model_dir: Path, batch_size: int) -> None:
        self.model = MiniLM(model_dir)
        self.batch_size = batch_size
        self.limiter = anyio.CapacityLimiter(1)

    async def embed(self, texts: list[str]) -> np.ndarray:
        rows = [
            await anyio.to_thread.run_sync(self.model.encode, texts[i : i + self.batch_size], limiter=self.limiter)
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(rows) if rows else np.zeros((0, self.model.dimensions), np.float32)

    async def aclose(self) -> None:
        return None


class OpenAIEmbedder:
    """`POST {base_url}/embeddings` in batches; the vectors are normalised here (a server may not)."""

    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str | None, batch_size: int, timeout_s: float) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.model = model
        self.batch_size = batch_size

    async def embed(self, texts: list[str]) -> np.ndarray:
        rows = [await self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)

    async def _batch(self, texts: list[str]) -> np.ndarray:
        try:
            response = await self.client.post("/embeddings", json={"model": self.model, "input": texts})
        except httpx.HTTPError as exc:
            raise EmbeddingFailed(f"embedding service unreachable: {exc}") from exc
        if response.status_code != 200:
            raise EmbeddingFailed(f"embedding service answered {response.status_code}: {response.text[:300]}")
        data = sorted(response.json().get("data", []), key=lambda d: d["index"])
        if len(data) != len(texts):
            raise EmbeddingFailed(f"embedding service answered {len(data)} vectors for {len(texts)} texts")
        matrix = np.array([d["embedding"] for d in data], dtype=np.float32)
        return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)

    async def aclose(self) -> None:
        await self.client.aclose()
