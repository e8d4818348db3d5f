"""The Responses service: turns a request into a running response, keeps it live, stores it, releases tools."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from openai_harmony import Message

from orchestrator import compaction, kinds, references, truncation, workspace
from orchestrator import harmony as h
from orchestrator.addresses import hide, worker_roles
from orchestrator.chat import ChatTurns, chat_tools
from orchestrator.containers import Containers
from orchestrator.conversations import Bounds, Conversations
from orchestrator.errors import RequestError
from orchestrator.events import ResponseBuilder, new_id
from orchestrator.items import normalize
from orchestrator.kinds import EchoContext, custom
from orchestrator.kinds.compaction import compaction_item, is_triggered
from orchestrator.kinds.mcp import check_issued, list_tools_item
from orchestrator.limits import KeyLimits
from orchestrator.live import RUNNING, Live, LiveResponses
from orchestrator.mcp_policy import McpPolicy, ServerRefused, refusal
from orchestrator.persist import Conversation, Record, Stores
from orchestrator.run import Limits, Run, ToolState, TurnModel, TurnState
from orchestrator.schema import McpServer, ResponsesRequest, TextConfig, Toolset, answer_format, check_include
from orchestrator.settings import OrchestratorSettings
from orchestrator.tools import (
    Discovery,
    Endpoints,
    Listing,
    ToolSessions,
    ToolUnavailable,
    cleanup_sessions,
    loggable,
)
from orchestrator.turns import HARMONY, run
from orchestrator.worker.client import Chat, CountChat, Generate, WorkerError, WorkerUnavailable
from toolkit.tracing import annotate, span
from toolkit.wire import fleet_secret

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


class ResponsesService(LiveResponses):
    def __init__(
        self,
        settings: OrchestratorSettings,
        *,
        generate: Generate,
        stores: Stores,
        policy: McpPolicy | None = None,
        chat: Chat | None = None,
        api_for: Any = None,
        count_chat: CountChat | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy or McpPolicy.from_settings(settings)
        self.generate = generate
        self.chat = chat
        self.count_chat = count_chat
        self.api_for = api_for or (lambda model: None)  # model name -> "harmony" | "chat" | None (not known)
        self.store = stores.responses
        bounds = Bounds(settings.max_conversation_items, settings.max_conversation_bytes)
        self.conversations = Conversations(stores.conversations, bounds)
        self.discovery = Discovery()
        fleet_secret()  # the owner header's key: read (or made) now, not on the event loop by a response
        self.endpoints = Endpoints(settings.tools_url, settings.endpoint_overrides())
        self.worker_roles = worker_roles(settings.worker_urls)
        self.live: dict[str, Live] = {}
        self.limits = KeyLimits.from_settings(settings)
        self.closing = False
        """Set at shutdown: responses cancelled then fail (the caller did not cancel them)."""
        self.on_settled: Any = None  # (status, usage, [(namespace, outcome)]) -> None: the metrics
        self.containers: Containers | None = None  # set by the app: code_interpreter's containers

    # --- creating ---------------------------------------------------------------------------------

    async def create(
        self,
        req: ResponsesRequest,
        owner: str,
        *,
        kept: dict[str, Record] | None = None,
        warm_only: bool = False,
        base_url: str = "",
    ) -> Live:
        """Start a response owned by `owner` (the caller's key id); `kept`: a WebSocket connection's responses
        that `previous_response_id` may name without a store read; `warm_only`: prefill the worker, no output;
        `base_url`: the orchestrator as the caller reached it (links to container files, unless configured)."""
        if req.background and not req.store:
            raise RequestError("background responses need store=true", "background")
        slot = self.limits.running.take(owner)  # before the first await, so a burst cannot all pass the check
        lease = None
        try:
            if req.store:  # refused now rather than after it ran, when the fleet-wide store is full
                await self.store.room(owner)
            conv = await self._conversation(req, owner)
            lease = await self.conversations.hold(conv) if conv else None  # before its items are read
            p = await self._prepare(req, owner, kept)
            if p.conversation is not None:  # its input is added to the conversation: within the bounds
                await self.conversations.room(p.stored, p.items, "input")
            await self._workspace(p.run, owner, self.settings.public_url or base_url)
            p.run.warm_only = warm_only
            builder, rid = p.run.builder, p.run.builder.id
            live = Live(builder, req, owner, conversation=p.conversation, lease=lease, kept=kept, slot=slot)
            builder.start(queued=req.background)
            if req.background:  # other replicas sharing the store can see it running (and ask to cancel it)
                snapshot, events = builder.snapshot(), list(builder.events)
                await self.store.hold_running([rid], self.settings.background_hold_s)  # before anyone can read it
                await self.store.put(Record(rid, p.run.conversation, snapshot, p.items, [], events, owner=owner))
        except BaseException:
            slot.release()
            if lease is not None:  # refused before it ran: the conversation is free again at once
                await lease.release()
            raise
        self.live[rid] = live
        live.task = asyncio.create_task(self._traced(live, p.run, p.listings, p.n_head, p.items))
        return live

    async def _workspace(self, r: Run, owner: str, public_url: str) -> None:
        """The containers the request's tools name, once everything else in it passed (an `auto` one is new)."""
        if self.containers is None:
            return
        # references first: a request refused for a missing one makes no `auto` container
        for ns, (where, spec) in sorted(r.toolset.containers.items(), key=lambda e: isinstance(e[1][1], dict)):
            url = self.endpoints.url_for(ns)
            space = await workspace.resolve(ns, spec, where, owner, self.containers, r.sessions, url)
            if space is not None:
                r.workspaces[ns] = space
        if (space := r.workspaces.get("python")) is not None:
            r.container_id = space.container_id
        r.public_url = public_url.rstrip("/")

    async def count_input_tokens(self, req: ResponsesRequest, owner: str) -> int:
        """The first turn's prompt in tokens, rendered exactly as `create` would render it (nothing runs)."""
        r = (await self._prepare(req, owner)).run
        r.messages.extend(r.new_input)
        model = r.model or HARMONY
        if r.context_tokens is not None:
            await truncation.fit(r, model, r.context_tokens)
        return await model.count(r)

    async def compact(self, req: ResponsesRequest, owner: str) -> dict[str, Any]:
        """OpenAI's compacted window: the user's messages, then one compaction item the model wrote. Its model
        turn counts against the key's running limit, as a response's does."""
        with self.limits.running.take(owner):  # before the first await
            p = await self._prepare(req, owner)
            r = p.run
            messages = r.messages + r.new_input
            summary = await compaction.summarise(r, r.model or HARMONY, messages)
        output = [compaction.user_item(m) for m in compaction.kept(messages[p.n_head :])]
        return {
            "id": new_id("cmp"),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*output, compaction_item(summary)],
            "usage": r.usage.as_dict(),
        }

    async def _prepare(self, req: ResponsesRequest, owner: str, kept: dict[str, Record] | None = None) -> Prepared:
        """Everything a response needs before it runs: history, tools, the rendered head, its Run."""
        prev = await self._previous(req, owner, kept)
        conv = await self._conversation(req, owner)
        include = check_include(req.include)
        tools = kinds.toolset(req.tools, req.tool_choice, self._gateway_url)
        namespaces, listings = await self._namespaces(tools)
        model = self._turn_model(req, include, namespaces, tools)
        rid = new_id("resp")
        # The tool sessions' id: random, not derived from the response id (nor from the conversation's id).
        conversation = prev.conversation if prev else conv.session if conv else new_id("conv")
        body = self._body(req, rid, prev)
        if conv is not None:
            body["conversation"] = {"id": conv.id}
        builder = ResponseBuilder(body)
        state = (prev.tools if prev else conv.tools if conv else {}) or {}
        stored = await self.conversations.history(conv) if conv else []
        earlier = compaction.window(stored)
        items = await references.resolve(self.store, owner, normalize(req.input), earlier)
        echo = EchoContext(dict(state.get("calls", {})), await self._results(owner, kinds.kept_ids(earlier + items)))
        history = kinds.to_messages(earlier, echo) if conv else h.load(prev.messages) if prev else []
        new_input = kinds.to_messages(compaction.window(items), echo)
        check_issued(echo, history + new_input)
        head = self._head(req, namespaces, tools)
        r = Run(
            builder,
            head + history,
            tools,
            self.endpoints,
            ToolSessions(
                session_id=conversation,
                timeout_s=self.settings.tool_timeout_s,
                keepalive_s=self.settings.keepalive_expiry_s,
                owner=owner,
            ),
            self.generate,
            self._limits(req),
            conversation,
            req.sampling(),
            effort=req.reasoning.effort if req.reasoning else None,
            new_input=new_input,
            include=include,
            model=model,
            tools=_tool_state(state, echo),
            turn=TurnState(required=tools.required, answer_format=answer_format(req.text)),
            logprobs=(req.top_logprobs or 0) if "message.output_text.logprobs" in include else None,
            compact_threshold=req.compact_threshold,
            context_tokens=self.settings.context_tokens if req.truncation == "auto" else None,
            compact_only=is_triggered(items),
        )
        return Prepared(r, listings, len(head), items, conv, stored)

    async def _conversation(self, req: ResponsesRequest, owner: str) -> Conversation | None:
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

    def _limits(self, req: ResponsesRequest) -> Limits:
        return Limits(
            req.max_output_tokens or self.settings.max_output_tokens,
            self.settings.max_tool_calls if req.max_tool_calls is None else req.max_tool_calls,
            max_turns=(req.max_tool_calls or self.settings.max_tool_calls) + 8,
        )

    async def _traced(self, live: Live, r: Run, listings: dict[str, Any], n_head: int, items: list[dict]) -> None:
        """`_execute` under one span per response (a child of the request's), its ids on every log line."""
        ids = {"response_id": live.builder.id, "conversation_id": r.conversation}
        with span("response", **ids) as current, structlog.contextvars.bound_contextvars(**ids):
            try:
                await self._execute(live, r, listings, n_head, items)
            finally:
                status = live.builder.body.get("status")
                annotate(current, outcome="ok" if status == "completed" else str(status))

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

    def _gateway_url(self, label: str) -> str | None:
        return self.endpoints.url_for(label) if self.settings.tools_url else None

    async def _namespaces(self, tools: Toolset) -> tuple[list[h.Namespace], dict[str, Any]]:
        out, listings = [], {}
        for ns in kinds.BUILTIN_NAMESPACES:
            if ns not in tools.builtins:
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
        found = await self.store.get_results([_scoped(owner, i) for i in item_ids])
        return {i: found[_scoped(owner, i)] for i in item_ids if _scoped(owner, i) in found}

    def _body(self, req: ResponsesRequest, rid: str, prev: Record | None) -> dict[str, Any]:
        model = req.model or self.settings.model or "gpt-oss"
        return dict(
            id=rid,
            object="response",
            created_at=int(time.time()),
            model=model,
            status="queued",
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

    def worker_failure(self, exc: WorkerUnavailable | WorkerError) -> str:
        """A worker failure as the client reads it: the worker named by its role; its address to the log."""
        log.warning("worker.failed", error=str(exc))
        return hide(str(exc), self.worker_roles)

    # --- running ----------------------------------------------------------------------------------

    async def _execute(self, live: Live, r: Run, listings: dict[str, Any], n_head: int, items: list[dict]) -> None:
        b = live.builder
        try:
            b.in_progress()
            for label, tools in listings.items():
                list_tools_item(b, label, tools)
            await run(r)
        except asyncio.CancelledError:
            if not b.finished and self.closing:  # nobody asked: the replica stops (SIGTERM)
                error = {"code": "server_error", "message": "the orchestrator replica running it shut down"}
                b.finish("failed", usage=r.usage.as_dict(), error=error)
            elif not b.finished:
                b.finish("cancelled", usage=r.usage.as_dict())
        except WorkerUnavailable as exc:
            live.http_status, live.error_code = 503, "worker_unavailable"
            error = {"code": "server_error", "message": self.worker_failure(exc)}
            b.finish("failed", usage=r.usage.as_dict(), error=error)
        except WorkerError as exc:
            live.http_status, live.error_code = 502, "worker_error"
            error = {"code": "server_error", "message": self.worker_failure(exc)}
            b.finish("failed", usage=r.usage.as_dict(), error=error)
        except Exception as exc:
            log.exception("response.crashed", response_id=b.id)
            live.http_status = 500
            if not b.finished:
                b.finish("failed", error={"code": "server_error", "message": f"internal error: {type(exc).__name__}"})
        finally:
            try:
                await r.sessions.aclose()
            finally:  # a cancel that lands while the sessions close must not skip storing the response
                with anyio.CancelScope(shield=True):
                    await self._settle(live, r, n_head, items)

    async def _settle(self, live: Live, r: Run, n_head: int, items: list[dict]) -> None:
        b, req = live.builder, live.request
        status = b.body["status"]
        if self.on_settled is not None:
            self.on_settled(status, b.body.get("usage"), r.tools.log)
        saving: str | None = None  # what the caller was promised and is being written, while it is
        try:
            state = {"calls": r.tools.calls, "pending": r.tools.pending, "pages": r.tools.pages}
            if live.conversation is not None and status in ("completed", "incomplete"):
                saving = f"added to conversation {live.conversation.id}"
                await self.conversations.append(live.conversation, items + b.body["output"], state)
            live.record = Record(
                b.id, r.conversation, b.body, items, h.dump(r.messages[n_head:]), b.events, state, live.owner
            )
            if req.store:
                saving = "stored"
                await self.store.put(live.record)
            saving = None
            if req.store:
                await references.index(self.store, live.record)
            lives_on = req.store or live.conversation is not None or live.kept is not None
            if r.tools.results and lives_on:  # for client-kept history
                await self.store.put_results({_scoped(live.owner, k): v for k, v in r.tools.results.items()})
            if r.sessions.used and lives_on:  # its tool sessions stay until idle (the reaper frees them)
                await self.store.touch_conversation(r.conversation, r.sessions.used)
            elif r.sessions.used:
                await cleanup_sessions(r.conversation, r.sessions.used)
        except Exception as exc:
            log.exception("response.settle_failed", response_id=b.id)
            if saving is not None:  # the caller must not take it for kept: it cannot be retrieved or continued
                live.unsaved = (
                    f"response {b.id} finished {status} but could not be {saving}: {str(exc) or type(exc).__name__}"
                )
        finally:
            log.info("response.done", response_id=b.id, status=status, output_items=len(b.output))
            self.live.pop(b.id, None)
            if live.slot is not None:
                live.slot.release()
            await self._release(live)
            live.done.set()

    async def _release(self, live: Live) -> None:
        """The conversation is free for the next response once this one's items are there (or it failed)."""
        if live.lease is None:
            return
        try:
            await live.lease.release()
        except Exception:
            log.exception("conversation.release_failed", conversation_id=live.lease.conv_id)  # it lapses by itself

    async def reap_idle(self) -> None:
        for conversation, urls in await self.store.idle_conversations(self.settings.session_idle_s):
            await cleanup_sessions(conversation, urls)
            await self.store.forget_conversation(conversation)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The service's background loops (idle conversations, cancels asked on other replicas) while it
        serves; on exit, the responses still running are cancelled."""
        loops = [
            asyncio.create_task(every(self.settings.reap_interval_s, self.reap_idle, "reaper")),
            asyncio.create_task(every(self.settings.cancel_poll_s, self.watch_cancels, "cancel_watch")),
            asyncio.create_task(every(self.settings.background_hold_s / 3, self.hold_background, "background_hold")),
        ]
        try:
            yield
        finally:
            for loop in loops:
                loop.cancel()
            await self.aclose()

    async def hold_background(self) -> None:
        """Renew the holds of the background responses this replica runs (see `LiveResponses.find`)."""
        if ids := [rid for rid, lv in self.live.items() if lv.request.background]:
            await self.store.hold_running(ids, self.settings.background_hold_s)

    async def aclose(self) -> None:
        self.closing = True
        tasks = [lv.task for lv in self.live.values() if lv.task]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


async def every(interval_s: float, job: Callable[[], Awaitable[None]], name: str) -> None:
    """Run `job` every `interval_s` until cancelled; a failed round is logged and the next one runs."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await job()
        except Exception:
            log.exception(f"{name}.failed")


def _scoped(owner: str, item_id: str) -> str:
    return f"{owner}/{item_id}"


def _tool_state(state: dict[str, Any], echo: EchoContext) -> ToolState:
    """The tool state a conversation carries on (stored with the previous response) and what the input adds."""
    pages = {int(k): v for k, v in state.get("pages", {}).items() if isinstance(v, dict)}
    pending = dict(state.get("pending", {}))
    return ToolState(calls=echo.calls, pending=pending, approvals=echo.approvals, pages=pages, answered=echo.answered)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool["name"], "description": tool.get("description") or "", "parameters": tool.get("parameters")}
