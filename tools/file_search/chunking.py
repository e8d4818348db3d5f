"""Chunking by tokens of the embedding model's tokenizer, with OpenAI's `chunking_strategy` rules.

`auto` is 800 tokens with 400 of overlap; `static` takes `max_chunk_size_tokens` in 100..4096 and
`chunk_overlap_tokens` at most half of it. A chunk's text is the document's own characters between its first and
last token (the tokenizer's offsets), so nothing is re-spelled by decoding.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from tokenizers import Tokenizer


class StaticChunking(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_chunk_size_tokens: int = Field(ge=100, le=4096)
    chunk_overlap_tokens: int = Field(ge=0)

    @model_validator(mode="after")
    def _overlap_at_most_half(self) -> StaticChunking:
        if self.chunk_overlap_tokens > self.max_chunk_size_tokens // 2:
            raise ValueError("chunk_overlap_tokens must not exceed half of max_chunk_size_tokens")
        return self


class AutoStrategy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["auto"] = "auto"


class StaticStrategy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["static"]
    static: StaticChunking


ChunkingStrategy = Annotated[AutoStrategy | StaticStrategy, Field(discriminator="type")]
AUTO = StaticChunking(max_chunk_size_tokens=800, chunk_overlap_tokens=400)


def sizes(strategy: AutoStrategy | StaticStrategy | None) -> StaticChunking:
    """The chunk size and overlap a strategy stands for (none given: auto)."""
    return strategy.static if isinstance(strategy, StaticStrategy) else AUTO


class Chunker:
    """Cuts text into overlapping token windows of one tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        tokenizer.no_truncation()  # the model's tokenizer.json pads and cuts for the encoder; a chunker counts all
        tokenizer.no_padding()
        self.tokenizer = tokenizer

    def chunks(self, text: str, rule: StaticChunking) -> list[str]:
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        if not offsets:
            return []
        step = rule.max_chunk_size_tokens - rule.chunk_overlap_tokens
        out: list[str] = []
        for start in range(0, len(offsets), step):
            window = offsets[start : start + rule.max_chunk_size_tokens]
            out.append(text[window[0][0] : window[-1][1]])
            if start + rule.max_chunk_size_tokens >= len(offsets):
                break
        return out
