"""Issue 32, finding 17: a multipart upload cut off before its closing boundary is refused and leaves nothing.

Its file part may be any prefix of the file the client meant to send; storing it as complete would hand
code_interpreter a truncated file as if it were whole. It is a 400 naming `file`, with no file recorded and
no part file left on the volume.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.input_stack import Stack, chunks, orchestrator, send

HEADERS = {"content-type": "multipart/form-data; boundary=b"}
PURPOSE = b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
FILE = b'--b\r\nContent-Disposition: form-data; name="file"; filename="data.csv"\r\n\r\n' + b"1,2,3\n" * 1000


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with orchestrator() as started:
        yield started


def _volume(stack: Stack) -> list[str]:
    return sorted(p.name for p in stack.files_dir.iterdir())


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(b"", id="no-boundary-after-the-file"),
        pytest.param(b"\r\n", id="line-end-only"),
        pytest.param(b"\r\n--b", id="boundary-without-its-end"),
        pytest.param(b"\r\n--b\r\n", id="a-next-part-that-never-comes"),
    ],
)
@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_an_upload_without_its_closing_boundary_is_refused_and_keeps_nothing(stack: Stack, cut: bytes, chunked: bool):
    body = PURPOSE + FILE + cut
    answer = send(stack.port, "POST", "/v1/files", chunks(body, 1000) if chunked else body, headers=HEADERS)
    assert answer.status == 400 and answer.error["param"] == "file", answer.body[:300]
    assert "closing boundary" in answer.error["message"]
    assert list(stack.client.files.list()) == [] and _volume(stack) == []


def test_the_same_upload_with_its_closing_boundary_is_stored(stack: Stack):
    answer = send(stack.port, "POST", "/v1/files", PURPOSE + FILE + b"\r\n--b--\r\n", headers=HEADERS)
    assert answer.status == 200 and answer.json()["bytes"] == len(b"1,2,3\n" * 1000)
    assert stack.client.files.content(answer.json()["id"]).content == b"1,2,3\n" * 1000
    stack.client.files.delete(answer.json()["id"])
