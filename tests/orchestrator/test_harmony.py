"""Rendering and parsing units: the incremental renderer matches a full render; bad tokens stay contained."""

from __future__ import annotations

from orchestrator import harmony as h


def _conversation() -> list:
    return [
        h.system_message(effort="low", date="2026-12-02", namespaces=[h.Namespace("python", "py")]),
        h.user("q1"),
        h.assistant("think", "analysis"),
        h.assistant("print(1)", "analysis", "python"),
        h.tool_result("python", "1", "analysis"),
        h.assistant("{}", "commentary", "functions.f", "<|constrain|>json"),
        h.tool_result("functions.f", "out"),
    ]


def test_incremental_render_equals_full_render_turn_after_turn():
    msgs, renderer = _conversation(), h.Renderer()
    for n in range(2, len(msgs) + 1):
        assert renderer.render(msgs[:n]) == h.render(msgs[:n])
    msgs.append(h.assistant("answer", "final"))
    msgs.append(h.user("q2"))
    assert renderer.render(msgs) == h.render(msgs)  # a final answer drops earlier analysis: full render


def test_parser_reports_headers_deltas_and_messages_and_survives_garbage():
    enc = h.encoding()
    toks = enc.encode("<|channel|>final<|message|>Hi there<|return|>", allowed_special="all")
    parser, headers, text, done = h.TurnParser(), [], "", []
    for t in toks:
        header, delta, msg = parser.feed(t)
        headers += [header] if header else []
        text += delta
        done += [msg] if msg else []
    assert headers[0].channel == "final" and text == "Hi there" and h.text_of(done[0]) == "Hi there"
    garbage = h.TurnParser()
    for t in [h.MESSAGE, h.CALL, 5, h.START, h.START, 7, 200001, 100, h.RETURN] * 3:
        garbage.feed(t)
    garbage.finish()  # never raises
