"""2026-07-28 requests that carry no session through the gateway: `input_required` retries and listen streams.

The official SDK's client in its default `mode="auto"` against two fixture replicas, directly and through the
gateway. A sessionless request is routed fresh each time, so what ties two requests together must be the
gateway's doing: the retry of an `input_required` answer goes back to the replica that asked (only it holds
the question), and a `subscriptions/listen` stream is relayed event by event while it stays open, and ends
upstream when the client leaves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.subscriptions import ResourceUpdated
from mcp.shared.exceptions import MCPError

from tests.support.gateway import GatewayProc, Upstream, call_text, connect, gateway_config, running_gateway


async def _answer(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"answer": f"yes to {params.message}"})


@pytest.fixture(params=["direct", "gateway"])
def url(request: pytest.FixtureRequest, replicas: list[Upstream], gateway: GatewayProc) -> str:
    return replicas[0].url if request.param == "direct" else gateway.url("fixture")


async def test_an_input_required_retry_goes_back_to_the_replica_that_asked(url: str, replicas: list[Upstream]) -> None:
    """Each round's retry carries only the `requestState`: without its pin the gateway would send it to the
    replica with fewer pins - the one that did not ask, which refuses it."""
    answered = []
    async with connect(url, "streamable-http", elicitation_callback=_answer) as client:
        assert client.session.protocol_version == "2026-07-28"
        for n in range(4):
            result = await client.call_tool("confirm", {"question": f"q{n}"})
            assert not result.is_error, result.content
            answered.append(result.content[0].text)  # type: ignore[union-attr]
    replica_names = {u.replica for u in replicas}
    assert [a.partition(":")[2] for a in answered] == [f"yes to q{n}" for n in range(4)]
    assert {a.partition(":")[0] for a in answered} <= replica_names


async def test_a_retry_naming_a_state_no_replica_asked_is_refused_by_a_replica(gateway: GatewayProc) -> None:
    """A `requestState` the gateway never saw is routed like any sessionless request, and the replica says no."""
    async with connect(gateway.url("fixture"), "streamable-http") as client:
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(name="confirm", arguments={"question": "q"}, request_state="forged")
        )
        with pytest.raises(MCPError, match="Invalid or expired requestState"):
            await client.session.send_request(request, types.CallToolResult)


@pytest.fixture(scope="module")
def single(replicas: list[Upstream]) -> Iterator[GatewayProc]:
    """A gateway in front of one replica: a listen stream and the call that publishes reach the same bus."""
    with running_gateway(gateway_config({"fixture": [replicas[0].url]})) as gw:
        yield gw


@pytest.mark.parametrize("route", ["direct", "gateway"])
async def test_a_listen_stream_is_relayed_while_open_and_ends_upstream_with_the_client(
    route: str, replicas: list[Upstream], single: GatewayProc
) -> None:
    url = replicas[0].url if route == "direct" else single.url("fixture")
    async with connect(url, "streamable-http") as client, connect(url, "streamable-http") as other:
        # a relay that held frames back until the stream's end would never show the acknowledgement
        with anyio.fail_after(30):
            async with client.listen(resource_subscriptions=["fixture://greeting"]) as sub:
                assert sub.honored is not None and sub.honored.resource_subscriptions == ["fixture://greeting"]
                assert await call_text(other, "listeners") == "r1:1"
                for _ in range(2):  # each event arrives while the stream is open, not when it ends
                    assert await call_text(other, "touch", {"uri": "fixture://greeting"}) == "r1:touched"
                    assert await anext(aiter(sub)) == ResourceUpdated(uri="fixture://greeting")
        for _ in range(100):  # the upstream stream ends once the gateway sees the client leave
            if (left := await call_text(other, "listeners")) == "r1:0":
                break
            await anyio.sleep(0.1)
        assert left == "r1:0"
