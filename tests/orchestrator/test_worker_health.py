"""Issue 40: a healthy worker is never reported down, and a dead one is, after `worker_down_after` checks.

The race: a worker's uvicorn closes a connection idle for its keep-alive, and a check or request sent on that
connection as it closes fails though the worker is fine. Here the worker's keep-alive equals the check interval,
and its loop is busy for a moment as the keep-alive runs out (`BusyAtKeepAlive`, as a loaded vLLM front-end's
would be): a request that reaches it then is on a connection being closed, unread, and gets a reset. The test
sends a request exactly then, each time the worker starts closing an idle connection, so the race is hit by
design, not by luck, while the health checks run at that same interval.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import scenario
from fixture_tools import weather_server
from structlog.testing import capture_logs
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestrator import harmony as h
from orchestrator.worker.client import GenerateRequest, WorkerPool, WorkerUnavailable
from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.support.asgi import serve_asgi
from toolkit.settings import ToolServerSettings

INTERVAL_S = 0.5  # the health-check interval and the worker's keep-alive
BUSY_S = 0.2  # how long the worker's loop is busy as an idle connection's keep-alive runs out
ROUNDS = 20  # keep-alive closes met with a request (about ROUNDS x INTERVAL_S seconds, checks running alongside)
FAST = "<|channel|>final<|message|>Quick.<|return|>"
FORECAST_CALL = '<|channel|>commentary to=weather.get_forecast <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'


class BusyAtKeepAlive(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, whose loop is busy for BUSY_S as an idle connection's keep-alive runs out:
    `closing` is set then, so a test can send a request that lands on the connection as it is closed."""

    closing = threading.Event()
    busy_s = BUSY_S

    def timeout_keep_alive_handler(self) -> None:
        type(self).closing.set()
        time.sleep(self.busy_s)  # blocks the server's loop: what arrives now is unread when the connection closes
        super().timeout_keep_alive_handler()


@pytest.fixture
def closing_worker() -> Iterator[tuple[str, ScriptedModel]]:
    """A scripted worker whose keep-alive is the check interval, busy as it closes an idle connection."""
    model = ScriptedModel(scenario([], default=FAST))
    with serve_asgi(build_worker(model), timeout_keep_alive=INTERVAL_S, http=BusyAtKeepAlive) as url:
        yield url, model


def metric(stack_url: str, name: str) -> float:
    """The sum of a counter's samples on the orchestrator's /metrics (0 when it has none)."""
    text = httpx.get(f"{stack_url}/metrics").text
    return sum(float(v) for v in re.findall(rf"^{name}_total{{[^}}]*}} (\S+)$", text, re.M))


@pytest.mark.parametrize(
    "keepalive_expiry_s",
    [INTERVAL_S * 0.8, INTERVAL_S * 4],
    ids=["idle-connections-dropped-before-the-worker-drops-them", "reused-connection-retried-on-a-new-one"],
)
def test_a_worker_closing_idle_connections_is_never_reported_down_nor_a_request_refused(
    make_stack, closing_worker, keepalive_expiry_s
):
    url, model = closing_worker
    with capture_logs() as logs:
        stack = make_stack(
            worker_urls=[url],
            health_interval_s=INTERVAL_S,
            keepalive_expiry_s=keepalive_expiry_s,
            worker_down_after=2,
        )
        for _ in range(ROUNDS):
            BusyAtKeepAlive.closing.clear()
            assert BusyAtKeepAlive.closing.wait(10 * INTERVAL_S), "the worker closed no idle connection"
            resp = stack.client.responses.create(model="gpt-oss", input="hi")  # a 503 raises: refused
            assert resp.status == "completed" and resp.output_text == "Quick."
            assert httpx.get(f"{stack.url}/healthz").status_code == 200
    down = [e for e in logs if e["event"] in ("worker.down", "worker.check_failed")]
    assert down == [] and metric(stack.url, "toolfleet_orchestrator_worker_downs") == 0
    assert model.stats.requests >= ROUNDS
    if keepalive_expiry_s > INTERVAL_S:  # the race was met: a reused connection failed, and was retried
        assert any(e["event"] == "worker.reconnect" for e in logs)
        assert metric(stack.url, "toolfleet_orchestrator_worker_reconnects") > 0


async def test_a_request_on_a_connection_the_worker_is_closing_is_sent_again_on_a_new_one(closing_worker):
    """Requests meet the race too (above, the checks, at the keep-alive's own interval, mostly get there first):
    here each request goes out as the worker closes the pooled connection a check left idle (the pool's default
    expiry, 4 s, is above this worker's 0.5 s keep-alive), and no check runs meanwhile."""
    url, model = closing_worker
    pool = WorkerPool([url], health_interval_s=3600, api="harmony")
    try:
        with capture_logs() as logs:
            for _ in range(3):
                await pool.check_health()  # leaves a pooled connection idle
                BusyAtKeepAlive.closing.clear()
                assert await asyncio.to_thread(BusyAtKeepAlive.closing.wait, 10 * INTERVAL_S)
                await generated(pool)  # sent on that connection as the worker closes it
        assert [e["during"] for e in logs if e["event"] == "worker.reconnect"] == ["request"] * 3
        assert pool.workers[0].healthy and model.stats.completed == 3
    finally:
        await pool.aclose()


async def generated(pool: WorkerPool) -> None:
    async for _ in pool.generate(GenerateRequest([1, 2, 3], 8)):
        pass


