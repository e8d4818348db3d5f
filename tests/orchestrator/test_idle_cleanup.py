"""Stored conversations' tool sessions are cleaned up once idle; unstored ones at once; one replica each."""

from __future__ import annotations

import time
import uuid

from test_workers import wait_for

EXEC = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["ls"]}<|call|>'
OK = "<|channel|>final<|message|>ok<|return|>"
CONTAINER = [{"type": "mcp", "server_label": "container"}]


def _conversation(resp) -> str:
    """The session id the container server saw (its output ends `in SESSION`): random, not the response id."""
    session = resp.output[0].output.rstrip("\n").rsplit(" in ", 1)[1]
    assert session.startswith("conv_") and session.removeprefix("conv_") != resp.id.removeprefix("resp_")
    return session


def test_an_idle_stored_conversation_gets_cleanup_session_on_the_servers_it_used(make_stack, recording_container):
    url, closed = recording_container
    stack = make_stack(container_url=url, session_idle_s=0.3, reap_interval_s=0.05)
    stack.script([("container.exec to=assistant", OK), ("run", EXEC)])
    first = stack.client.responses.create(model="gpt-oss", input="run", tools=CONTAINER)
    conv = _conversation(first)
    assert first.output[0].output == f"ran ['ls'] in {conv}\n"
    wait_for(lambda: conv in closed, "the idle conversation to be cleaned up")
    plain = stack.client.responses.create(model="gpt-oss", input="hello")  # used no tool: nothing to clean
    time.sleep(0.5)  # several reaper rounds
    assert closed == [conv] and plain.output_text


def test_a_stored_conversation_in_use_keeps_its_session_until_idle(make_stack, recording_container):
    url, closed = recording_container
    stack = make_stack(container_url=url, session_idle_s=3600, reap_interval_s=0.05)
    stack.script([("container.exec to=assistant", OK), ("run", EXEC)])
    first = stack.client.responses.create(model="gpt-oss", input="run", tools=CONTAINER)
    time.sleep(0.3)  # several reaper rounds, far from the idle limit
    second = stack.client.responses.create(model="gpt-oss", input="run", tools=CONTAINER, previous_response_id=first.id)
    assert closed == [] and second.output[0].output.endswith(f"in {_conversation(first)}\n")


def test_an_unstored_response_cleans_up_at_its_end(make_stack, recording_container):
    url, closed = recording_container
    stack = make_stack(container_url=url, session_idle_s=3600)
    stack.script([("container.exec to=assistant", OK), ("run", EXEC)])
    resp = stack.client.responses.create(model="gpt-oss", input="run", tools=CONTAINER, store=False)
    assert closed == [_conversation(resp)]


def test_with_redis_exactly_one_replica_cleans_up_an_idle_conversation(make_stack, recording_container, redis_url):
    url, closed = recording_container
    shared = {
        "store": "redis",
        "redis_url": redis_url,
        "redis_prefix": f"t{uuid.uuid4().hex[:8]}:",
        "container_url": url,
        "session_idle_s": 0.3,
        "reap_interval_s": 0.02,
    }
    a, b = make_stack(**shared), make_stack(**shared)
    a.script([("container.exec to=assistant", OK), ("run", EXEC)])
    first = a.client.responses.create(model="gpt-oss", input="run", tools=CONTAINER)
    b.client.responses.create(model="gpt-oss", input="run", tools=CONTAINER, previous_response_id=first.id)
    conv = _conversation(first)
    wait_for(lambda: conv in closed, "the idle conversation to be cleaned up")
    time.sleep(0.5)  # many reaper rounds on both replicas
    assert closed == [conv]
