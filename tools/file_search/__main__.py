"""`toolfleet file_search` (or `python -m tools.file_search`) serves retrieval over the callers' vector stores."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tokenizers import Tokenizer

from toolkit.serve import run_service
from tools.file_search.chunking import Chunker
from tools.file_search.embedders import Embedder, LocalEmbedder, OpenAIEmbedder
from tools.file_search.engine import Engine
from tools.file_search.minilm import extract_packaged_model
from tools.file_search.server import build_server
from tools.file_search.settings import FileSearchSettings


def build_engine(settings: FileSearchSettings) -> Engine:
    """The engine the settings describe; the tokenizer that chunks is the embedding model's own."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    model_dir = settings.model_dir or extract_packaged_model(settings.data_dir)
    embedder: Embedder
    if settings.embedder == "local":
        embedder = LocalEmbedder(model_dir, settings.batch_size)
    elif settings.embedder == "openai":
        if not settings.embeddings_url:
            raise SystemExit("toolfleet file_search: --embedder openai needs --embeddings-url")
        embedder = OpenAIEmbedder(
            settings.embeddings_url,
            settings.embeddings_model,
            settings.embeddings_api_key,
            settings.batch_size,
            settings.embeddings_timeout_s,
        )
    else:
        raise SystemExit(f"toolfleet file_search: --embedder must be local or openai, not {settings.embedder!r}")
    return Engine(settings.data_dir, embedder, Chunker(Tokenizer.from_file(str(model_dir / "tokenizer.json"))))


def main(argv: Sequence[str] | None = None) -> int:
    settings = FileSearchSettings.from_args(list(sys.argv[1:] if argv is None else argv), prog="toolfleet file_search")
    return run_service("file_search", settings, lambda s: build_server(s, build_engine(s)).build_app())


if __name__ == "__main__":
    raise SystemExit(main())