async def test_a_dead_worker_is_down_after_the_failed_checks_and_requests_fail_over_to_the_other(two_workers):
    _, (url_b, model_b) = two_workers
    model_b.scenario = scenario([], default=FAST)
    with serve_asgi(build_worker(ScriptedModel(Scenario()))) as doomed:
        pool = WorkerPool([doomed, url_b], health_interval_s=3600)  # down after 2 failed checks (the default)
        await pool.check_health()
    dead, alive = pool.workers
    try:
        with capture_logs() as logs:
            await pool.check_health()  # one failed check: not down
            # the connection the stopped worker closed may be tried first (its close not yet read): then the check
            # goes out once more on a new connection (`worker.reconnect`), and that one is refused
            checks = [e for e in logs if e["event"] != "worker.reconnect"]
            assert dead.healthy and [e["event"] for e in checks] == ["worker.check_failed"]
            assert checks[0]["error_class"] == "ConnectFailed"
            await pool.check_health()  # the second in a row: down
            assert not dead.healthy and logs[-1]["event"] == "worker.down"
            assert logs[-1]["error_class"] == "ConnectFailed"
            assert dead.check_failures == {"ConnectFailed": 2} and dead.downs == {"ConnectFailed": 1}
            async for _ in pool.generate(GenerateRequest([1, 2, 3], 8)):
                pass
            assert model_b.stats.completed == 1 and alive.healthy
    finally:
        await pool.aclose()


async def test_a_request_that_fails_on_a_new_connection_takes_the_worker_out_and_goes_to_the_next(two_workers):
    """Before any check noticed: the first request to the dead worker fails on a new connection (it is down at
    once) and is served by the other; the next goes straight to the other."""
    _, (url_b, model_b) = two_workers
    model_b.scenario = scenario([], default=FAST)
    with serve_asgi(build_worker(ScriptedModel(Scenario()))) as doomed:
        pool = WorkerPool([doomed, url_b], health_interval_s=3600)
        await pool.check_health()
    try:
        with capture_logs() as logs:
            for _ in range(2):
                async for _ in pool.generate(GenerateRequest([1, 2, 3], 8)):
                    pass
        assert model_b.stats.completed == 2 and not pool.workers[0].healthy
        # (a `worker.reconnect` first when the pooled connection the stopped worker closed was tried: see above)
        events = [e["event"] for e in logs if e["event"].startswith("worker.") and e["event"] != "worker.reconnect"]
        assert events == ["worker.down", "worker.retry"]
    finally:
        await pool.aclose()


def test_with_no_worker_up_a_request_still_tries_them_and_says_what_failed(make_stack):
    with serve_asgi(build_worker(ScriptedModel(Scenario()))) as doomed:
        stack = make_stack(worker_urls=[doomed], health_interval_s=INTERVAL_S)
    with pytest.raises(openai.APIStatusError) as err:
        stack.client.responses.create(model="gpt-oss", input="hi")
    assert err.value.status_code == 503 and "ConnectFailed" in err.value.message
    assert httpx.get(f"{stack.url}/healthz").status_code == 503


async def test_a_down_worker_is_tried_while_no_other_is_up(two_workers):
    """Marked down by a check it failed (a stall, a restart), the fleet's only worker still gets the request,
    which it serves; it is up again at once."""
    (url, model), _ = two_workers
    model.scenario = scenario([], default=FAST)
    pool = WorkerPool([url], health_interval_s=3600)
    try:
        await pool.check_health()
        worker = pool.workers[0]
        worker.healthy = False  # as a failed check leaves it
        tokens = [t async for t in pool.generate(GenerateRequest([1, 2, 3], 8))]
        # the answer was read to its end here; the worker may count it completed a moment later
        assert tokens and model.stats.requests == 1 and worker.healthy
    finally:
        await pool.aclose()


async def test_a_worker_that_never_answered_is_down_at_its_first_failed_check() -> None:
    with serve_asgi(build_worker(ScriptedModel(Scenario()))) as gone:
        pass
    pool = WorkerPool([gone], health_interval_s=3600)
    try:
        await pool.check_health()
        assert not pool.workers[0].healthy
        with pytest.raises(WorkerUnavailable, match="ConnectFailed"):
            async for _ in pool.generate(GenerateRequest([1], 1)):
                pass
        assert pool.workers[0].downs == {"ConnectFailed": 1}
    finally:
        await pool.aclose()


class SlowToClose(BusyAtKeepAlive):
    """A tool server busy for long as it closes an idle connection: the window spans the model's next call."""

    closing = threading.Event()
    busy_s = 1.0


def test_an_mcp_call_after_the_tool_servers_keep_alive_ran_out_goes_out_on_a_new_connection(make_stack):
    """The same rule towards tool servers (the gateway, a client-named server): a response's MCP session sits
    idle while the model writes its next call (about 0.8 s here), longer than the server's keep-alive
    (0.5 s); the server closes that connection then, slowly. The second call must not be sent on it."""
    second = FORECAST_CALL.replace("Oslo", "Bergen")
    stack = make_stack(keepalive_expiry_s=INTERVAL_S * 0.8)
    stack.script(
        [
            ("Sunny in Bergen", FAST),
            {"match": "Sunny in Oslo", "reply": second, "delay_s": 0.8 / len(h.encode_text(second))},
            ("forecast", FORECAST_CALL),
        ]
    )
    app = weather_server(ToolServerSettings()).build_app()
    with serve_asgi(app, timeout_keep_alive=INTERVAL_S, http=SlowToClose) as url:
        tool = {"type": "mcp", "server_label": "weather", "server_url": f"{url}/mcp", "require_approval": "never"}
        resp = stack.client.responses.create(model="gpt-oss", input="forecast?", tools=[tool])
    calls = [o for o in resp.output if o.type == "mcp_call"]
    assert [c.status for c in calls] == ["completed", "completed"] and resp.output_text == "Quick."
    if not SlowToClose.closing.is_set():  # seen under load: the server's keep-alive timer had not fired yet
        pytest.skip("the server did not start closing the idle connection under the model's turn: no race to test")
