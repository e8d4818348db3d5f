"""`input_file` parts through the openai SDK: text, Markdown, HTML and PDF reach the model as their text (the
scripted stand-in worker shows the prompt it got); other types and oversized text are 400s naming the part."""

from __future__ import annotations

import base64

import openai
import pytest

ANSWER = "<|channel|>final<|message|>Read it.<|return|>"
HTML = (
    b"<html><head><style>p{}</style></head><body><script>alert(1)</script>"
    b"<h1>Tea</h1><p>Oolong is <b>half</b> oxidised.</p></body></html>"
)


def pdf(text: str) -> bytes:
    """A one-page PDF with `text` in Helvetica, its xref table written out."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (n, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def ask(stack, *parts: dict) -> openai.types.responses.Response:
    content = [{"type": "input_text", "text": "Summarise these."}, *parts]
    return stack.client.responses.create(model="gpt-oss", input=[{"role": "user", "content": content}])


def test_text_markdown_html_and_pdf_files_reach_the_model_as_their_text(stack):
    stack.script([("Summarise", ANSWER)])
    upload = stack.client.files.create(file=("notes.md", b"# Notes\n\n*green* tea"), purpose="user_data")
    resp = ask(
        stack,
        {"type": "input_file", "filename": "a.txt", "file_data": data_url("text/plain", "caf\u00e9 list".encode())},
        {"type": "input_file", "file_id": upload.id},
        {"type": "input_file", "filename": "page.html", "file_data": base64.b64encode(HTML).decode()},
        {
            "type": "input_file",
            "filename": "report.pdf",
            "file_data": data_url("application/pdf", pdf("Quarterly tea")),
        },
    )
    assert resp.output_text == "Read it."
    prompt = stack.model.encode_prompt_text(-1)
    assert "[file a.txt]\ncaf\u00e9 list" in prompt and "[file notes.md]\n# Notes\n\n*green* tea" in prompt
    assert "Oolong is" in prompt and "oxidised" in prompt and "alert(1)" not in prompt and "<b>" not in prompt
    assert "[file report.pdf]\nQuarterly tea" in prompt
    items = stack.client.responses.input_items.list(resp.id).data[0].content
    assert [p.type for p in items] == ["input_text"] * 5  # kept as the text the model read


@pytest.mark.parametrize(
    ("part", "param", "words"),
    [
        ({"filename": "x.png", "file_data": data_url("image/png", b"\x89PNG")}, "input[0].content[1]", "not text"),
        ({"file_url": "https://example.com/a.pdf"}, "input[0].content[1].file_url", "send file_data or a file_id"),
        ({"file_data": "%%% not base64"}, "input[0].content[1].file_data", "must be base64"),
        ({"file_id": "file-" + "0" * 32}, "input[0].content[1].file_id", "No such File"),
        (
            {"filename": "big.txt", "file_data": data_url("text/plain", b"x" * 101)},
            "input[0].content[1]",
            "more than 100 characters",
        ),
        (
            {"filename": "bad.pdf", "file_data": data_url("application/pdf", b"%PDF-1.4 junk")},
            "input[0].content[1]",
            "PDF",
        ),
    ],
)
def test_other_types_and_oversized_text_are_400s_naming_the_part(make_stack, part, param, words):
    stack = make_stack(max_input_file_chars=100)
    with pytest.raises(openai.APIStatusError) as refused:
        ask(stack, {"type": "input_file", **part})
    body = refused.value.body
    assert refused.value.status_code == (404 if "file_id" in part else 400)
    assert body["param"] == param and words in body["message"], body


def test_a_conversation_keeps_an_added_file_as_its_text_and_names_a_refused_one_by_its_item(stack):
    upload = stack.client.files.create(file=("notes.md", b"# Notes\n\n*white* tea"), purpose="user_data")
    conv = stack.client.conversations.create(
        items=[{"role": "user", "content": [{"type": "input_file", "file_id": upload.id}]}]
    )
    part = {"type": "input_file", "filename": "a.txt", "file_data": data_url("text/plain", b"jasmine")}
    stack.client.conversations.items.create(conv.id, items=[{"role": "user", "content": [part]}])
    texts = [p.text for i in stack.client.conversations.items.list(conv.id, order="asc").data for p in i.content]
    assert texts == ["[file notes.md]\n# Notes\n\n*white* tea", "[file a.txt]\njasmine"]
    stack.script([("And now", ANSWER)])
    resp = stack.client.responses.create(model="gpt-oss", input="And now?", conversation=conv.id)
    assert resp.output_text == "Read it." and "*white* tea" in stack.model.encode_prompt_text(-1)
    with pytest.raises(openai.BadRequestError) as refused:
        png = {"type": "input_file", "filename": "x.png", "file_data": data_url("image/png", b"\x89PNG")}
        stack.client.conversations.items.create(conv.id, items=[{"role": "user", "content": [png]}])
    assert refused.value.body["param"] == "items[0].content[0]", refused.value.body
