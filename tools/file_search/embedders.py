"""The `Embedder` interface and its two kinds: `local` (all-MiniLM-L6-v2 in-process, numpy) and `openai` (any
OpenAI-compatible `/v1/embeddings`, such as vLLM's pooling runner serving the same model). Both answer unit
vectors in batches, off the event loop."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import anyio
import httpx
import numpy as np
from pydantic import BaseModel, ValidationError
from tokenizers import Tokenizer

from tools.file_search.minilm import MiniLM, ModelCard


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


class TokenLimit:
    """Cuts each text to what the encoder reads: its first `max_tokens` tokens, special ones included. The local
    encoder cuts there itself; a pooling server refuses a longer input instead (vLLM answers 400 "maximum context
    length"), so the `openai` embedder sends the same prefix, cut at a token's end in the text's own characters."""

    def __init__(self, tokenizer: Tokenizer, max_tokens: int) -> None:
        self.room = max_tokens - tokenizer.num_special_tokens_to_add(False)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer

    def cut(self, texts: list[str]) -> list[str]:
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [
            t if len(e.offsets) <= self.room else t[: e.offsets[self.room - 1][1]]
            for t, e in zip(texts, encodings, strict=True)
        ]


class _Row(BaseModel):
    index: int
    embedding: list[float]


class _Reply(BaseModel):
    """The part of an OpenAI embeddings answer read here (base64 vectors are not asked for)."""

    data: list[_Row]


class OpenAIEmbedder:
    """`POST {base_url}/embeddings` in batches; the vectors are checked (count, width, finite) and normalised here
    (a server may not). Whatever goes wrong - no answer, no answer in time, an error status, a body that is not
    vectors of the model's width - is `EmbeddingFailed` saying which, so a file fails with that reason."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        batch_size: int,
        timeout_s: float,
        card: ModelCard,
        limit: TokenLimit,
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.where = f"{base_url.rstrip('/')}/embeddings"
        self.model, self.batch_size, self.timeout_s = model, batch_size, timeout_s
        self.card, self.limit = card, limit

    async def embed(self, texts: list[str]) -> np.ndarray:
        texts = await anyio.to_thread.run_sync(self.limit.cut, texts)
        rows = [await self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(rows) if rows else np.zeros((0, self.card.dimensions), np.float32)

    async def _batch(self, texts: list[str]) -> np.ndarray:
        where = self.where
        body = {"model": self.model, "input": texts, "encoding_format": "float"}
        try:
            with anyio.fail_after(self.timeout_s):  # the whole answer: a server trickling bytes is slow too
                response = await self.client.post("/embeddings", json=body)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise EmbeddingFailed(f"embedding service {where} did not answer within {self.timeout_s} s") from exc
        except httpx.HTTPError as exc:
            raise EmbeddingFailed(f"embedding service {where} unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise EmbeddingFailed(f"embedding service {where} answered {response.status_code}: {response.text[:300]}")
        return await anyio.to_thread.run_sync(self._vectors, response.content, len(texts), where)

    def _vectors(self, content: bytes, count: int, where: str) -> np.ndarray:
        try:
            data = sorted(_Reply.model_validate_json(content).data, key=lambda row: row.index)
        except ValidationError as exc:
            raise EmbeddingFailed(
                f"embedding service {where} answered no embeddings list: {exc.errors()[0]['msg']}"
            ) from exc
        if [row.index for row in data] != list(range(count)):
            raise EmbeddingFailed(f"embedding service {where} answered {len(data)} vectors for {count} texts")
        widths = {len(row.embedding) for row in data}
        if widths != {self.card.dimensions}:
            raise EmbeddingFailed(
                f"embedding service {where} answered vectors of width {sorted(widths)}, not the model's "
                f"{self.card.dimensions}: is it serving the model whose tokenizer chunks here?"
            )
        matrix = np.array([row.embedding for row in data], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise EmbeddingFailed(f"embedding service {where} answered a zero or non-finite vector")
        return matrix / norms

    async def aclose(self) -> None:
        await self.client.aclose()
