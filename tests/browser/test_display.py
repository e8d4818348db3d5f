"""The display format gpt-oss was trained on, pinned: header, line numbers, wrapping, link markers, find."""

from __future__ import annotations

import random

from toolkit.vocab import o200k
from tools.browser.backends import Hit
from tools.browser.core import find_page, search_page
from tools.browser.extract import html_document, text_document
from tools.browser.page import View, count_tokens, find_lines, wrap

HTML = """<html><head><title>Tea 【facts】</title><script>var x = "hidden";</script></head><body>
<h2>Kinds</h2><p>Green tea is from <a href="/china">China † Asia</a>; see <a href="https://www.other.org/x">other</a>.
<img src="a.png" alt="a cup"></p><ul><li>black</li><li>white</li></ul>
<p><a href="mailto:me@example.com">mail me</a></p></body></html>"""


def test_a_page_renders_header_range_and_numbered_lines_with_link_markers() -> None:
    doc = html_document(HTML, "https://example.com/tea")
    assert View(doc, 0, len(doc.lines) - 1).render(3) == (
        "[3] Tea 〖facts〗 (https://example.com/tea)\n"
        "**viewing lines [0 - 7] of 7**\n"
        "\n"
        "L0: ## Kinds\n"
        "L1: \n"
        "L2: Green tea is from 【0†China ‡ Asia】; see 【1†other†other.org】. [Image 1: a cup]\n"
        "L3: \n"
        "L4: * black\n"
        "L5: * white\n"
        "L6: \n"
        "L7: mail me"
    )
    assert doc.links[0].url == "https://example.com/china"
    assert doc.links[1].url == "https://www.other.org/x"
    assert len(doc.links) == 2  # mailto: is text, not a link


def test_lines_are_wrapped_at_80_columns_and_structure_names_the_range() -> None:
    doc = text_document(" ".join(["tea"] * 100), "https://example.com/t.txt")
    assert all(len(line) <= 80 for line in doc.lines) and len(doc.lines) == 5
    view = View(doc, 1, 2)
    assert view.structured(7) == {
        "cursor": 7,
        "url": "https://example.com/t.txt",
        "title": "tea tea tea tea tea tea tea tea tea tea tea tea tea tea tea tea tea tea tea tea",
        "lines": [1, 2],
        "total_lines": 5,
    }


def test_a_word_longer_than_a_line_is_cut_and_its_rest_starts_the_next_line() -> None:
    x80 = "x" * 80
    assert wrap(f"a {x80}{x80} b  c") == ["a", x80, x80, "b c"]
    assert wrap(f"{x80}{x80}yy zz\tand  " + "w " * 40) == [x80, x80, "yy zz and " + "w " * 34 + "w", "w " * 4 + "w"]
    assert wrap("  short  line  ") == ["short  line"]  # a line that fits keeps its inner spaces


def test_a_view_is_about_1024_tokens_and_num_lines_is_capped() -> None:
    doc = text_document("\n\n".join(f"paragraph {i} " + "lorem ipsum dolor sit amet " * 8 for i in range(500)), None)
    end = doc.view_end(0, num_lines=None, max_tokens=1024, max_lines=10_000)
    shown = sum(count_tokens(doc.lines[i]) + 3 for i in range(end + 1))
    assert 900 < shown <= 1024
    assert doc.view_end(0, num_lines=100_000, max_tokens=1024, max_lines=200) == 199
    assert doc.view_end(10, num_lines=5, max_tokens=1024, max_lines=200) == 14


def test_a_line_counted_word_by_word_has_the_tokens_the_tokenizer_counts_in_it_whole() -> None:
    # every class o200k's pre-tokenizer tells apart: cases, titlecase, modifiers, marks, CJK, digits of
    # several scripts, contractions, punctuation, slashes, brackets of links, emoji
    chars = "aZǅʰ\u0301日テ0٣²'\u2019s.,;:/\\-_()【】†‡🍵é"
    rng = random.Random(21)
    words = ["".join(rng.choices(chars, k=rng.randint(1, 12))) for _ in range(3000)]
    lines = [" ".join(rng.choices(words, k=rng.randint(1, 14))) for _ in range(3000)]
    lines += ["it 's don't WE'LL", "12345 6789 3.14", "a / b // c", "", "x", "  lead", "trail ", "a  b", "a\tb", "a\nb"]
    enc = o200k()
    assert [count_tokens(line) for line in lines] == [len(enc.encode_ordinary(line)) for line in lines]


def test_find_matches_a_phrase_the_wrap_split_and_is_case_insensitive() -> None:
    doc = text_document(" ".join(f"w{i}" for i in range(200)), "https://example.com/w")
    last_word_of_line0 = doc.lines[0].split()[-1]
    first_word_of_line1 = doc.lines[1].split()[0]
    assert find_lines(doc, f"{last_word_of_line0.upper()}   {first_word_of_line1}") == [(0, 1)]
    assert find_lines(doc, "w150") == [(next(i for i, line in enumerate(doc.lines) if "w150" in line.split()),) * 2]
    assert find_lines(doc, "no such words") == []


def test_a_find_page_links_each_match_to_its_line_and_cites_the_source() -> None:
    doc = text_document("alpha beta\n\ngamma alpha", "https://example.com/a")
    page = find_page("alpha", doc, find_lines(doc, "alpha"))
    assert page.title == "Find results for text: `alpha` in `alpha beta`"
    assert page.lines == ["【0†match at L0】", "alpha beta", "", "【1†match at L2】", "gamma alpha"]
    assert page.links[1].loc == 2
    assert View(page, 0, 4).structured(2)["url"] == "https://example.com/a"


def test_search_results_are_a_page_titled_by_the_query_with_hit_line_ranges() -> None:
    hits = [Hit("https://a.org/1", "First † hit", "snippet one"), Hit("https://b.org/2", "Second", "")]
    page = search_page("green tea", hits)
    assert View(page, 0, len(page.lines) - 1).render(0) == (
        "[0] green tea\n**viewing lines [0 - 3] of 3**\n\n"
        "L0: * 【0†First ‡ hit†a.org】\nL1: snippet one\nL2: \nL3: * 【1†Second†b.org】"
    )
    assert [h["lines"] for h in page.hits] == [[0, 1], [3, 3]]
    assert View(page, 0, 3).structured(0)["hits"][0]["url"] == "https://a.org/1"


def test_an_instructions_file_replaces_the_browser_description(tmp_path) -> None:
    from tools.browser.__main__ import build_browser
    from tools.browser.server import build_server
    from tools.browser.settings import BrowserSettings

    (tmp_path / "desc.txt").write_text("Browse with care.")
    settings = BrowserSettings(instructions_file=tmp_path / "desc.txt", index_dir=tmp_path / "index")
    assert build_server(settings, build_browser(settings)).mcp.instructions == "Browse with care."
