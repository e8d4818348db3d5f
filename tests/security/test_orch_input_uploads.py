"""Issue 32, finding 17: a multipart upload cut off before its closing boundary is refused and leaves nothing.

Its file part may be any prefix of the file the client meant to send; storing it as complete would hand
code_interpreter a truncated file as if it were whole. It is a 400 naming `file`, with no file recorded and
no part file left on the volume.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.security.input_stack import Answer, Stack, chunks, orchestrator, send

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


PER_KEY = 3000
"""--max-file-bytes-per-key of the `bounded` orchestrator; its --max-file-bytes is 2000."""


@pytest.fixture(scope="module")
def bounded() -> Iterator[Stack]:
    with orchestrator(api_keys=["key-a", "key-b"], max_file_bytes=2000, max_file_bytes_per_key=PER_KEY) as started:
        yield started


def _upload(stack: Stack, key: str, size: int, chunked: bool = False) -> Answer:
    body = PURPOSE + FILE[: FILE.index(b"\r\n\r\n") + 4] + b"x" * size + b"\r\n--b--\r\n"
    headers = HEADERS | {"authorization": f"Bearer {key}"}
    return send(stack.port, "POST", "/v1/files", chunks(body, 700) if chunked else body, headers=headers)


def _client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=10)


@settings(max_examples=15, deadline=None)
@given(sizes=st.lists(st.integers(0, 2000), min_size=1, max_size=5), chunked=st.booleans())
def test_a_keys_uploads_together_stop_at_its_bound_and_not_at_another_keys(
    bounded: Stack, sizes: list[int], chunked: bool
):
    """Before the bound, one key could fill the files volume with uploads of --max-file-bytes each."""
    mine, theirs = _client(bounded, "key-a"), _client(bounded, "key-b")
    other = theirs.files.create(file=("b.txt", b"y" * 1500), purpose="user_data").id
    held = 0
    try:
        for size in sizes:
            answer = _upload(bounded, "key-a", size, chunked)
            if held + size <= PER_KEY:
                assert answer.status == 200, answer.body[:300]
                held += size
            else:
                assert answer.status == 413 and "--max-file-bytes-per-key" in answer.error["message"]
        assert sum(f.bytes for f in mine.files.list()) == held
        assert (
            len([p for p in bounded.files_dir.iterdir() if not p.name.startswith(".")])
            == len(list(mine.files.list())) + 1
        )
    finally:
        for client in (mine, theirs):
            for made in client.files.list():
                client.files.delete(made.id)
    assert other and list(bounded.files_dir.iterdir()) == []


def test_a_containers_files_count_in_its_keys_bound(bounded: Stack):
    """Uploads into a container went to the same volume past the key's bound (only /v1/files was counted)."""
    http = httpx.Client(base_url=f"{bounded.url}/v1", headers={"authorization": "Bearer key-a"}, timeout=10)
    container = http.post("/containers", json={"name": "bounded"}).json()["id"]
    try:

        def into_container(size: int) -> int:
            files = {"file": (f"c{size}.txt", b"c" * size)}  # one name each: a name taken is a 400
            return http.post(f"/containers/{container}/files", files=files).status_code

        assert into_container(2000) == 200
        assert _upload(bounded, "key-a", 1500).status == 413  # 2000 + 1500 is past 3000
        assert into_container(1500) == 413
        assert into_container(1000) == 200
        assert into_container(1) == 413  # at the bound: refused before a byte is read
    finally:
        assert http.delete(f"/containers/{container}").status_code == 200
    made = _upload(bounded, "key-a", 1500)
    assert made.status == 200
    _client(bounded, "key-a").files.delete(made.json()["id"])
