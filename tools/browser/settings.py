"""Settings of the browser tool server: `--corpus-dir` is also `TOOLFLEET_BROWSER_CORPUS_DIR`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from toolkit.settings import ToolServerSettings

DEFAULT_CORPUS = Path("/usr/share/doc/python3-doc/html")
"""Debian's python3-doc: the Python documentation as HTML, the corpus the browser image bakes in."""
NO_CORPUS_HINT = (
    "No corpus is configured, so searches find nothing: start the browser with --corpus-dir DIR "
    "(TOOLFLEET_BROWSER_CORPUS_DIR; HTML, Markdown or text files), or install Debian's python3-doc for its default."
)


class BrowserSettings(ToolServerSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_BROWSER_", cli_kebab_case=True, extra="ignore")

    port: int = 8801
    search_backend: str = Field("local", description="local (the corpus index), searxng, exa, youcom or brave")
    search_url: str | None = Field(None, description="endpoint of the search backend; default: its public API")
    search_api_key: str | None = Field(None, description="API key of exa, youcom or brave")
    search_timeout_s: float = Field(10.0, description="longest a search backend may take")
    corpus_dir: Path | None = Field(None, description="HTML / Markdown / text files searched and opened offline")
    default_corpus_dir: Path = Field(
        DEFAULT_CORPUS, description="the corpus when --corpus-dir is not given and this directory exists"
    )
    index_dir: Path = Field(
        Path.home() / ".cache" / "toolfleet" / "browser-index", description="where the corpus's search index lives"
    )
    corpus_base_url: str = Field("corpus://local/", description="URL prefix of corpus documents (file path after it)")
    ssrf_exempt_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="host[:port] entries the SSRF guard lets through (comma-separated)"
    )
    fetch_max_bytes: int = Field(5 * 1024 * 1024, description="largest page body, after decompression")
    fetch_timeout_s: float = Field(10.0, description="time limit of one page fetch, redirects and body included")
    max_redirects: int = Field(5, description="redirects followed per fetch")
    view_tokens: int = Field(1024, description="o200k tokens of a page view when num_lines is not given")
    max_num_lines: int = Field(200, description="hard cap on the lines of one view")
    max_topn: int = Field(30, description="most search results shown")
    max_pages: int = Field(200, description="pages kept on a session's stack (older cursors are forgotten)")
    page_cache: int = Field(32, description="documents cached per session (an open of a cached URL is instant)")
    max_pattern_chars: int = Field(512, description="longest find pattern")

    @field_validator("ssrf_exempt_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip().lower() for v in value.split(",") if v.strip()]
        return value
