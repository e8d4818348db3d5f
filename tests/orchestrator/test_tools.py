"""Built-in tool turns (python, browser, container) and third-party MCP servers, through the SDK."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import urllib.parse
from collections.abc import Iterator

from fixture_tools import python_server
from invariants import check_stream
from openai.types.responses import Response

from tests.support.asgi import serve_asgi
from toolkit.settings import ToolServerSettings

PY_CALL = "<|channel|>analysis to=python<|message|>x = 6 * 7\nprint(x)<|call|>"
PY_AGAIN = "<|channel|>analysis to=python<|message|>print(x + 1)<|call|>"
SEARCH = '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query":"tea"}<|call|>'
OPEN = '<|channel|>analysis to=browser.open <|constrain|>json<|message|>{"id":0,"cursor":0}<|call|>'
FIND = '<|channel|>analysis to=browser.find <|constrain|>json<|message|>{"pattern":"green"}<|call|>'
CITED = "<|channel|>final<|message|>Green tea is Chinese 【1†L1】.<|return|>"


def test_python_call_becomes_code_interpreter_call_and_state_survives_the_chain(stack):
    stack.script(
        [
            ("<\\|start\\|>python to=assistant.*42", "<|channel|>final<|message|>It is 42.<|return|>"),
            ("<\\|start\\|>python to=assistant.*43", "<|channel|>final<|message|>Then 43.<|return|>"),
            ("compute", PY_CALL),
            ("again", PY_AGAIN),
        ]
    )
    first = stack.client.responses.create(
        model="gpt-oss", input="compute", tools=[{"type": "code_interpreter", "container": {"type": "auto"}}]
    )
    Response.model_validate(first.model_dump())
    ci = first.output[0]
    assert ci.type == "code_interpreter_call" and ci.code == "x = 6 * 7\nprint(x)" and ci.status == "completed"
    assert ci.outputs[0].logs == "42\n" and first.output_text == "It is 42."
    second = stack.client.responses.create(
        model="gpt-oss", input="again", previous_response_id=first.id, tools=[{"type": "code_interpreter"}]
    )
    assert second.output[0].outputs[0].logs == "43\n"  # x survived: the session id is conversation-stable
    assert second.output_text == "Then 43."


def test_streamed_python_call_has_code_interpreter_events_in_order(stack):
    stack.script([("python to=assistant", "<|channel|>final<|message|>done<|return|>"), ("compute", PY_CALL)])
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}], stream=True
        )
    )
    final = check_stream(events)
    types = [e.type for e in events if e.type.startswith("response.code_interpreter")]
    assert types[0] == "response.code_interpreter_call.in_progress"
    assert types[-3:] == [
        "response.code_interpreter_call_code.done",
        "response.code_interpreter_call.interpreting",
        "response.code_interpreter_call.completed",
    ]
    code = "".join(e.delta for e in events if e.type == "response.code_interpreter_call_code.delta")
    assert code == "x = 6 * 7\nprint(x)" and final.output[0].outputs[0].logs == "42\n"


def test_browser_calls_become_web_search_calls_with_real_urls_and_citations(stack):
    stack.script(
        [
            ("Find results for", CITED),
            ("Tea facts \\(https", FIND),
            ("†Tea facts†example.com", OPEN),
            ("tea", SEARCH),
        ]
    )
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="tea?", tools=[{"type": "web_search_preview"}], stream=True
        )
    )
    resp = check_stream(events)
    calls = [o for o in resp.output if o.type == "web_search_call"]
    assert [c.action.type for c in calls] == ["search", "open_page", "find_in_page"]
    assert calls[0].action.query == "tea"
    assert calls[1].action.url == "https://example.com/tea" and calls[2].action.url == "https://example.com/tea"
    message = resp.output[-1]
    ann = message.content[0].annotations
    assert ann[0].type == "url_citation" and ann[0].url == "https://example.com/tea"
    text = message.content[0].text
    assert text[ann[0].start_index : ann[0].end_index] == "([example.com](https://example.com/tea))"
    assert text == "Green tea is Chinese ([example.com](https://example.com/tea))."  # no raw marker
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == text  # the streamed text is rewritten the same way
    kinds = [e.type for e in events if e.type.startswith("response.web_search_call")]
    assert kinds[:3] == [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ]


def test_container_exec_is_an_mcp_call(stack):
    call = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["echo","hi"]}<|call|>'
    stack.script([("container.exec to=assistant", "<|channel|>final<|message|>ok<|return|>"), ("run", call)])
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="run", tools=[{"type": "mcp", "server_label": "container"}], stream=True
        )
    )
    resp = check_stream(events)
    item = resp.output[0]
    assert item.type == "mcp_call" and item.server_label == "container" and item.name == "exec"
    assert item.output == "hi\n" and item.status == "completed"
    assert "response.mcp_call_arguments.delta" in [e.type for e in events]


def test_bad_json_unknown_tool_and_tool_errors_reach_the_model_which_may_retry(stack):
    bad = "<|channel|>commentary to=container.exec <|constrain|>json<|message|>{not json<|call|>"
    unknown = "<|channel|>commentary to=nosuch.tool <|constrain|>json<|message|>{}<|call|>"
    failing = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["fail"]}<|call|>'
    stack.script(
        [
            ("command failed", "<|channel|>final<|message|>gave up<|return|>"),
            ("unknown tool", failing),
            ("not valid JSON", unknown),
            ("go", bad),
        ]
    )
    resp = stack.client.responses.create(
        model="gpt-oss", input="go", tools=[{"type": "mcp", "server_label": "container"}]
    )
    assert resp.status == "completed" and resp.output_text == "gave up"
    calls = [o for o in resp.output if o.type == "mcp_call"]
    assert [c.status for c in calls] == ["failed", "failed"]
    bad_args, failed = calls[0].error, calls[1].error  # structured McpToolCallError objects
    assert bad_args.type == "mcp_protocol_error" and "not valid JSON" in bad_args.message
    assert failed.type == "mcp_tool_execution_error" and "command failed" in failed.content[0]["text"]


def test_tool_server_down_gives_the_model_a_clear_error(make_stack):
    stack = make_stack(python_url="http://127.0.0.1:9/mcp")
    stack.script([("python to=assistant", "<|channel|>final<|message|>no tool<|return|>"), ("compute", PY_CALL)])
    resp = stack.client.responses.create(model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}])
    assert resp.status == "completed" and resp.output[0].status == "failed"
    assert "cannot connect" in resp.output[0].outputs[0].logs and resp.output_text == "no tool"


@contextlib.contextmanager
def _dropping_calls(upstream: str) -> Iterator[str]:
    """A TCP relay to `upstream` (http://host:port) that drops the connection as a `tools/call` passes, before
    any answer: the gateway replica relaying the call was killed. Discovery passes through."""
    target = urllib.parse.urlsplit(upstream)

    class Relay(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with socket.create_connection((target.hostname, target.port)) as up:
                threading.Thread(target=self.answers, args=(up,), daemon=True).start()
                while (data := self.request.recv(65536)) and b"tools/call" not in data:
                    up.sendall(data)

        def answers(self, up: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := up.recv(65536):
                    self.request.sendall(data)

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Relay) as relay:
        relay.daemon_threads = True
        threading.Thread(target=relay.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{relay.server_address[1]}"
        finally:
            relay.shutdown()


def test_a_tool_connection_that_dies_mid_call_is_a_tool_error_not_a_cancel(make_stack):
    with serve_asgi(python_server(ToolServerSettings()).build_app()) as direct, _dropping_calls(direct) as url:
        stack = make_stack(python_url=f"{url}/mcp")
        stack.script([("python to=assistant", "<|channel|>final<|message|>tool broke<|return|>"), ("compute", PY_CALL)])
        resp = stack.client.responses.create(model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}])
    assert resp.status == "completed" and resp.output_text == "tool broke"  # the model heard of it and answered
    call = resp.output[0]
    assert call.status == "failed" and "connection to the tool server" in call.outputs[0].logs


def test_max_tool_calls_stops_further_calls(stack):
    stack.script(
        [("limit of this response", "<|channel|>final<|message|>stopped<|return|>"), ("compute|python", PY_CALL)]
    )
    resp = stack.client.responses.create(
        model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}], max_tool_calls=2
    )
    assert resp.output_text == "stopped" and resp.status == "completed"
    calls = [o.status for o in resp.output if o.type == "code_interpreter_call"]
    assert calls == ["completed", "completed"]  # the third was written, but neither run nor listed


def test_a_model_that_keeps_calling_past_max_tool_calls_ends_incomplete(stack):
    """Ignored calls still count: past `max_tool_calls + 8` attempts the loop stops instead of spinning."""
    stack.script([("compute|python", PY_CALL)])  # SCRIPTED: the model calls python whatever it reads
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}], max_tool_calls=1, stream=True
        )
    )
    resp = check_stream(events)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_messages"
    assert [o.type for o in resp.output if o.type != "reasoning"] == ["code_interpreter_call"]
