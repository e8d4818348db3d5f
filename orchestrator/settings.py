"""Orchestrator settings: every one a flag and a `TOOLFLEET_ORCHESTRATOR_` environment variable."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from toolkit.settings import ServiceSettings

WorkerApi = Literal["auto", "harmony", "chat"]
KEEPALIVE_EXPIRY_S = 4.0
"""How long an idle connection to a worker or tool server is kept for reuse: below uvicorn's default keep-alive
(5 s, which vLLM, the scripted worker and the gateway serve with), so the orchestrator never sends a request on a
connection its server is closing."""
WORKER_DOWN_AFTER = 2
"""Failed health checks in a row that take a worker out."""


class OrchestratorSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_ORCHESTRATOR_", cli_kebab_case=True, extra="ignore")

    port: int = Field(8080, description="port to bind")
    worker_urls: list[str] = Field(["http://127.0.0.1:8000"], description="vLLM worker base URLs")
    model: str | None = Field(None, description="model name to send (default: what the worker lists)")
    worker_api: WorkerApi = Field(
        "auto",
        description="how workers are driven: harmony (/v1/completions with "
        "token ids), chat (/v1/chat/completions) or auto (per worker: Harmony when its "
        "tokenizer has Harmony's <|start|> token)",
    )
    vision_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="models (as requests name them) that take image input, comma-separated; served on the chat"
        " path, their input_image parts go to the worker as image_url parts (any other model: 400)",
    )
    worker_apis: dict[str, WorkerApi] = Field({}, description='per-worker --worker-api, JSON {"URL": "chat"}')
    tools_url: str | None = Field(
        "http://127.0.0.1:8800", description="gateway base URL: namespace NS is at {url}/NS/mcp; '' = no gateway"
    )
    browser_url: str | None = Field(None, description="browser MCP endpoint (overrides --tools-url)")
    python_url: str | None = Field(None, description="python MCP endpoint (overrides --tools-url)")
    container_url: str | None = Field(None, description="container MCP endpoint (overrides --tools-url)")
    store: str = Field("sqlite", description="where responses, conversations and files are kept: sqlite or redis")
    store_path: str = Field(
        str(Path(tempfile.gettempdir()) / "toolfleet-orchestrator.sqlite3"), description="SQLite file"
    )
    redis_url: str | None = Field(None, description="Redis URL when --store redis (default redis://127.0.0.1:6379/0)")
    redis_prefix: str = Field("toolfleet:", description="key prefix in Redis (replicas sharing responses use the same)")
    max_responses_per_key: int = Field(
        1_000,
        ge=1,
        description="each API key keeps at most this many stored responses, and as many conversations;"
        " a new one drops that key's own oldest, never another key's",
    )
    max_responses: int = Field(
        100_000,
        ge=1,
        description="fleet-wide last resort: with this many stored responses (or conversations) in the store,"
        " a new one of a key below its own bound is refused (507 store_full), never made room for",
    )
    retention_s: float = Field(30 * 86400, description="drop stored responses older than this")
    files_dir: str = Field(
        str(Path(tempfile.gettempdir()) / "toolfleet-files"), description="where uploaded files' bytes are kept"
    )
    max_file_bytes: int = Field(512 * 1024 * 1024, description="largest file one upload may carry (larger: 413)")
    max_file_bytes_per_key: int = Field(
        10 * 1024**3,
        ge=0,
        description="bytes one key's files and its containers' files may hold together (an upload past them:"
        " 413; 0: no bound)",
    )
    max_body_bytes: int = Field(
        16 * 1024 * 1024,
        description="largest JSON request body and WebSocket message (larger: 413, before it is read); uploads:"
        " --max-file-bytes",
    )
    max_input_file_chars: int = Field(
        200_000, ge=1, description="most characters of text one input_file may give the model (more: 400)"
    )
    max_conversation_items: int = Field(10_000, description="items one conversation may hold (more: 400)")
    max_conversation_bytes: int = Field(
        64 * 1024 * 1024, description="bytes of JSON one conversation's items may hold together (more: 400)"
    )
    file_retention_s: float = Field(30 * 86400, description="delete uploaded files older than this")
    prune_interval_s: float = Field(
        60.0, description="how often expired files, containers and vector stores are deleted"
    )
    vector_store_concurrency: int = Field(
        2, ge=1, le=64, description="files one replica indexes into vector stores at once (all adds and batches)"
    )
    max_vector_store_file_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1,
        description="largest file added to a vector store (larger: failed with last_error, its bytes never read);"
        " keep it at most the file_search tool's --max-file-bytes",
    )
    max_vector_stores_per_key: int = Field(
        10_000, ge=1, description="vector stores one key may have (one more: 400); its listings read them all"
    )
    max_vector_store_bytes_per_key: int = Field(
        1 << 30,
        ge=0,
        description="bytes (chunks and vectors: usage_bytes) one key's vector stores may hold together; a file"
        " that would pass it fails with last_error, nothing of it indexed",
    )
    max_container_memory: Literal["1g", "4g", "16g", "64g"] = Field(
        "4g", description="largest memory_limit a container may ask for (above: 400)"
    )
    public_url: str | None = Field(
        None, description="URL clients reach this orchestrator at, for container file links (default: the request's)"
    )
    max_output_tokens: int = Field(16_384, description="token budget of a response when the request sets none")
    context_tokens: int = Field(
        131_072, description="the model's context in tokens: truncation 'auto' drops the oldest items past it"
    )
    max_tool_calls: int = Field(32, description="tool calls per response when the request sets none")
    tool_timeout_s: float = Field(120.0, description="give up on one tool call after this long")
    tool_task_after_ms: int | None = Field(
        1000,
        ge=0,
        description="a call to a fleet tool that may run long (python, exec) still running after this long becomes"
        " an MCP task, polled, so a background response's call outlives this replica (another resumes it by its"
        " task id) and a cancel stops it; `null`: no tasks",
    )
    session_idle_s: float = Field(
        1200.0,
        description="clean up a stored conversation's tool sessions when idle; idle order: the owner cleans up"
        " first, so keep it below the gateway's pin idle (1500) and the tool servers' session TTL (1800)",
    )
    reap_interval_s: float = Field(60.0, description="how often idle conversations are looked for")
    cancel_poll_s: float = Field(0.5, description="how often cancels asked of another replica are looked for")
    background_hold_s: float = Field(
        30.0,
        description="a background response holds its place in the shared store this long, renewed every third;"
        " one whose replica stopped (killed, a lost node) is adopted by another replica once its hold lapses",
    )
    event_flush_s: float = Field(
        0.02,
        ge=0,
        description="a background response's events are stored in batches, one per this window, before any"
        " client is sent them (write-ahead, so an adopting replica never numbers other text the same)",
    )
    identity: str | None = Field(None, description="model identity line of the system message")
    date: str | None = Field(None, description="conversation start date (default: today)")
    health_interval_s: float = Field(5.0, description="worker health-check period")
    affinity: bool = Field(
        True,
        description="keep a conversation on the worker holding its prefix (its turns, its previous_response_id"
        " chain, its prompt_cache_key, or its opening); the map is in Redis with --store redis, shared by replicas",
    )
    affinity_size: int = Field(100_000, ge=1, description="affinity keys kept at most (least recently used dropped)")
    affinity_ttl_s: float = Field(3600.0, gt=0, description="an affinity pin lapses this long after its last use")
    affinity_spill_at: int = Field(
        32,
        ge=1,
        description="a pinned worker with this many requests in flight from this replica is saturated: the request"
        " goes to the least loaded worker instead and is pinned there",
    )
    worker_down_after: int = Field(
        WORKER_DOWN_AFTER,
        ge=1,
        description="a worker is down after this many health checks in a row fail, or one request on a new"
        " connection (an error on a reused connection is retried once on a new one first)",
    )
    keepalive_expiry_s: float = Field(
        KEEPALIVE_EXPIRY_S,
        gt=0,
        description="idle connections to workers and tool servers are closed after this; keep it below their"
        " servers' keep-alive (uvicorn's default: 5 s)",
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="client API keys (comma-separated); none: no authentication"
    )
    api_keys_file: str | None = Field(
        None,
        description="file of API keys, one per line (# comments); a line 'admin:KEY' is an operator's key for"
        " /console, never a client key",
    )
    admin_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="operator keys for /console (comma-separated); none: the console is closed"
    )
    gateway_admin_token: str | None = Field(
        None, description="bearer token for the gateway's /admin API, which the console reads and acts through"
    )
    metrics_token: str | None = Field(
        None, description="bearer token /metrics and /healthz details ask for (none: loopback callers only)"
    )
    rate_limit_rps: float = Field(0.0, description="requests per second per API key (0: no limit)")
    rate_limit_burst: int = Field(0, description="requests a key may send at once (default: 2 x rps, at least 1)")
    max_concurrent_per_key: int = Field(
        64,
        description="model turns one API key may have running: responses (stream, background or not), compactions"
        " and relayed chat completions together (0: no limit); above: 429",
    )
    max_sockets_per_key: int = Field(
        16, description="WebSocket connections one API key may have open (0: no limit); above: the upgrade is a 429"
    )
    mcp_policy: str = Field(
        "public", description="client-named MCP servers: public (public addresses), allowlist or gateway-only"
    )
    mcp_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="URL patterns (fnmatch) always allowed as MCP server_url, comma-separated"
    )
    mcp_deny: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="URL patterns (fnmatch) never allowed as MCP server_url, comma-separated"
    )
    mcp_refusal_floor_s: float = Field(
        0.5, description="a refused or unreachable MCP server is answered no sooner than this (timing oracle)"
    )

    @field_validator("api_keys", "admin_keys", "mcp_allow", "mcp_deny", "vision_models", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        """A flag or environment value `a,b` (or a JSON list) as a list; keys never hold commas or spaces."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("mcp_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in ("public", "allowlist", "gateway-only"):
            raise ValueError("mcp_policy is public, allowlist or gateway-only")
        return value

    def endpoint_overrides(self) -> dict[str, str]:
        pairs = {"browser": self.browser_url, "python": self.python_url, "container": self.container_url}
        return {k: v for k, v in pairs.items() if v}
