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


def _messages_of_every_shape() -> list:
    """Text messages with each header part set or not, texts that look like Harmony, and the two
    contents the library renders on its own (system, developer)."""
    named = h.Message.from_author_and_content(h.Author.new(h.Role.USER, "alice"), "hi")
    two_texts = h.user("first").adding_content(" and second")
    return [
        h.user("q"),
        h.user(""),
        h.user("<|start|>assistant<|channel|>final<|message|>not a header<|end|>"),
        h.user("naïve café 日本語 🙂 \n\t  spaced  "),
        named,
        two_texts,
        h.assistant("think", "analysis"),
        h.assistant("preamble", "commentary"),
        h.assistant("answer", "final"),
        h.assistant("print(1)", "analysis", "python"),
        h.assistant('{"query": "x"}', "commentary", "browser.search", "<|constrain|>json"),
        h.assistant("{}", "commentary", "functions.f", "json"),
        h.assistant("to all", "final", "all"),
        h.tool_result("python", "1\n"),
        h.tool_result("browser.search", "【0†x】 " * 50, "analysis"),
        h.tool_result("functions.f", "out", None),
        h.system_message(effort="high", date="2026-12-02", namespaces=[h.Namespace("python", "py")]),
        h.developer_message("Be brief.", [{"name": "f", "description": "d", "parameters": {"type": "object"}}]),
    ]


def test_each_message_renders_as_the_library_renders_it():
    enc = h.encoding()
    for msg in _messages_of_every_shape():
        assert h.render_message(msg) == enc.render(msg), msg


def _tool_loop() -> list:
    return [
        h.system_message(effort="low", date="2026-12-02", namespaces=[h.Namespace("browser", "web")]),
        h.developer_message("Cite sources.", []),
        h.user("look it up"),
        h.assistant("I should search.", "analysis"),
        h.assistant('{"query": "harmony"}', "analysis", "browser.search", "<|constrain|>json"),
        h.tool_result("browser.search", "L0: Harmony is a format\nL1: <|end|> is a token", "analysis"),
        h.assistant("Opening the first hit.", "commentary"),
        h.assistant('{"cursor": 0}', "commentary", "browser.open", "json"),
        h.tool_result("browser.open", "page 🙂 " * 200),
        h.assistant("It is a format 【0†L0】.", "final"),
        h.user("and again?"),
        h.assistant("Search again.", "analysis"),
        h.assistant('{"query": "again"}', "analysis", "browser.search"),
        h.tool_result("browser.search", "nothing new", "analysis"),
    ]


def test_incremental_render_equals_full_render_within_a_response():
    history = _tool_loop()[:11]  # ends with a final answer and the next question
    for conversation in (_conversation(), _tool_loop()[:9], [h.user("q"), *_tool_loop()[3:9]]):
        renderer = h.Renderer()
        for n in range(2, len(conversation) + 1):
            assert renderer.render(conversation[:n]) == h.render(conversation[:n]), n
    assert h.Renderer().render(history) == h.render(history)


def test_after_a_final_answer_new_messages_extend_the_prompt_that_dropped_the_old_analysis():
    """The prompt a response sends on each turn extends its first prompt (the worker's prefix cache hits).
    The library's full render would differ here: it drops analysis only while the last assistant message
    is a final answer, so a call after one brings the older analysis back into the prompt."""
    conversation, start = _tool_loop(), 11
    renderer = h.Renderer()
    first = renderer.render(conversation[:start])
    head = first[: -len(h.render([])) or None]
    for n in range(start + 1, len(conversation) + 1):
        appended = [t for m in conversation[start:n] for t in h.encoding().render(m)]
        assert renderer.render(conversation[:n]) == head + appended + h.render([])
    assert h.render(conversation) != renderer.render(conversation)  # the library's rule, for the record


def _library_reading(tokens: list[int], finish: bool) -> list:
    """What the library's own StreamableParser reports for each token (the oracle `TurnParser` must match)."""
    parser = h.StreamableParser(h.encoding(), h.Role.ASSISTANT, strict=False)
    out, done, in_content, broken = [], 0, False, False
    for token in tokens:
        try:
            if broken:
                raise h.HarmonyError("broken")
            parser.process(token)
        except h.HarmonyError:
            broken = True
            out.append((None, "", None))
            continue
        header, msg = None, None
        if token == h.MESSAGE:
            in_content = True
            header = (parser.current_channel, parser.current_recipient, parser.current_content_type)
        elif token in h.MESSAGE_END_TOKENS:
            in_content = False
            if len(parser.messages) > done:
                done, msg = len(parser.messages), parser.messages[-1]
        delta = (parser.last_content_delta or "") if in_content and token != h.MESSAGE else ""
        out.append((header, delta, msg))
    if finish and not broken and in_content:
        parser.process_eos()
        out.append(parser.messages[-1] if len(parser.messages) > done else None)
    elif finish:
        out.append(None)
    return out


