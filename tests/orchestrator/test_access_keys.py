"""API keys (401), per-key isolation on every route and both stores (404), per-key limits (429), MCP credentials.

Everything runs over real HTTP on loopback against a real orchestrator; clients are the official
openai SDK with `api_key`, or httpx where the raw status, headers or body matter.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import structlog
from conftest import Stack, serving
from fixture_tools import weather_server

from orchestrator.guard.auth import key_id, load_keys, warn_if_open
from orchestrator.settings import OrchestratorSettings
from tests.support.service import running_service
from toolkit.settings import ToolServerSettings

KEY_A, KEY_B = "sk-test-a-" + uuid.uuid4().hex, "sk-test-b-" + uuid.uuid4().hex
SLOW = "<|channel|>final<|message|>" + "slow " * 300 + "<|return|>"
FORECAST = '<|channel|>commentary to=weather.get_forecast <|constrain|>json<|message|>{"city":"Oslo"}<|call|>'
DONE = "<|channel|>final<|message|>Done.<|return|>"


def sdk(stack: Stack, key: str | None) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key or "", max_retries=0, timeout=30)


def raw(stack: Stack, key: str | None) -> httpx.Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=stack.url, headers=headers, timeout=30)


def keyed(make_stack, **extra: Any) -> Stack:
    return make_stack(api_keys=[KEY_A, KEY_B], **extra)


# --- keys ---------------------------------------------------------------------------------------------


def test_without_a_key_or_with_a_wrong_one_every_v1_route_is_a_401_in_openai_shape(make_stack):
    stack = keyed(make_stack)
    for key, code in ((None, None), ("sk-wrong", "invalid_api_key"), (KEY_A.upper(), "invalid_api_key")):
        with raw(stack, key) as http:
            for method, path in (
                ("POST", "/v1/responses"),
                ("GET", "/v1/responses/resp_x"),
                ("GET", "/v1/models"),
                ("DELETE", "/v1/responses/resp_x"),
                ("POST", "/v1/responses/resp_x/cancel"),
                ("GET", "/v1/responses/resp_x/input_items"),
            ):
                r = http.request(method, path, json={"input": "hi"} if method == "POST" else None)
                assert r.status_code == 401, (key, method, path)
                body = r.json()
                assert set(body["error"]) == {"message", "type", "param", "code"}
                assert body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == code
                assert key is None or key not in r.text  # the key is never echoed
                assert r.headers["www-authenticate"] == "Bearer"
    with pytest.raises(openai.AuthenticationError):
        sdk(stack, "sk-wrong").responses.create(model="gpt-oss", input="hi")


def test_the_openai_sdk_with_api_key_works_end_to_end(make_stack):
    stack = keyed(make_stack)
    stack.script([], default="<|channel|>final<|message|>Hi A.<|return|>")
    client = sdk(stack, KEY_A)
    resp = client.responses.create(model="gpt-oss", input="hi")
    assert resp.output_text == "Hi A." and client.responses.retrieve(resp.id).output_text == "Hi A."
    events = list(client.responses.create(model="gpt-oss", input="hi", stream=True))
    assert events[-1].type == "response.completed"
    assert [m.id for m in client.models.list().data]


def test_healthz_stays_open_and_metrics_is_open_or_asks_for_its_own_token(make_stack):
    stack = keyed(make_stack)
    with raw(stack, None) as http:
        assert http.get("/healthz").status_code == 200 and http.get("/metrics").status_code == 200
    guarded = keyed(make_stack, metrics_token="metrics-" + uuid.uuid4().hex)
    token = guarded.app.state.service.settings.metrics_token
    with raw(guarded, None) as anon, raw(guarded, KEY_A) as api, raw(guarded, token) as scraper:
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/metrics").status_code == 401 and api.get("/metrics").status_code == 401
        assert scraper.get("/metrics").status_code == 200 and "orchestrator" in scraper.get("/metrics").text


def test_keys_come_from_the_flag_the_environment_variable_and_a_keys_file_and_are_never_logged(scripted, tmp_path):
    worker_url, _ = scripted
    file_key, env_key, flag_key = (f"sk-{n}-" + uuid.uuid4().hex for n in ("file", "env", "flag"))
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# one key per line\n{file_key}\n\n")
    env = {"TOOLFLEET_ORCHESTRATOR_API_KEYS": env_key}
    flags = [
        "-m",
        "orchestrator",
        "--worker-urls",
        f'["{worker_url}"]',
        "--api-keys-file",
        str(keys_file),
        "--store-path",
        str(tmp_path / "db.sqlite3"),
    ]
    with running_service(flags, env=env) as svc:
        for key in (file_key, env_key):
            client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=key, max_retries=0, timeout=30)
            assert client.responses.create(model="gpt-oss", input="hi").status == "completed"
        assert httpx.post(f"{svc.url}/v1/responses", json={"input": "hi"}).status_code == 401
        log = svc.log()
    assert file_key not in log and env_key not in log
    settings = OrchestratorSettings.from_args(["--api-keys", f"{flag_key},{file_key}"], "t")
    assert load_keys(settings) == [flag_key, file_key]


def test_listening_beyond_loopback_without_keys_logs_a_warning():
    with structlog.testing.capture_logs() as logs:
        warn_if_open(OrchestratorSettings(host="0.0.0.0"), _keys([]))
        warn_if_open(OrchestratorSettings(host="127.0.0.1"), _keys([]))
        warn_if_open(OrchestratorSettings(host="0.0.0.0"), _keys(["k"]))
    assert [e["event"] for e in logs] == ["auth.disabled"] and logs[0]["host"] == "0.0.0.0"


def _keys(keys: list[str]):
    from orchestrator.guard.auth import ApiKeys

    return ApiKeys(keys)


# --- isolation ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def replicas(make_stack, store: str, redis_url: str | None) -> Iterator[tuple[Stack, Stack]]:
    """Two replicas sharing one store (Redis), or one replica twice (SQLite: one process owns the file)."""
    if store == "sqlite":
        one = keyed(make_stack)
        yield one, one
        return
    shared = {"store": "redis", "redis_url": redis_url, "redis_prefix": f"t{uuid.uuid4().hex[:8]}:"}
    yield keyed(make_stack, **shared), keyed(make_stack, **shared)


def _not_found_body(http: httpx.Client, method: str, path: str, rid: str) -> dict[str, Any]:
    """The body of `path` for a response id that exists nowhere, written with `rid` for comparison."""
    missing = "resp_" + uuid.uuid4().hex
    r = http.request(method, path.replace(rid, missing), json={})
    assert r.status_code == 404
    return json.loads(r.text.replace(missing, rid))


@pytest.fixture(params=["sqlite", "redis"])
def store_kind(request) -> str:
    return request.param


def test_another_key_gets_the_same_404_as_a_missing_id_on_every_route(make_stack, store_kind, request):
    redis_url = request.getfixturevalue("redis_url") if store_kind == "redis" else None
    with replicas(make_stack, store_kind, redis_url) as (a, b):
        a.script([], default=DONE)
        first = sdk(a, KEY_A).responses.create(model="gpt-oss", input="mine", metadata={"who": "a"})
        rid = first.id
        with raw(b, KEY_B) as other:
            for method, path in (
                ("GET", f"/v1/responses/{rid}"),
                ("GET", f"/v1/responses/{rid}?stream=true"),
                ("GET", f"/v1/responses/{rid}/input_items"),
                ("POST", f"/v1/responses/{rid}/cancel"),
                ("DELETE", f"/v1/responses/{rid}"),
            ):
                r = other.request(method, path)
                assert r.status_code == 404, (method, path, r.text)
                assert r.json() == _not_found_body(other, method, path, rid), (method, path)
            chained = other.post("/v1/responses", json={"input": "steal", "previous_response_id": rid})
            missing = other.post("/v1/responses", json={"input": "x", "previous_response_id": "resp_" + "0" * 32})
            assert chained.status_code == missing.status_code == 404
            assert chained.json() == json.loads(missing.text.replace("resp_" + "0" * 32, rid))
        mine = sdk(b, KEY_A)  # the owner, on the other replica: everything still there
        assert mine.responses.retrieve(rid).metadata == {"who": "a"}
        assert [i.content[0].text for i in mine.responses.input_items.list(rid).data] == ["mine"]
        assert mine.responses.create(model="gpt-oss", input="more", previous_response_id=rid).status == "completed"
        mine.responses.delete(rid)
        with pytest.raises(openai.NotFoundError):
            mine.responses.retrieve(rid)


def test_a_running_background_response_is_the_creators_alone(make_stack, store_kind, request):
    redis_url = request.getfixturevalue("redis_url") if store_kind == "redis" else None
    with replicas(make_stack, store_kind, redis_url) as (a, b):
        a.script([], default=SLOW, token_delay_s=0.01)
        bg = sdk(a, KEY_A).responses.create(model="gpt-oss", input="long", background=True)
        other = sdk(b, KEY_B)
        with pytest.raises(openai.NotFoundError):
            other.responses.cancel(bg.id)
        with pytest.raises(openai.NotFoundError):
            list(other.responses.retrieve(bg.id, stream=True))
        with pytest.raises(openai.NotFoundError):
            other.responses.delete(bg.id)
        assert sdk(a, KEY_A).responses.retrieve(bg.id).status == "in_progress"  # untouched by B
        assert sdk(b, KEY_A).responses.cancel(bg.id).status == "cancelled"


def test_responses_made_without_keys_are_not_readable_once_keys_are_required(tmp_path, make_stack):
    """Records are owned by `anonymous` without keys: turning keys on does not hand them to a key."""
    from orchestrator.app import create_app
    from orchestrator.persist.sqlite import SQLiteStores

    path = str(tmp_path / "db.sqlite3")
    plain = make_stack()
    settings = plain.app.state.service.settings
    with serving(create_app(settings, stores=SQLiteStores(path))) as url:
        rid = httpx.post(f"{url}/v1/responses", json={"input": "hi"}, timeout=30).json()["id"]
    keyed_settings = settings.model_copy(update={"api_keys": [KEY_A]})
    with serving(create_app(keyed_settings, stores=SQLiteStores(path))) as url:
        r = httpx.get(f"{url}/v1/responses/{rid}", headers={"authorization": f"Bearer {KEY_A}"})
    assert r.status_code == 404


def test_owner_ids_are_digests_not_keys():
    assert key_id(KEY_A) != key_id(KEY_B) and KEY_A not in key_id(KEY_A) and key_id(KEY_A) == key_id(KEY_A)


# --- limits -------------------------------------------------------------------------------------------


def test_requests_beyond_the_per_key_rate_are_a_429_with_retry_after(make_stack):
    stack = keyed(make_stack, rate_limit_rps=0.2, rate_limit_burst=2)
    with raw(stack, KEY_A) as a, raw(stack, KEY_B) as b:
        assert [a.get("/v1/models").status_code for _ in range(2)] == [200, 200]
        refused = a.get("/v1/models")
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"] == {
            "message": refused.json()["error"]["message"],
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
        assert b.get("/v1/models").status_code == 200  # another key has its own bucket
    with pytest.raises(openai.RateLimitError):
        sdk(stack, KEY_A).models.list()


def test_concurrent_responses_beyond_the_per_key_limit_are_a_429(make_stack):
    stack = keyed(make_stack, max_concurrent_per_key=1)
    stack.script([], default=SLOW, token_delay_s=0.01)
    a, b = sdk(stack, KEY_A), sdk(stack, KEY_B)
    running = a.responses.create(model="gpt-oss", input="long", background=True)
    with pytest.raises(openai.RateLimitError) as err:
        a.responses.create(model="gpt-oss", input="another")
    assert err.value.response.headers["retry-after"] == "1" and err.value.code == "rate_limit_exceeded"
    other = b.responses.create(model="gpt-oss", input="long", background=True)  # B is not held back by A
    a.responses.cancel(running.id)
    b.responses.cancel(other.id)
    stack.script([], default=DONE)
    assert a.responses.create(model="gpt-oss", input="now").status == "completed"


# --- MCP credentials ----------------------------------------------------------------------------------


class HeaderLog:
    """A pure-ASGI wrapper that records the headers of every request an MCP server receives."""

    def __init__(self, app: Any) -> None:
        self.app, self.seen = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


@pytest.fixture
def weather_with_log() -> Iterator[tuple[str, HeaderLog]]:
    recorded = HeaderLog(weather_server(ToolServerSettings()).build_app())
    with serving(recorded) as url:
        yield url + "/mcp", recorded


def test_mcp_authorization_and_headers_reach_only_their_server_and_are_redacted_when_stored(
    make_stack, weather_with_log
):
    url, recorded = weather_with_log
    stack = keyed(make_stack)
    stack.script([("weather.get_forecast to=assistant", DONE), ("forecast", FORECAST)])
    token, secret = "tok-" + uuid.uuid4().hex, "hdr-" + uuid.uuid4().hex
    tool = {
        "type": "mcp",
        "server_label": "weather",
        "server_url": url,
        "require_approval": "never",
        "authorization": token,
        "headers": {"x-api-token": secret},
    }
    resp = sdk(stack, KEY_A).responses.create(model="gpt-oss", input="forecast?", tools=[tool])
    assert resp.output[1].type == "mcp_call" and resp.output[1].output.startswith("Sunny")
    assert recorded.seen and all(h["authorization"] == f"Bearer {token}" for h in recorded.seen)
    assert all(h["x-api-token"] == secret for h in recorded.seen)
    echoed = resp.tools[0]
    assert echoed.authorization == "<redacted>" and echoed.headers == {"x-api-token": "<redacted>"}
    stored = sdk(stack, KEY_A).responses.retrieve(resp.id).model_dump_json()
    db = stack.app.state.stores.connection.db  # the SQLite file's rows, every table
    rows = [str(r) for t in ("responses", "results", "conversations") for r in db.execute(f"SELECT * FROM {t}")]
    for text in (stored, *rows):
        assert token not in text and secret not in text
    # The client-named server got a session id of its own, not the conversation id the fleet's tools see.
    sessions = {h["x-session-id"] for h in recorded.seen if "x-session-id" in h}
    conversation = db.execute("SELECT conversation FROM responses WHERE id = ?", (resp.id,)).fetchone()[0]
    assert len(sessions) == 1 and sessions.pop() != conversation


def test_a_client_may_not_set_the_session_id_or_hop_by_hop_headers_of_an_mcp_tool(make_stack, weather_with_log):
    url, recorded = weather_with_log
    stack = keyed(make_stack)
    cases = [("weather", name) for name in ("X-Session-Id", "host", "Transfer-Encoding")] + [("python", "x-session-id")]
    for label, name in cases:  # a built-in namespace too: no client picks the session of another key's python
        tool = {"type": "mcp", "server_label": label, "server_url": url, "headers": {name: "conv_theirs"}}
        with pytest.raises(openai.BadRequestError) as err:
            sdk(stack, KEY_A).responses.create(model="gpt-oss", input="x", tools=[tool])
        assert name in err.value.message and err.value.param == "tools[0].headers"
    assert recorded.seen == []  # refused before any connection


def test_a_sqlite_file_from_before_api_keys_gets_an_owner_column_and_its_responses_belong_to_anonymous(tmp_path):
    import sqlite3

    import anyio

    from orchestrator.persist.sqlite import SQLiteStores

    path = tmp_path / "old.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute(
            "CREATE TABLE responses (id TEXT PRIMARY KEY, created REAL, conversation TEXT, body TEXT,"
            " input_items TEXT, messages TEXT, events TEXT, tools TEXT)"
        )
        db.execute(
            "INSERT INTO responses VALUES ('resp_old', strftime('%s','now'), 'conv_x', '{}', '[]', '[]', '[]', '{}')"
        )
        db.commit()
    stores = SQLiteStores(str(path))
    record = anyio.run(stores.responses.get, "resp_old")
    anyio.run(stores.aclose)
    assert record is not None and record.owner == "anonymous"
