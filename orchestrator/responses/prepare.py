"""Preparing a response: a request turned into a `Run` before anything runs (its history, the tools shown to
the model, the rendered head, the turn model, the containers its tools name), and every refusal that can be
decided before a token is generated."""

from __future__ import annotations

import asyncio
import datetime
import time
from dataclasses import dataclass
from typing import Any

import structlog
from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator import kinds, workspace
from orchestrator.chat import ChatTurns, chat_tools
from orchestrator.containers import Containers
from orchestrator.conversations import Conversations
from orchestrator.errors import RequestError
from orchestrator.guard.mcp_policy import McpPolicy, ServerRefused, refusal
from orchestrator.kinds import EchoContext, custom
from orchestrator.kinds.compaction import is_triggered
from orchestrator.kinds.mcp import check_issued
from orchestrator.persist import Conversation, Objects, Record, Store
from orchestrator.request import attachments, references
from orchestrator.request.items import normalize
from orchestrator.request.schema import McpServer, ResponsesRequest, TextConfig, Toolset, check_include
from orchestrator.responses import compaction
from orchestrator.responses.events import ResponseBuilder, new_id
from orchestrator.responses.live import RUNNING, Live
from orchestrator.responses.run import Run, ToolState, TurnModel
from orchestrator.responses.turns import HARMONY
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import Discovery, Endpoints, Listing, ToolSessions, ToolUnavailable, loggable
from orchestrator.vector_stores import usable_store
from orchestrator.worker.affinity import OPENING_MESSAGES, keys_for
from orchestrator.worker.client import Chat, CountChat, Generate

log = structlog.get_logger(__name__)


@dataclass
class Prepared:
    """A response ready to run: its Run, the MCP listings to show first, where its history starts, its input,
    and its conversation with the items stored there."""

    run: Run
    listings: dict[str, Any]
    n_head: int
    items: list[dict[str, Any]]
    conversation: Conversation | None
    stored: list[dict[str, Any]]  # the conversation's items so far (its bounds count them with `items`)


@dataclass
class _History:
    """What came before the response and what its input adds, as Harmony messages and as items."""

    messages: list[Message]
    new_input: list[Message]
    items: list[dict[str, Any]]
    stored: list[dict[str, Any]]
    tools: ToolState


