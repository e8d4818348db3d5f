"""code_interpreter with a container, through the openai SDK: the container's files are in the real python
tool's /mnt/data (pushed through the real gateway over MCP), what the code writes comes back as container
files, cited in the answer and shown as image outputs. The scripted worker stands in for the model's choices."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.container.conftest import containers_of, require_docker, server_args
from tests.orchestrator.test_fleet import PY_CALL, gateway_url  # noqa: F401
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import running_service

EXEC = "<|channel|>commentary to=container.exec <|constrain|>json<|message|>{args}<|call|>"

# Reads the CSV, writes summary.csv (bigger than one 256 KiB chunk) and a small PNG made by hand (the
# sandbox has no matplotlib), and prints the sha256 of each as the sandbox sees them.
ANALYSE = """import csv, hashlib, struct, zlib
rows = list(csv.reader(open('/mnt/data/data.csv')))
with open('/mnt/data/summary.csv', 'w') as out:
    out.write('x,y,sum\\n')
    for x, y in rows[1:]:
        out.write(f'{x},{y},{int(x) + int(y)}\\n')
def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))
pixels = b''.join(b'\\x00' + bytes([40 * i, 0, 200]) * 4 for i in range(4))
png = (b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 4, 4, 8, 2, 0, 0, 0))
       + chunk(b'IDAT', zlib.compress(pixels)) + chunk(b'IEND', b''))
open('/mnt/data/plot.png', 'wb').write(png)
print('rows', len(rows) - 1)
for name in ('plot.png', 'summary.csv'):
    print(name, hashlib.sha256(open('/mnt/data/' + name, 'rb').read()).hexdigest())
