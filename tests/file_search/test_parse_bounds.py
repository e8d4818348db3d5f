"""A file's parsed text is bounded (`--max-text-chars`): a PDF of 17 KB whose pages share one compressed
content stream unpacked to 100 million characters (84 s of parsing, then every chunk embedded) before any bound
was checked; now its reading stops once past the bound, refused with the flag's name."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from tools.file_search.parse import UnparsableFile, extract_text

LINE = b"(" + b"A" * 1000 + b") Tj T* "


def shared_stream_pdf(pages: int, lines: int) -> bytes:
    """`pages` pages that all show the one Flate-compressed stream of `lines` lines of 1000 characters."""
    writer = PdfWriter()
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1")})
    font[NameObject("/BaseFont")] = NameObject("/Helvetica")
    resources = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})})
    stream = DecodedStreamObject()
    stream.set_data(b"BT /F1 12 Tf 14 TL 72 700 Td " + LINE * lines + b"ET")
    contents = writer._add_object(stream.flate_encode())
    for _ in range(pages):
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")], page[NameObject("/Contents")] = resources, contents
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdf_unpacking_past_the_bound_is_refused_without_reading_it_all() -> None:
    bomb = shared_stream_pdf(pages=500, lines=400)  # 200 million characters in some 60 kilobytes
    assert len(bomb) < 100_000
    with pytest.raises(UnparsableFile, match="--max-text-chars"):
        extract_text("report.pdf", bomb, max_chars=250_000)
    assert len(extract_text("report.pdf", shared_stream_pdf(pages=2, lines=100), max_chars=250_000)) > 200_000


@given(chars=st.integers(1, 3000), bound=st.integers(1, 3000), suffix=st.sampled_from([".txt", ".md", ".html"]))
def test_text_of_any_kind_is_refused_exactly_past_the_bound(chars: int, bound: int, suffix: str) -> None:
    text = "word " * (chars // 5) + "x" * (chars % 5)
    if chars > bound:
        with pytest.raises(UnparsableFile, match="--max-text-chars"):
            extract_text("notes" + suffix, text.encode(), max_chars=bound)
    else:
        assert extract_text("notes" + suffix, text.encode(), max_chars=bound).strip() == text.strip()