class Preparer:
    """Turns requests into runs, reading what a request names (stored responses, conversations, tool servers,
    containers); it runs nothing."""

    def __init__(
        self,
        settings: OrchestratorSettings,
        *,
        generate: Generate,
        store: Store,
        conversations: Conversations,
        endpoints: Endpoints,
        policy: McpPolicy,
        live: dict[str, Live],
        objects: Objects,
        containers: Containers | None = None,
        chat: Chat | None = None,
        count_chat: CountChat | None = None,
        api_for: Any = None,
    ) -> None:
        self.settings, self.generate, self.store, self.conversations = settings, generate, store, conversations
        self.endpoints, self.policy, self.live, self.containers = endpoints, policy, live, containers
        self.objects = objects  # vector stores' records (file_search's stores are the caller's)
        self.chat, self.count_chat = chat, count_chat
        self.api_for = api_for or (lambda model: None)  # model name -> "harmony" | "chat" | None (not known)
        self.discovery = Discovery()

    async def prepare(self, req: ResponsesRequest, owner: str, kept: dict[str, Record] | None = None) -> Prepared:
        """Everything a response needs before it runs: history, tools, the rendered head, its Run."""
        prev = await self._previous(req, owner, kept)
        conv = await self.conversation(req, owner)
        include = check_include(req.include)
        tools = kinds.toolset(req.tools, req.tool_choice, self._gateway_url)
        await self._vector_stores(tools, owner)
        namespaces, listings = await self._namespaces(tools)
        model = self._turn_model(req, include, namespaces, tools)
        rid = new_id("resp")
        # The tool sessions' id: random, not derived from the response id (nor from the conversation's id).
        conversation = prev.conversation if prev else conv.session if conv else new_id("conv")
        body = _body(req, rid, prev, self.settings.model)
        if conv is not None:
            body["conversation"] = {"id": conv.id}
        builder = ResponseBuilder(body)
        name = req.model or self.settings.model or ""
        vision = model is not HARMONY and name in self.settings.vision_models
        past = await self._history(req, owner, prev, conv, (name, vision))
        head = self._head(req, namespaces, tools)
        sessions = ToolSessions(
            session_id=conversation,
            timeout_s=self.settings.tool_timeout_s,
            keepalive_s=self.settings.keepalive_expiry_s,
            owner=owner,
            task_after_ms=self.settings.tool_task_after_ms,
        )
        r = Run.for_request(
            req,
            self.settings,
            builder,
            messages=head + past.messages,
            new_input=past.new_input,
            toolset=tools,
            include=include,
            model=model,
            sessions=sessions,
            endpoints=self.endpoints,
            generate=self.generate,
            tools=past.tools,
            compact_only=is_triggered(past.items),
        )
        opening = [m.to_dict() for m in (r.messages + r.new_input)[: len(head) + OPENING_MESSAGES]]
        r.affinity = keys_for(conversation, req.prompt_cache_key, owner, opening)
        return Prepared(r, listings, len(head), past.items, conv, past.stored)

    async def _history(
        self,
        req: ResponsesRequest,
        owner: str,
        prev: Record | None,
        conv: Conversation | None,
        vision: tuple[str, bool],
    ) -> _History:
        """The history the response continues (a conversation's items, or the previous response's messages),
        its input with references resolved, and the tool state both carry."""
        state = (prev.tools if prev else conv.tools if conv else {}) or {}
        stored = await self.conversations.history(conv) if conv else []
        earlier = compaction.window(stored)
        items = await references.resolve(self.store, owner, normalize(req.input), earlier)
        files = self.containers.files if self.containers is not None else None
        limits = attachments.Limits(self.settings.max_input_file_chars, self.settings.max_body_bytes)
        items = await attachments.inline(items, owner, files, limits)
        attachments.check_images(items, *vision)
        echo = EchoContext(dict(state.get("calls", {})), await self._results(owner, kinds.kept_ids(earlier + items)))
        history = kinds.to_messages(earlier, echo) if conv else h.load(prev.messages) if prev else []
        attachments.check_history(history, *vision, "conversation" if conv else "previous_response_id")
        new_input = kinds.to_messages(compaction.window(items), echo)
        check_issued(echo, history + new_input)
        return _History(history, new_input, items, stored, _tool_state(state, echo))

    async def conversation(self, req: ResponsesRequest, owner: str) -> Conversation | None:
        """The conversation the request names (owner-checked: another key's is a 404), or None."""
        conv_id = req.conversation_id
        if conv_id is None:
            return None
        if req.previous_response_id:
            raise RequestError(
                "Mutually exclusive parameters: Ensure you are only providing one of: "
                "'previous_response_id' or 'conversation'.",
                "conversation",
                400,
                "mutually_exclusive_parameters",
            )
        return await self.conversations.find(conv_id, owner)

    async def attach_workspaces(self, r: Run, owner: str, public_url: str) -> None:
        """The containers the request's tools name, once everything else in it passed (an `auto` one is new)."""
        if self.containers is None:
            return
        # references first: a request refused for a missing one makes no `auto` container
        for ns, (where, spec) in sorted(r.toolset.containers.items(), key=lambda e: isinstance(e[1][1], dict)):
            url = self.endpoints.url_for(ns)
            space = await workspace.resolve(ns, spec, where, owner, self.containers, r.sessions, url)
            if space is not None:
                r.workspaces[ns] = space
        r.public_url = public_url.rstrip("/")

    async def _previous(
        self, req: ResponsesRequest, owner: str, kept: dict[str, Record] | None = None
    ) -> Record | None:
        """The finished response `previous_response_id` names, if `owner` made it (else as missing as deleted)."""
        if not req.previous_response_id:
            return None
        settling = self.live.get(req.previous_response_id)
        if settling is not None and settling.builder.finished:  # its terminal event went out before the store write
            await settling.done.wait()
        prev = (kept or {}).get(req.previous_response_id) or await self.store.get(req.previous_response_id)
        if prev is None or prev.owner != owner:
            raise RequestError(
                f"previous response {req.previous_response_id!r} not found",
                "previous_response_id",
                404,
                "previous_response_not_found",
            )
        if prev.body.get("status") in RUNNING:
            raise RequestError(
                f"previous response {req.previous_response_id!r} has not finished yet", "previous_response_id", 400
            )
        return prev

    def _head(self, req: ResponsesRequest, namespaces: list[h.Namespace], tools: Toolset) -> list[Message]:
        """The system message (date, effort, tool namespaces) and the developer message (instructions, functions)."""
        system = h.system_message(
            effort=(req.reasoning.effort if req.reasoning else None),
            date=self.settings.date or datetime.date.today().isoformat(),
            namespaces=namespaces,
            identity=self.settings.identity,
        )
        shown = [_function(f) for f in tools.functions] + [custom.shown(t) for t in tools.custom.values()]
        shown += list(tools.shown.values())
        dev = h.developer_message(req.instructions, shown)
        return [system, dev] if dev else [system]

    def _turn_model(
        self, req: ResponsesRequest, include: set[str], namespaces: list[h.Namespace], tools: Toolset
    ) -> TurnModel:
        """Harmony, or the chat path when the worker that serves `req.model` is a chat-template worker."""
        if (self.api_for(req.model) or self.settings.worker_api) != "chat":
            return HARMONY
        if self.chat is None:
            raise RequestError("this orchestrator has no chat-completions worker client", "model", 503)
        if any(custom.constraint(t) for t in tools.custom.values()):
            message = "custom tools with a grammar are not supported for chat-template models (the chat path)"
            raise RequestError(message, "tools", 400, "unsupported_value")
        if "message.output_text.logprobs" in include:
            raise RequestError(
                "include 'message.output_text.logprobs' is not supported for chat-template models "
                "(the chat-completions path)",
                "include",
                400,
                "unsupported_value",
            )
        functions = tools.functions + list(tools.shown.values())  # tool_search, apply_patch: functions here too
        return ChatTurns(self.chat, chat_tools(namespaces, functions, list(tools.custom.values())), self.count_chat)

    async def _vector_stores(self, tools: Toolset, owner: str) -> None:
        """The stores a file_search tool names: each the caller's (another key's or a missing one: a 404 naming it)
        and not expired (a 400); each is active now, which moves its expiry on."""
        spec = tools.file_search
        for j, store_id in enumerate(spec["vector_store_ids"] if spec is not None else []):
            await usable_store(self.objects, store_id, owner, f"{spec['where']}.vector_store_ids[{j}]")

    def _gateway_url(self, label: str) -> str | None:
        return self.endpoints.url_for(label) if self.settings.tools_url else None

    async def _namespaces(self, tools: Toolset) -> tuple[list[h.Namespace], dict[str, Any]]:
        out, listings = [], {}
        for ns in kinds.BUILTIN_NAMESPACES:
            if ns not in tools.builtins:
                continue
            if not kinds.listed(ns):  # the kind's own form (file_search: the server lists more than it shows)
                out.append(kinds.fallback(ns))
                continue
            url = self.endpoints.url_for(ns)
            try:
                if url is None:
                    raise ToolUnavailable(f"no tool server is configured for {ns}")
                out.append(await self.discovery.namespace(ns, url, tools.builtins[ns]))
            except ToolUnavailable as exc:
                log.warning("tool.discovery_failed", namespace=ns, error=str(exc))
                out.append(kinds.fallback(ns))
        for name, (description, functions) in tools.namespaces.items():
            out.append(h.Namespace(name, description, tuple(_function(f) for f in functions)))
        for ns, server in tools.mcp.items():
            listing = await self._list_mcp(server)
            shown = [t for t in listing.tools if not t["hidden"]]
            listings[server.label] = shown
            allowed = [t for t in shown if server.allowed is None or t["name"] in server.allowed]
            server.shown = frozenset(t["name"] for t in allowed)
            out.append(
                h.Namespace(
                    ns,
                    server.description or listing.instructions,
                    tuple(
                        {"name": t["name"], "description": t["description"], "parameters": t["parameters"]}
                        for t in allowed
                    ),
                )
            )
        return out, listings

    async def _list_mcp(self, server: McpServer) -> Listing:
        """The tool list of a client-named server the policy admits; one uniform 400 for any refusal or failure."""
        started = time.monotonic()
        try:
            if server.client_named:
                verdict = await self.policy.check(server.url)
                server.address = verdict.address
            return await self.discovery.list(server.url, server.headers, server.address)
        except (ServerRefused, ToolUnavailable) as exc:
            log.info("mcp.refused", server_label=server.label, url=loggable(server.url), reason=str(exc))
            await asyncio.sleep(max(0.0, self.policy.floor_s - (time.monotonic() - started)))
            raise refusal(server.label) from None

    async def _results(self, owner: str, item_ids: list[str]) -> dict[str, str]:
        """Stored web_search results of `owner`'s own items (keyed by owner, so ids of other keys find nothing)."""
        if not item_ids:
            return {}
        found = await self.store.get_results([scoped(owner, i) for i in item_ids])
        return {i: found[scoped(owner, i)] for i in item_ids if scoped(owner, i) in found}


