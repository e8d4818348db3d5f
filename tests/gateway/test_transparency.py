"""Both transports, `mcp` 2.x clients in both protocol eras: the gateway relays every MCP feature unchanged.

Each scenario runs once directly against a fixture replica and once through the gateway; the
results must be equal apart from `serverInfo.name`, which becomes the namespace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.support.gateway import GatewayProc, Upstream, connect

MODES = ("auto", "legacy")


def _direct(up: Upstream, transport: str) -> str:
    return up.url if transport == "streamable-http" else up.url.removesuffix("/mcp") + "/sse"


def _strip(obj: Any) -> Any:
    """A result as JSON without the serverInfo the gateway renames."""
    data = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.get("_meta", {}).pop("io.modelcontextprotocol/serverInfo", None)
    if not data.get("_meta"):
        data.pop("_meta", None)
    return data


async def _try(call: Callable[[], Awaitable[Any]]) -> Any:
    """The result as JSON, or the JSON-RPC error the call raised (both must match direct vs gateway)."""
    try:
        return _strip(await call())
    except MCPError as exc:
        return {"error": exc.error.code, "message": exc.error.message}


async def _scenario(url: str, transport: str, mode: str) -> dict[str, Any]:
    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[Any] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_sample(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        text = params.messages[0].content.text  # type: ignore[union-attr]
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text.upper()), model="m"
        )

    async def on_elicit(ctx: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    out: dict[str, Any] = {}
    async with connect(
        url,
        transport,
        mode=mode,
        logging_callback=on_log,
        sampling_callback=on_sample,
        elicitation_callback=on_elicit,
        log_level="info",
    ) as client:
        out["server"] = client.server_info.name if client.server_info else None
        out["instructions"] = client.instructions
        out["tools"] = sorted(_strip(t)["name"] for t in (await client.list_tools()).tools)
        out["tool_defs"] = [_strip(t) for t in (await client.list_tools()).tools]
        out["add"] = await _try(lambda: client.call_tool("add", {"a": 2, "b": 3}))
        out["fail"] = await _try(lambda: client.call_tool("fail", {"message": "boom"}))
        out["unknown_tool"] = await _try(lambda: client.call_tool("nope", {}))
        out["progress"] = await _try(lambda: client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))
        out["progress_seen"] = list(progress)
        out["log"] = await _try(lambda: client.call_tool("log", {"message": "hello log"}))
        out["logs_seen"] = list(logs)
        out["resources"] = await _try(lambda: client.list_resources())
        out["templates"] = await _try(lambda: client.list_resource_templates())
        out["greeting"] = await _try(lambda: client.read_resource("fixture://greeting"))
        out["item"] = await _try(lambda: client.read_resource("fixture://items/42"))
        out["prompts"] = await _try(lambda: client.list_prompts())
        out["prompt"] = await _try(lambda: client.get_prompt("review", {"code": "x = 1"}))
        out["sample"] = await _try(lambda: client.call_tool("sample", {"prompt": "hi there"}))
        out["ask"] = await _try(lambda: client.call_tool("ask", {"question": "colour?"}))
        out["ping"] = await _try(lambda: client.send_ping())
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_every_feature_answers_the_same_through_the_gateway(
    gateway: GatewayProc, replicas: list[Upstream], transport: str, mode: str
) -> None:
    direct = await _scenario(_direct(replicas[0], transport), transport, mode)
    via = await _scenario(gateway.url("fixture", transport), transport, mode)
    assert direct.pop("server") == "fixture" and via.pop("server") == "fixture"
    for key in ("greeting",):  # the replica's name is in the text; the gateway may pick either replica
        for side in (direct, via):
            side[key]["contents"][0]["text"] = side[key]["contents"][0]["text"][:10]
    assert via == direct
    assert via["add"]["content"][0]["text"] == "5"
    assert len(via["progress_seen"]) == 3
    if mode == "legacy":  # the 2026 era has no back-channel for server-initiated requests
        assert via["sample"]["content"][0]["text"] == "HI THERE"
        assert via["ask"]["content"][0]["text"] == "accept:blue"


async def test_server_info_name_is_the_namespace(
    gateway: GatewayProc, replicas: list[Upstream], transport: str
) -> None:
    cfg_name = "fixture"
    async with connect(gateway.url(cfg_name, transport), transport, mode="legacy") as client:
        assert client.server_info is not None and client.server_info.name == cfg_name


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_call_is_cancelled_upstream(
    gateway: GatewayProc, replicas: list[Upstream], transport: str, mode: str
) -> None:
    tag = f"cancel-{transport}-{mode}"
    sid = f"resp_{tag}"
    async with connect(
        gateway.url("fixture", transport), transport, mode=mode, headers={"x-session-id": sid}
    ) as client:
        replica = (await client.call_tool("count", {})).content[0].text.split(":")[0]  # type: ignore[union-attr]
        with anyio.move_on_after(1):
            await client.call_tool("sleep", {"seconds": 30, "tag": tag})
        await client.call_tool("cleanup_session", {})
    up = next(u for u in replicas if u.replica == replica)
    async with connect(up.url, "streamable-http") as direct:
        for _ in range(50):
            seen = (await direct.call_tool("cancelled_sleeps", {})).content[0].text  # type: ignore[union-attr]
            if tag in seen.split(","):
                break
            await anyio.sleep(0.1)
        assert tag in seen.split(","), "the upstream never saw the cancellation"