def _fast_reading(tokens: list[int], finish: bool) -> list:
    parser, out = h.TurnParser(), []
    for token in tokens:
        header, delta, msg = parser.feed(token)
        out.append(((header.channel, header.recipient, header.content_type) if header else None, delta, msg))
    return [*out, parser.finish()] if finish else out


def test_parser_reads_every_turn_as_the_library_does():
    """The fast path (and its hand-over to the library mid-turn) reports exactly what the library's parser
    reports, token by token: well-formed turns, characters split across tokens, constrained calls, text cut
    short, and random tokens."""
    import random

    enc = h.encoding()
    texts = [
        "<|channel|>analysis<|message|>think first<|end|><|start|>assistant<|channel|>final<|message|>done<|return|>",
        "<|channel|>analysis to=python<|message|>print(6*7)<|call|>",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>',
        "<|channel|>final<|message|>naïve café 日本語 🙂 emoji split<|return|>",
        "<|channel|>analysis<|message|>ok<|end|><|start|>assistant to=functions.g<|channel|>commentary<|message|>{}",
        "<|channel|>final<|message|>cut sh",
        "<|channel|><|message|>empty channel<|end|>",
        "<|channel|>final<|message|>a<|end|>stray text<|start|>assistant<|channel|>final<|message|>b<|return|>",
        "<|channel|>final<|message|>a<|start|>b<|channel|>c<|return|>",
    ]
    cases = [enc.encode(t, allowed_special="all") for t in texts]
    rng = random.Random(38)
    pool = [h.START, h.MESSAGE, h.END, h.CALL, h.RETURN, 200005, 200003, 1598, 35644, 316, 28, 29010, 9, 22, 8]
    cases += [[rng.choice(pool) for _ in range(rng.randint(1, 30))] for _ in range(300)]
    cases += [case[:cut] for case in cases[:9] for cut in range(1, len(case))]
    for tokens in cases:
        for finish in (False, True):
            assert _fast_reading(tokens, finish) == _library_reading(tokens, finish), enc.decode(tokens)


def test_kept_renderings_of_system_and_developer_messages_follow_every_field():
    """A system or developer message is rendered once and kept by its JSON: each field change is a new render."""
    py = [h.Namespace("python", "py")]
    variants = [
        h.system_message(effort="low", date="2026-12-02", namespaces=[]),
        h.system_message(effort="high", date="2026-12-02", namespaces=[]),
        h.system_message(effort="low", date="2026-12-03", namespaces=[]),
        h.system_message(effort="low", date="2026-12-02", namespaces=py),
        h.system_message(effort="low", date="2026-12-02", namespaces=py, identity="You are a test."),
        h.developer_message("be brief", []),
        h.developer_message("be brief", [{"name": "f", "description": "d", "parameters": {"type": "object"}}]),
    ]
    for _ in range(2):  # the second time from what was kept
        rendered = [h.render_message(m) for m in variants]
        assert rendered == [h.encoding().render(m) for m in variants]
    assert len({tuple(r) for r in rendered}) == len(variants)


def test_the_special_token_ids_read_here_are_the_librarys() -> None:
    """The fast path of `TurnParser` and the worker's stop tokens name Harmony's special tokens by id: a wrong id
    would not break a turn (the library takes it over) but would silently cost every turn its fast path."""
    named = {
        "<|start|>": h.START,
        "<|message|>": h.MESSAGE,
        "<|end|>": h.END,
        "<|call|>": h.CALL,
        "<|return|>": h.RETURN,
        "<|channel|>": h._CHANNEL,
        "<|constrain|>": h._CONSTRAIN,
        "<|endoftext|>": h.END_OF_TEXT,
    }
    enc = h.encoding()
    assert {text: enc.encode(text, allowed_special="all") for text in named} == {t: [i] for t, i in named.items()}
