"""`toolfleet browser index DIR` (progress, summary, updates) and the x-browser-* request options, enforced."""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import pytest

from tests.browser.web import browser_args
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service
from toolkit import cli
from tools.browser.server import options_from_headers


def index(directory: Path, index_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`toolfleet browser index DIR` through the CLI's own entry point."""
    code = cli.main(["browser", "index", str(directory), "--index-dir", str(index_dir)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_index_builds_then_updates_only_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus, idx = tmp_path / "corpus", tmp_path / "index"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.md").write_text(f"# Doc {i}\n\nbody {i}\n")
    code, out, err = index(corpus, idx, capsys)
    assert code == 0, err
    assert "indexed 3 documents (3 new, 0 changed), 0 removed, 0 unchanged" in out
    assert "3/3 documents" in err  # the progress bar
    (corpus / "doc0.md").write_text("# Doc 0\n\nnew body\n")
    os.utime(corpus / "doc0.md", ns=(1, 1))
    (corpus / "doc2.md").unlink()
    _, out, _ = index(corpus, idx, capsys)
    assert "indexed 1 documents (0 new, 1 changed), 1 removed, 1 unchanged" in out, out


def test_index_of_a_missing_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = index(tmp_path / "nope", tmp_path / "index", capsys)
    assert code == 2 and "is not a directory" in err


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"x-browser-external-access": "maybe"}, "must be on or off"),
        ({"x-browser-context-size": "huge"}, "low, medium or high"),
        ({"x-browser-user-location": "{not json"}, "JSON object"),
        ({"x-browser-user-location": "[1]"}, "JSON object"),
    ],
)
def test_bad_option_headers_are_refused_with_the_header_named(headers: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        options_from_headers(headers)


def test_option_headers_parse() -> None:
    opt = options_from_headers(
        {
            "x-browser-allowed-domains": "www.Example.com, other.org,",
            "x-browser-external-access": "off",
            "x-browser-context-size": "low",
            "x-browser-user-location": json.dumps({"type": "approximate", "country": "GB"}),
        }
    )
    assert opt.allowed_domains == ("example.com", "other.org") and opt.external is False
    assert opt.context_size == "low" and opt.user_location["country"] == "GB"


def headers(**extra: str) -> dict[str, str]:
    return {"x-session-id": uuid.uuid4().hex, **extra}


async def test_external_access_off_keeps_the_session_on_the_corpus(browser: Service, web: str) -> None:
    async with mcp_session(browser.url, "streamable-http", headers(**{"x-browser-external-access": "off"})) as s:
        refused = await s.call_tool("open", {"id": f"{web}/tea"})
        assert refused.is_error and "web access is off" in refused.content[0].text
        found = await s.call_tool("search", {"query": "kettle"})
        assert found.structured_content["hits"][0]["url"].startswith("corpus://local/")
        opened = await s.call_tool("open", {"id": 0})
        assert not opened.is_error and opened.structured_content["title"] == "Kettle notes"


async def test_allowed_domains_refuse_other_sites_and_filter_search(browser: Service, web: str) -> None:
    async with mcp_session(browser.url, "sse", headers(**{"x-browser-allowed-domains": "example.com"})) as s:
        refused = await s.call_tool("open", {"id": f"{web}/tea"})
        assert refused.is_error and "outside the domains this request allows (example.com)" in refused.content[0].text
        found = await s.call_tool("search", {"query": "kettle"})
        assert found.structured_content["hits"] == []  # corpus://local is not example.com


async def test_context_size_sets_the_view_size(browser: Service, web: str) -> None:
    sizes = {}
    for size in ("low", "medium", "high"):
        async with mcp_session(browser.url, "streamable-http", headers(**{"x-browser-context-size": size})) as s:
            sizes[size] = (await s.call_tool("open", {"id": f"{web}/tea"})).structured_content["lines"][1]
    assert sizes["low"] < sizes["medium"] < sizes["high"]


PYDOC = Path("/usr/share/doc/python3-doc/html")
PYDOC_PAGES = [
    "index.html",
    "library/index.html",
    "library/itertools.html",
    "library/functools.html",
    "library/functions.html",
    "tutorial/index.html",
    "_sources/library/itertools.rst.txt",
]


async def test_the_python_documentation_is_searched_and_browsed_offline(tmp_path: Path, web: str) -> None:
    """Debian's python3-doc HTML (deploy/setup-host.sh installs it): a few real pages, their links kept."""
    if not (PYDOC / "library" / "itertools.html").is_file():
        pytest.skip("needs Debian's python3-doc")
    corpus = tmp_path / "pydoc"
    for rel in PYDOC_PAGES:
        (corpus / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus / rel).symlink_to(PYDOC / rel)
    args = browser_args(web, corpus, tmp_path / "index", "--corpus-base-url", "https://docs.python.org/3.11/")
    with running_service(args) as svc:
        async with mcp_session(svc.url, "streamable-http", headers(**{"x-browser-external-access": "off"})) as s:
            found = (await s.call_tool("search", {"query": "itertools groupby"})).structured_content
            assert found["hits"][0]["url"] == "https://docs.python.org/3.11/library/itertools.html"
            assert all("_sources" not in h["url"] for h in found["hits"])  # Sphinx's _ folders are skipped
            page = await s.call_tool("open", {"id": 0})
            assert page.structured_content["title"].startswith("itertools")
            cursor = page.structured_content["cursor"]
            text = ""
            while "functools" not in text:  # scroll until the page's link to the functools module shows
                view = await s.call_tool("open", {"cursor": cursor})
                assert not view.is_error, view.content[0].text
                text, cursor = view.content[0].text, view.structured_content["cursor"]
            link = int(re.search(r"【(\d+)†[^】]*functools[^】]*】", text).group(1))
            followed = (await s.call_tool("open", {"id": link})).structured_content
            assert followed["url"].startswith("https://docs.python.org/3.11/library/functools.html")


def test_the_allowlist_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.browser.settings import BrowserSettings

    monkeypatch.setenv("TOOLFLEET_BROWSER_SSRF_EXEMPT_HOSTS", "127.0.0.1:8080, Intranet.example")
    assert BrowserSettings.from_args([], prog="t").ssrf_exempt_hosts == ["127.0.0.1:8080", "intranet.example"]
    assert BrowserSettings.from_args(["--ssrf-exempt-hosts", "a:1,b"], prog="t").ssrf_exempt_hosts == ["a:1", "b"]


def test_the_default_corpus_is_debians_python_documentation() -> None:
    from tools.browser.settings import BrowserSettings

    assert BrowserSettings.from_args([], prog="t").default_corpus_dir == PYDOC


async def test_with_no_corpus_dir_the_default_corpus_is_indexed_and_logged(tmp_path: Path, corpus_dir: Path) -> None:
    """A browser started with no `--corpus-dir` searches the default corpus (here the test corpus stands in)."""
    args = ["-m", "tools.browser", "--index-dir", str(tmp_path / "index"), "--default-corpus-dir", str(corpus_dir)]
    with running_service(args) as svc:
        async with mcp_session(svc.url, "streamable-http", headers(**{"x-browser-external-access": "off"})) as s:
            found = (await s.call_tool("search", {"query": "kettle"})).structured_content
        log = svc.log_path.read_text()
    assert found["hits"][0]["url"].startswith("corpus://local/")
    events = {e["event"]: e for e in map(json.loads, log.splitlines()) if "event" in e}
    assert events["corpus.default"]["corpus_dir"] == str(corpus_dir)
    assert events["index.updated"]["corpus_dir"] == str(corpus_dir)
    assert re.match(r"indexed [1-9]\d* documents \([1-9]\d* new", events["index.updated"]["summary"])
    with running_service(args) as svc:  # started again: the default's own index is kept up to date, not frozen
        async with mcp_session(svc.url, "streamable-http", headers(**{"x-browser-external-access": "off"})) as s:
            opened = await s.call_tool("open", {"id": found["hits"][0]["url"]})
        assert '"corpus.default"' in svc.log_path.read_text()
    assert not opened.is_error, opened.content[0].text


async def test_an_index_built_before_is_served_as_it_is_not_updated_from_the_default_corpus(
    tmp_path: Path, corpus_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "note.md").write_text("# Samovar\n\nA samovar keeps the water hot.\n")
    assert index(own, tmp_path / "index", capsys)[0] == 0
    args = ["-m", "tools.browser", "--index-dir", str(tmp_path / "index"), "--default-corpus-dir", str(corpus_dir)]
    with running_service(args) as svc:
        async with mcp_session(svc.url, "streamable-http", headers(**{"x-browser-external-access": "off"})) as s:
            mine = (await s.call_tool("search", {"query": "samovar"})).structured_content["hits"]
            default = (await s.call_tool("search", {"query": "kettle"})).structured_content["hits"]
        log = svc.log_path.read_text()
    assert [h["title"] for h in mine] == ["Samovar"] and default == []
    assert '"corpus.index_only"' in log and '"corpus.default"' not in log


async def test_with_no_corpus_at_all_start_up_and_every_empty_search_say_how_to_add_one(tmp_path: Path) -> None:
    args = ["-m", "tools.browser", "--index-dir", str(tmp_path / "index"), "--default-corpus-dir", str(tmp_path / "no")]
    with running_service(args) as svc:
        async with mcp_session(svc.url, "streamable-http", headers()) as s:
            texts = [(await s.call_tool("search", {"query": q})).content[0].text for q in ("kettle", "tea")]
        log = svc.log_path.read_text()
    events = {e["event"]: e for e in map(json.loads, log.splitlines()) if "event" in e}
    assert events["corpus.none"]["level"] == "warning" and "--corpus-dir DIR" in events["corpus.none"]["hint"]
    for text in texts:
        assert "No results for" in text and "No corpus is configured" in text and "--corpus-dir DIR" in text