def _body(req: ResponsesRequest, rid: str, prev: Record | None, default_model: str | None) -> dict[str, Any]:
    """The response object as it starts: the request's parameters echoed, nothing output yet."""
    model = req.model or default_model or "gpt-oss"
    return dict(
        id=rid,
        object="response",
        created_at=int(time.time()),
        model=model,
        status="queued",
        completed_at=None,  # every snapshot carries it (the open Responses spec); a timestamp once completed
        output=[],
        instructions=req.instructions,
        tools=[kinds.echo_tool(t) for t in req.tools],
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        temperature=req.temperature,
        top_p=req.top_p,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        top_logprobs=req.top_logprobs or 0,
        max_output_tokens=req.max_output_tokens,
        max_tool_calls=req.max_tool_calls,
        previous_response_id=req.previous_response_id,
        background=req.background,
        store=req.store,
        reasoning=req.reasoning.model_dump() if req.reasoning else {"effort": None, "summary": None},
        metadata=req.metadata or {},
        text=(req.text or TextConfig()).model_dump(exclude_none=True),
        truncation=req.truncation,
        usage=None,
        error=None,
        incomplete_details=None,
        user=req.user,
        service_tier="default",
        safety_identifier=req.safety_identifier,
        prompt_cache_key=req.prompt_cache_key,
        prompt_cache_retention=req.prompt_cache_retention,
    )


def scoped(owner: str, item_id: str) -> str:
    """The key of an item's kept web_search result: the owner's, so ids of other keys find nothing."""
    return f"{owner}/{item_id}"


def _tool_state(state: dict[str, Any], echo: EchoContext) -> ToolState:
    """The tool state a conversation carries on (stored with the previous response) and what the input adds."""
    pages = {int(k): v for k, v in state.get("pages", {}).items() if isinstance(v, dict)}
    pending = dict(state.get("pending", {}))
    return ToolState(calls=echo.calls, pending=pending, approvals=echo.approvals, pages=pages, answered=echo.answered)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool["name"], "description": tool.get("description") or "", "parameters": tool.get("parameters")}