"""
ANSWER = "The chart is [plot.png](sandbox:/mnt/data/plot.png) and the table is summary.csv."
CSV = b"x,y\n" + b"".join(f"{i},{i * i}\n".encode() for i in range(40_000))  # ~500 KiB: several chunks


@pytest.fixture
def fleet(make_stack, gateway_url):  # noqa: F811
    url, py_port, _ = gateway_url
    stack = make_stack(tools_url=url, python_url=None, browser_url=None, container_url=None, api_keys=["ka", "kb"])
    stack.client = stack.client.with_options(api_key="ka")
    stack.python_sessions = lambda: httpx.get(f"http://127.0.0.1:{py_port}/healthz").json().get("sessions", 0)
    return stack


def script(fleet, prompt: str, code: str, answer: str = "ok") -> None:
    """The model runs `code` when the input says `prompt`, then answers once it read the result."""
    fleet.script(
        [
            ("python to=assistant", f"<|channel|>final<|message|>{answer}<|return|>"),
            (prompt, PY_CALL.format(code=code)),
        ]
    )


def tool(container) -> dict:
    return {"type": "code_interpreter", "container": container}


def ask(client, container, prompt: str = "go", **extra):
    return client.responses.create(model="gpt-oss", input=prompt, tools=[tool(container)], **extra)


def sandbox_hashes(logs: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in logs.splitlines() if line.startswith(("plot", "summary"))}


def test_a_container_s_files_go_in_and_what_the_code_writes_comes_back_cited(fleet) -> None:
    client = fleet.client
    script(fleet, "analyse", ANALYSE, ANSWER)
    upload = client.files.create(file=("data.csv", CSV), purpose="user_data")
    box = client.containers.create(name="analysis", file_ids=[upload.id])
    resp = ask(client, box.id, "analyse data.csv", include=["code_interpreter_call.outputs"])
    call = resp.output[0]
    assert call.type == "code_interpreter_call" and call.status == "completed" and call.container_id == box.id
    logs = call.outputs[0].logs
    assert "rows 40000" in logs, logs
    files = {f.path: f for f in client.containers.files.list(box.id)}
    assert sorted(files) == ["/mnt/data/data.csv", "/mnt/data/plot.png", "/mnt/data/summary.csv"]
    assert [files[p].source for p in sorted(files)] == ["user", "assistant", "assistant"]
    for name, digest in sandbox_hashes(logs).items():
        content = client.containers.files.content.retrieve(files[f"/mnt/data/{name}"].id, container_id=box.id)
        assert hashlib.sha256(content.read()).hexdigest() == digest
    # the figure is an image output: a URL to the container file's content
    (image,) = [o for o in call.outputs if o.type == "image"]
    png = files["/mnt/data/plot.png"]
    assert image.url == f"{fleet.url}/v1/containers/{box.id}/files/{png.id}/content"
    got = httpx.get(image.url, headers={"Authorization": "Bearer ka"})
    assert got.content.startswith(b"\x89PNG")
    # the answer cites both files where it names them, the link once
    text = resp.output[-1].content[0]
    assert text.text == ANSWER
    cited = [(a.file_id, a.filename, text.text[a.start_index : a.end_index]) for a in text.annotations]
    assert cited == [  # a link to a file is one citation, over its target
        (png.id, "plot.png", "sandbox:/mnt/data/plot.png"),
        (files["/mnt/data/summary.csv"].id, "summary.csv", "summary.csv"),
    ]
    assert all(a.type == "container_file_citation" and a.container_id == box.id for a in text.annotations)


def test_a_streamed_response_announces_the_citation_and_the_image(fleet) -> None:
    client = fleet.client
    box = client.containers.create(name="streamed")
    script(fleet, "draw", "_ = open('/mnt/data/dot.png', 'wb').write(b'\\x89PNG fake')", "Drawn: dot.png")
    events = list(client.responses.create(model="gpt-oss", input="draw", stream=True, tools=[tool(box.id)]))
    (added,) = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert (added.annotation.type, added.annotation.filename) == ("container_file_citation", "dot.png")
    done = events[-1].response
    (image,) = [o for o in done.output[0].outputs if o.type == "image"]
    assert image.url.endswith(f"/v1/containers/{box.id}/files/{added.annotation.file_id}/content")


def test_the_next_response_on_the_container_sees_the_same_files_and_its_sandbox_goes_with_it(fleet) -> None:
    client = fleet.client
    before = fleet.python_sessions()
    box = client.containers.create(name="twice")
    client.containers.files.create(box.id, file=("notes.txt", b"first"))
    read = "print(open('/mnt/data/notes.txt').read()); _ = open('/mnt/data/notes.txt', 'a').write(' second')"
    script(fleet, "go", read)
    first, second = ask(client, box.id), ask(client, box.id)
    assert first.output[0].outputs[0].logs.strip() == "first"
    assert second.output[0].outputs[0].logs.strip() == "first second"
    (notes,) = client.containers.files.list(box.id)  # changed by the code: one file, the latest bytes
    assert notes.source == "assistant"
    assert client.containers.files.content.retrieve(notes.id, container_id=box.id).read() == b"first second second"
    assert fleet.python_sessions() == before + 1  # one sandbox for both responses: the container's
    client.containers.delete(box.id)
    assert fleet.python_sessions() == before


def test_auto_with_file_ids_makes_a_container_holding_them(fleet) -> None:
    client = fleet.client
    upload = client.files.create(file=("data.csv", b"a,b\n1,2\n"), purpose="user_data")
    script(fleet, "go", "print(open('/mnt/data/data.csv').read().split()[1])")
    resp = ask(client, {"type": "auto", "file_ids": [upload.id], "memory_limit": "1g"})
    call = resp.output[0]
    assert call.outputs[0].logs.strip() == "1,2"
    made = client.containers.retrieve(call.container_id)
    assert made.memory_limit == "1g"
    assert [f.path for f in client.containers.files.list(made.id)] == ["/mnt/data/data.csv"]


def test_nothing_outside_mnt_data_comes_back(fleet) -> None:
    """A symlink out of /mnt/data and a file the code writes elsewhere are not container files."""
    client = fleet.client
    box = client.containers.create(name="escape")
    code = "import os\nos.symlink('/etc/passwd', '/mnt/data/leak')\nopen('/tmp/elsewhere', 'w').write('x')\nprint('ok')"
    script(fleet, "go", code, "see leak")
    resp = ask(client, box.id)
    assert resp.output[0].outputs[0].logs.strip() == "ok"
    assert list(client.containers.files.list(box.id)) == []
    assert resp.output[-1].content[0].annotations == []


def test_another_key_s_container_or_files_are_missing_and_nothing_is_made(fleet) -> None:
    a, b = fleet.client, fleet.client.with_options(api_key="kb")
    theirs = a.containers.create(name="a")
    upload = a.files.create(file=("a.csv", b"secret"), purpose="user_data")
    before = sorted(os.listdir(fleet.app.state.files.directory))
    for container, param in (
        (theirs.id, "tools[0].container"),
        ("cntr_" + "0" * 32, "tools[0].container"),
        ({"type": "auto", "file_ids": [upload.id]}, "tools[0].container.file_ids"),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            ask(b, container)
        assert missing.value.body["param"] == param
    assert list(b.containers.list()) == []
    assert sorted(os.listdir(fleet.app.state.files.directory)) == before


def test_what_the_code_writes_past_the_keys_bound_stays_in_the_sandbox_and_the_output_says_so(
    make_stack,
    gateway_url,  # noqa: F811
) -> None:
    """The key's files hold 30,000 of its 50,000 bytes: a 25,000-byte file the code writes is not saved (the
    output names the bound), a 4-byte one is."""
    stack = make_stack(
        tools_url=gateway_url[0], python_url=None, browser_url=None, container_url=None, max_file_bytes_per_key=50_000
    )
    client = stack.client
    client.files.create(file=("held.bin", b"x" * 30_000), purpose="user_data")
    box = client.containers.create(name="bounded")
    code = (
        "_ = open('/mnt/data/big.bin', 'wb').write(b'y' * 25_000)\n_ = open('/mnt/data/small.txt', 'w').write('fits')"
    )
    script(stack, "go", code + "\nprint('ok')")
    logs = ask(client, box.id, include=["code_interpreter_call.outputs"]).output[0].outputs[0].logs
    assert "/mnt/data/big.bin (25000 bytes) was not saved: past the " in logs, logs
    assert "bytes left by --max-file-bytes-per-key, 50000 bytes for this key's files]" in logs, logs
    assert [(f.path, f.bytes) for f in client.containers.files.list(box.id)] == [("/mnt/data/small.txt", 4)]


def test_a_memory_limit_above_the_tools_cap_is_a_400_in_the_requests_words(fleet) -> None:
    """4g passes the API's cap (4g by default) but not the python tool's (its --memory-mb, 1024): the error
    names the request's field and the cap, not the internal call that found it; the `auto` container is gone."""
    with pytest.raises(openai.BadRequestError) as refused:
        ask(fleet.client, {"type": "auto", "memory_limit": "4g"})
    error = refused.value.body
    assert error["param"] == "tools[0].container.memory_limit"
    expected = "memory_limit '4g' is larger than this fleet's python sandboxes may be (at most 1024 MiB)"
    assert error["message"] == expected
    assert list(fleet.client.containers.list()) == []


