"""A conversation through the orchestrator with the real browser server (a subprocess) and a scripted model.

The model's choices are scripted (labelled so); the browser, its corpus, the fixture web and the
MCP traffic are real. Actions and citations must carry the pages' real URLs and titles.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.browser.web import browser_args, web_app, write_corpus
from tests.support.asgi import serve_asgi
from tests.support.service import running_service


def call(fn: str, args: dict) -> str:
    return f"<|channel|>analysis to=browser.{fn} <|constrain|>json<|message|>{json.dumps(args)}<|call|>"


@pytest.fixture(scope="module")
def real_browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))
    with serve_asgi(web_app()) as web:
        with running_service(browser_args(web, corpus, tmp_path_factory.mktemp("index"))) as svc:
            yield svc.url + "/mcp", web


def test_real_browser_pages_become_actions_sources_and_url_citations(make_stack, real_browser) -> None:
    browser_url, web = real_browser
    stack = make_stack(browser_url=browser_url)
    answer = "Oolong is partly oxidised 【0†L0-L1】, kettles 【1†L2】, a phrase 【3†L0】.<|return|>"
    stack.script(
        [  # first match wins: the latest page decides the next step
            ("Find results for text", "<|channel|>final<|message|>" + answer),
            ("\\[2\\] Tea facts \\(http", call("find", {"pattern": "quite particular"})),
            ("\\[1\\] Corpus tea guide \\(corpus", call("open", {"id": f"{web}/tea"})),
            ("Corpus tea guide†local", call("open", {"id": 0, "cursor": 0})),
            ("oolong", call("search", {"query": "partly oxidised oolong", "topn": 3})),
        ]
    )
    resp = stack.client.responses.create(
        model="gpt-oss",
        input="oolong?",
        tools=[{"type": "web_search_preview"}],
        include=["web_search_call.action.sources"],
    )
    calls = [o for o in resp.output if o.type == "web_search_call"]
    assert [c.status for c in calls] == ["completed"] * 4
    search, open_corpus, open_web, find = (c.action for c in calls)
    assert search.type == "search" and search.query == "partly oxidised oolong"
    assert [s.url for s in search.sources][:1] == ["corpus://local/guide/tea.html"]
    assert open_corpus.type == "open_page" and open_corpus.url == "corpus://local/guide/tea.html"
    assert open_web.type == "open_page" and open_web.url == f"{web}/tea"
    assert find.type == "find_in_page" and find.pattern == "quite particular" and find.url == f"{web}/tea"
    message = resp.output[-1].content[0]
    got = [(message.text[a.start_index : a.end_index], a.url, a.title) for a in message.annotations]
    corpus = "([local](corpus://local/guide/tea.html))"
    assert got == [
        (corpus, "corpus://local/guide/tea.html", "Corpus tea guide"),  # a search hit's lines: that hit
        (corpus, "corpus://local/guide/tea.html", "Corpus tea guide"),
        (f"([127.0.0.1]({web}/tea))", f"{web}/tea", "Tea facts"),  # a find page: the page it searched
    ]
    assert "【" not in message.text


def test_web_search_options_reach_the_browser_and_are_enforced(make_stack, real_browser) -> None:
    browser_url, web = real_browser
    stack = make_stack(browser_url=browser_url)
    stack.script(
        [
            ("<\\|start\\|>browser.open to=assistant", "<|channel|>final<|message|>done<|return|>"),
            ("tea", call("open", {"id": f"{web}/tea"})),
        ]
    )
    tool = {
        "type": "web_search",
        "external_web_access": False,
        "search_context_size": "low",
        "filters": {"allowed_domains": ["example.com"]},
        "user_location": {"type": "approximate", "country": "GB"},
    }
    resp = stack.client.responses.create(model="gpt-oss", input="tea?", tools=[tool])
    call_item = next(o for o in resp.output if o.type == "web_search_call")
    assert call_item.status == "failed"  # the browser refused: the domain is not allowed for this request
    assert "outside the domains this request allows (example.com)" in stack.model.encode_prompt_text(-1)


def test_web_search_options_become_the_browser_headers() -> None:
    from orchestrator.kinds.web_search import browser_headers

    tool = {
        "type": "web_search",
        "external_web_access": False,
        "search_context_size": "high",
        "filters": {"allowed_domains": ["a.org", "b.com"]},
        "user_location": {"type": "approximate", "city": "Oslo"},
    }
    assert browser_headers(tool, "tools[0]") == {
        "x-browser-allowed-domains": "a.org,b.com",
        "x-browser-external-access": "off",
        "x-browser-context-size": "high",
        "x-browser-user-location": '{"type":"approximate","city":"Oslo"}',
    }
    assert browser_headers({"type": "web_search_preview"}, "tools[0]") == {}


@pytest.mark.parametrize(
    ("tool", "param"),
    [
        ({"type": "web_search", "search_context_size": "huge"}, "tools[0].search_context_size"),
        ({"type": "web_search", "filters": {"allowed_domains": "a.org"}}, "tools[0].filters"),
        ({"type": "web_search", "user_location": "Oslo"}, "tools[0].user_location"),
    ],
)
def test_bad_web_search_options_are_400s(stack, tool: dict, param: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        stack.client.responses.create(model="gpt-oss", input="x", tools=[tool])
    assert err.value.body["param"] == param
