"""`/v1/containers` and `/v1/containers/{id}/files` through the openai SDK: the whole `containers` resource,
owners, limits, bad names, and expiry with the container's files."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from dataclasses import asdict

import httpx
import openai
import pytest
from openai.types import ContainerListResponse, ContainerRetrieveResponse, FileObject
from openai.types.containers import FileListResponse, FileRetrieveResponse


def strict(model: type, data: dict) -> None:
    """The SDK's type validates the raw body (not the SDK's lenient construct), and it has no extra keys."""
    model.model_validate(data)
    assert set(data) <= set(model.model_fields), set(data) - set(model.model_fields)


def test_bodies_match_the_sdk_types_strictly(make_stack) -> None:
    stack = make_stack()
    get = httpx.Client(base_url=f"{stack.url}/v1", timeout=10)
    upload = stack.client.files.create(file=("d.csv", b"1"), purpose="user_data")
    box = stack.client.containers.create(name="typed", file_ids=[upload.id])
    (cfile,) = stack.client.containers.files.list(box.id)
    strict(FileObject, get.get(f"/files/{upload.id}").json())
    strict(ContainerRetrieveResponse, get.get(f"/containers/{box.id}").json())
    strict(FileRetrieveResponse, get.get(f"/containers/{box.id}/files/{cfile.id}").json())
    for path, item in (
        ("/files", FileObject),
        ("/containers", ContainerListResponse),
        (f"/containers/{box.id}/files", FileListResponse),
    ):
        listed = get.get(path).json()
        assert set(listed) == {"object", "data", "first_id", "last_id", "has_more"}
        for entry in listed["data"]:
            strict(item, entry)


def volume(stack) -> list[str]:
    return sorted(os.listdir(stack.app.state.files.directory))


def test_the_containers_resource_end_to_end(make_stack) -> None:
    stack = make_stack()
    client = stack.client
    csv = b"x,y\n" + b"".join(f"{i},{i * i}\n".encode() for i in range(1000))
    upload = client.files.create(file=("data.csv", csv), purpose="user_data")
    made = client.containers.create(
        name="analysis",
        file_ids=[upload.id],
        memory_limit="4g",
        expires_after={"anchor": "last_active_at", "minutes": 30},
    )
    assert (made.name, made.status, made.memory_limit, made.expires_after.minutes) == ("analysis", "running", "4g", 30)
    assert made.id.startswith("cntr_") and client.containers.retrieve(made.id).id == made.id
    other = client.containers.create(name="scratch")
    assert (other.memory_limit, other.expires_after.minutes) == ("1g", 20)  # OpenAI's defaults
    assert [c.id for c in client.containers.list(limit=1)] == [other.id, made.id]
    assert [c.id for c in client.containers.list(name="analysis")] == [made.id]

    (listed,) = client.containers.files.list(made.id)
    assert (listed.path, listed.bytes, listed.source, listed.container_id) == (
        "/mnt/data/data.csv",
        len(csv),
        "user",
        made.id,
    )
    figure = bytes(range(256)) * 40
    added = client.containers.files.create(made.id, file=("plot.png", figure))
    assert added.path == "/mnt/data/plot.png" and added.bytes == len(figure)
    by_id = client.containers.files.create(other.id, file_id=upload.id)
    assert by_id.path == "/mnt/data/data.csv"
    for cid, fid, data in ((made.id, listed.id, csv), (made.id, added.id, figure), (other.id, by_id.id, csv)):
        got = client.containers.files.content.retrieve(fid, container_id=cid).read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    assert client.containers.files.retrieve(added.id, container_id=made.id).path == "/mnt/data/plot.png"

    client.files.delete(upload.id)  # the containers keep their own copies
    assert client.containers.files.content.retrieve(by_id.id, container_id=other.id).read() == csv
    client.containers.files.delete(added.id, container_id=made.id)
    assert [f.id for f in client.containers.files.list(made.id)] == [listed.id]
    client.containers.delete(made.id)
    with pytest.raises(openai.NotFoundError, match="No such Container"):
        client.containers.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        client.containers.files.content.retrieve(listed.id, container_id=made.id)
    assert volume(stack) == [by_id.id]  # the deleted container's files went with it


def test_another_keys_container_is_missing(make_stack) -> None:
    stack = make_stack(api_keys=["key-a", "key-b"])
    a, b = (stack.client.with_options(api_key=k) for k in ("key-a", "key-b"))
    theirs = a.containers.create(name="a")
    cfile = a.containers.files.create(theirs.id, file=("a.txt", b"secret"))
    mine = b.containers.create(name="b")
    calls = [
        lambda: b.containers.retrieve(theirs.id),
        lambda: b.containers.delete(theirs.id),
        lambda: b.containers.files.list(theirs.id),
        lambda: b.containers.files.create(theirs.id, file=("x", b"x")),
        lambda: b.containers.files.retrieve(cfile.id, container_id=theirs.id),
        lambda: b.containers.files.content.retrieve(cfile.id, container_id=theirs.id),
        lambda: b.containers.files.retrieve(cfile.id, container_id=mine.id),  # a's file through b's container
        lambda: b.containers.files.delete(cfile.id, container_id=mine.id),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError):
            call()
    upload = a.files.create(file=("f.csv", b"1"), purpose="user_data")
    for call in (
        lambda: b.containers.create(name="c", file_ids=[upload.id]),
        lambda: b.containers.files.create(mine.id, file_id=upload.id),
    ):
        with pytest.raises(openai.NotFoundError, match="No such File object"):
            call()
    assert [c.id for c in b.containers.list()] == [mine.id]
    assert a.containers.files.content.retrieve(cfile.id, container_id=theirs.id).read() == b"secret"


def test_bad_input_is_refused_and_leaves_nothing(make_stack) -> None:
    stack = make_stack(max_file_bytes=1000, max_container_memory="4g")
    client = stack.client
    refusals = {
        "memory_limit '16g' is above this server's maximum of '4g'": lambda: client.containers.create(
            name="big", memory_limit="16g"
        ),
        "skills": lambda: client.containers.create(name="s", extra_body={"skills": []}),
        "network_policy.type": lambda: client.containers.create(
            name="n", network_policy={"type": "allowlist", "allowed_domains": ["example.com"]}
        ),
        "expires_after.minutes": lambda: client.containers.create(
            name="e", expires_after={"anchor": "last_active_at", "minutes": 0}
        ),
    }
    for says, call in refusals.items():
        with pytest.raises(openai.BadRequestError, match=says):
            call()
    box = client.containers.create(name="box")
    with pytest.raises(openai.APIStatusError) as too_big:
        client.containers.files.create(box.id, file=("big.bin", b"z" * 5000))
    assert too_big.value.status_code == 413
    for name in ("..", "../etc/passwd", "/mnt/data/x", "a\\b"):
        with pytest.raises(openai.BadRequestError, match="invalid file name"):
            client.containers.files.create(box.id, file=(name, b"x"))
    client.containers.files.create(box.id, file=("same.txt", b"1"))
    with pytest.raises(openai.BadRequestError, match="already exists"):
        client.containers.files.create(box.id, file=("same.txt", b"2"))
    for cid in ("cntr_missing", "../../etc"):
        with pytest.raises(openai.NotFoundError):
            client.containers.files.create(cid, file=("ok.txt", b"x"))
    answer = httpx.post(f"{stack.url}/v1/containers", content=b"{not json", timeout=10)
    assert answer.status_code == 400 and "not valid JSON" in answer.json()["error"]["message"]
    assert [c.id for c in client.containers.list()] == [box.id]
    assert len(volume(stack)) == 1  # same.txt, nothing else: no part files, no refused uploads


def test_an_idle_container_expires_with_its_files(make_stack) -> None:
    stack = make_stack()
    client = stack.client
    box = client.containers.create(name="idle", expires_after={"anchor": "last_active_at", "minutes": 1})
    cfile = client.containers.files.create(box.id, file=("out.csv", b"a,b\n"))
    first = client.containers.retrieve(box.id).last_active_at
    containers = stack.app.state.containers

    async def age_and_prune() -> None:  # as if a minute had passed since it was last active
        record = await containers.find(box.id, "anonymous", touch=False)
        record.expires_at = int(time.time()) - 1
        await containers.objects.put("container", asdict(record))
        await containers.prune()

    asyncio.run(age_and_prune())
    assert first >= box.created_at
    with pytest.raises(openai.NotFoundError):
        client.containers.retrieve(box.id)
    with pytest.raises(openai.NotFoundError):
        client.containers.files.content.retrieve(cfile.id, container_id=box.id)
    assert volume(stack) == []


@pytest.mark.parametrize(
    ("container", "param", "status"),
    [
        ("cntr_0123", "tools[0].container", 404),
        ("box_0123", "tools[0].container", 404),
        ({"type": "auto", "file_ids": ["file-1"]}, "tools[0].container.file_ids", 404),
        ({"type": "auto", "file_ids": "file-1"}, "tools[0].container.file_ids", 400),
        ({"type": "auto", "memory_limit": "2g"}, "tools[0].container.memory_limit", 400),
        ({"type": "auto", "network_policy": {"type": "allowlist"}}, "tools[0].container.network_policy", 400),
        ({"type": "auto", "colour": "red"}, "tools[0].container", 400),
        ({"type": "manual"}, "tools[0].container", 400),
    ],
)
def test_code_interpreter_refuses_a_container_it_cannot_use(stack, container, param: str, status: int) -> None:
    """A missing container or file is a 404, a memory_limit not in OpenAI's list or a network a 400: each
    names the field, and nothing is created."""
    with pytest.raises(openai.APIStatusError) as refused:
        stack.client.responses.create(
            model="m", input="hi", tools=[{"type": "code_interpreter", "container": container}]
        )
    assert (refused.value.status_code, refused.value.body["param"]) == (status, param)
    assert list(stack.client.containers.list()) == []
