"""`/v1/files` through the openai SDK: upload, list, retrieve, content, delete; owners, limits, expiry."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from dataclasses import asdict
from pathlib import Path

import httpx
import openai
import pytest

from orchestrator.files import FileRecord, Files
from orchestrator.persist.redis import RedisStores
from orchestrator.persist.sqlite import SQLiteStores


def leftovers(stack) -> list[str]:
    return sorted(os.listdir(stack.app.state.files.directory))


def test_upload_list_retrieve_content_delete(make_stack) -> None:
    stack = make_stack()
    data = b"city,temp\n" + b"".join(f"c{i},{i % 40}\n".encode() for i in range(50_000))
    made = stack.client.files.create(
        file=("temps.csv", data, "text/csv"),
        purpose="user_data",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert (made.filename, made.bytes, made.purpose, made.object) == ("temps.csv", len(data), "user_data", "file")
    assert made.expires_at == made.created_at + 3600
    other = stack.client.files.create(file=("b.txt", b"two"), purpose="assistants")
    assert stack.client.files.retrieve(made.id) == made
    content = stack.client.files.content(made.id)
    assert hashlib.sha256(content.read()).digest() == hashlib.sha256(data).digest()
    assert "temps.csv" in content.response.headers["content-disposition"]
    assert [f.id for f in stack.client.files.list(limit=1)] == [other.id, made.id]  # pages through both
    assert [f.id for f in stack.client.files.list(purpose="user_data", order="asc")] == [made.id]
    assert stack.client.files.delete(made.id).deleted
    with pytest.raises(openai.NotFoundError, match="No such File object"):
        stack.client.files.retrieve(made.id)
    assert leftovers(stack) == [other.id]
    os.unlink(stack.app.state.files.path(other.id))  # a replica that does not share the files volume
    with pytest.raises(openai.InternalServerError, match="not on this replica's files volume"):
        stack.client.with_options(max_retries=0).files.content(other.id)


def test_another_keys_file_is_missing(make_stack) -> None:
    stack = make_stack(api_keys=["key-a", "key-b"])
    a = stack.client.with_options(api_key="key-a")
    b = stack.client.with_options(api_key="key-b")
    made = a.files.create(file=("a.csv", b"x,y\n1,2\n"), purpose="user_data")
    for call in (b.files.retrieve, b.files.content, b.files.delete):
        with pytest.raises(openai.NotFoundError) as refused:
            call(made.id)
        assert refused.value.body == {
            "message": f"No such File object: {made.id}",
            "type": "invalid_request_error",
            "param": "file_id",
            "code": "not_found",
        }
    assert list(b.files.list()) == []
    assert a.files.retrieve(made.id).id == made.id  # untouched by b's delete


@pytest.mark.parametrize(
    ("name", "purpose", "status", "says"),
    [
        ("big.bin", "user_data", 413, "larger than this server's limit of 1000 bytes"),
        ("..", "user_data", 400, "invalid file name '..'"),
        ("a/b.csv", "user_data", 400, "invalid file name"),
        ("ok.csv", "batch", 400, "purpose must be one of"),
    ],
)
def test_bad_uploads_leave_nothing(make_stack, name: str, purpose: str, status: int, says: str) -> None:
    stack = make_stack(max_file_bytes=1000)
    size = 5000 if status == 413 else 10
    with pytest.raises(openai.APIStatusError) as refused:
        stack.client.files.create(file=(name, b"z" * size), purpose=purpose)
    assert refused.value.status_code == status and says in refused.value.message
    assert leftovers(stack) == [] and list(stack.client.files.list()) == []


def test_limit_holds_without_a_content_length(make_stack) -> None:
    """A chunked body declares no size: the limit is counted as the file part streams in."""
    stack = make_stack(max_file_bytes=100_000)
    boundary = "b0undary"

    def body():
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'.encode()
        yield f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'.encode()
        for _ in range(50):
            yield b"y" * 10_000
        yield f"\r\n--{boundary}--\r\n".encode()

    answer = httpx.post(
        f"{stack.url}/v1/files",
        content=body(),
        timeout=30,
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert answer.status_code == 413 and answer.json()["error"]["param"] == "file"
    assert leftovers(stack) == []
    assert stack.client.files.create(file=("fine", b"ok"), purpose="user_data").bytes == 2  # still serving


def test_malformed_bodies(make_stack) -> None:
    stack = make_stack()
    cases = {
        "not multipart": ({"content-type": "application/json"}, b"{}"),
        "no file": (
            {"content-type": "multipart/form-data; boundary=q"},
            b'--q\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--q--\r\n',
        ),
        "unknown field": (
            {"content-type": "multipart/form-data; boundary=q"},
            b'--q\r\nContent-Disposition: form-data; name="colour"\r\n\r\nred\r\n--q--\r\n',
        ),
        "garbage after the boundary": (
            {"content-type": "multipart/form-data; boundary=q"},
            b"--q\r\n\xc2\x9e_\xf3\xbe--q",
        ),
        "a field name that is not text": (
            {"content-type": "multipart/form-data; boundary=q"},
            b'--q\r\nContent-Disposition: form-data; name="\xff\xfe"\r\n\r\nx\r\n--q--\r\n',
        ),
    }
    for why, (headers, content) in cases.items():
        answer = httpx.post(f"{stack.url}/v1/files", headers=headers, content=content)
        assert answer.status_code == 400, why
        assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
    assert leftovers(stack) == []


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_expired_files_are_gone_with_their_bytes(kind: str, request, tmp_path: Path) -> None:
    """The prune loop's job: an expired record answers 404 and its bytes leave the volume, once."""

    async def run() -> None:
        stores = SQLiteStores(str(tmp_path / "m.sqlite3")) if kind == "sqlite" else None
        if stores is None:
            stores = RedisStores(request.getfixturevalue("redis_url"), prefix=f"t{time.time_ns()}:")
        meta = stores.objects
        files = Files(meta, tmp_path / "files", max_bytes=10, retention_s=60)
        now = int(time.time())
        for fid, expires in (("file-old", now - 1), ("file-new", now + 60)):
            (tmp_path / "files" / fid).write_bytes(b"1")
            await meta.put("file", asdict(FileRecord(fid, "k", fid, "user_data", 1, now - 5, expires)))
        assert [o["id"] for o in await meta.owned("file", "k")] == ["file-new"]
        await files.prune()
        assert sorted(os.listdir(tmp_path / "files")) == ["file-new"]
        assert await meta.take_expired("file") == []  # claimed once
        with pytest.raises(Exception, match="No such File object"):
            await files.find("file-old", "k")
        assert (await files.find("file-new", "k")).bytes == 1
        with pytest.raises(Exception, match="No such File object"):
            await files.find("file-new", "other-key")
        await stores.aclose()

    asyncio.run(run())