@pytest.fixture(scope="module")
def both_tools() -> Iterator[str]:
    """A gateway in front of the real python tool (local backend) and the real container tool (docker)."""
    require_docker()
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is needed for the python server's local backend")
    instance = f"pytest-ctr-files-{uuid.uuid4().hex[:8]}"
    with (
        running_service(["-m", "tools.python_sandbox", "--backend", "local"]) as python,
        running_service(server_args(instance)) as container,
        running_gateway(gateway_config({"python": [f"{python.url}/mcp"], "container": [f"{container.url}/mcp"]})) as gw,
    ):
        yield gw.base
    assert containers_of(instance) == []


WRITE_TWO = "import os\nos.makedirs('/mnt/data/sub')\nfor path in ('py.txt', 'sub/deep.txt'):\n" + (
    "    _ = open('/mnt/data/' + path, 'w').write('from python\\n')"
)


def test_shell_on_the_same_container_sees_the_files_code_interpreter_wrote_and_back(make_stack, both_tools) -> None:
    stack = make_stack(tools_url=both_tools, python_url=None, browser_url=None, container_url=None)
    client = stack.client
    box = client.containers.create(name="shared")
    client.containers.files.create(box.id, file=("in.txt", b"from the user\n"))
    cat = "cat /mnt/data/in.txt /mnt/data/py.txt /mnt/data/sub/deep.txt > /mnt/data/both.txt"
    shell = EXEC.format(args=json.dumps({"cmd": ["bash", "-lc", cat]}))
    stack.script(
        [
            ("(python|container.exec) to=assistant", "<|channel|>final<|message|>See both.txt.<|return|>"),
            ("python first", PY_CALL.format(code=WRITE_TWO)),
            ("then shell", shell),
            ("python last", PY_CALL.format(code="print(open('/mnt/data/both.txt').read())")),
        ]
    )
    reference = {"type": "shell", "environment": {"type": "container_reference", "container_id": box.id}}
    first = client.responses.create(
        model="gpt-oss", input="python first", tools=[{"type": "code_interpreter", "container": box.id}]
    )
    assert first.output[0].status == "completed"
    second = client.responses.create(model="gpt-oss", input="then shell", tools=[reference])
    call, output, answer = second.output
    assert call.environment.type == "container_reference" and call.environment.container_id == box.id
    assert output.output[0].outcome.exit_code == 0, output.output[0].stderr
    both = {f.path: f for f in client.containers.files.list(box.id)}["/mnt/data/both.txt"]
    assert client.containers.files.content.retrieve(both.id, container_id=box.id).read() == (
        b"from the user\nfrom python\nfrom python\n"
    )
    (cited,) = answer.content[0].annotations
    assert (cited.type, cited.file_id, cited.filename) == ("container_file_citation", both.id, "both.txt")
    third = client.responses.create(
        model="gpt-oss", input="python last", tools=[{"type": "code_interpreter", "container": box.id}]
    )
    assert third.output[0].outputs[0].logs.strip() == "from the user\nfrom python\nfrom python"
    client.containers.delete(box.id)  # its sandboxes go with it: the module's check finds no container left
