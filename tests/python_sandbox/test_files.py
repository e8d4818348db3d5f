"""The python tool's hidden file tools (how container files travel over MCP): chunks in and out of
/mnt/data, a listing, and paths that leave /mnt/data or go through a symlink refused; on both backends,
through the mcp 2.x client. The rules themselves: tests/toolkit/test_sandbox_files.py."""

from __future__ import annotations

import base64
import hashlib
import json

from mcp.client.session import ClientSession

from tests.support.gateway import connect
from tests.support.mcp2 import mcp_session
from tests.support.service import Service

CHUNK = 256 * 1024


async def call(session: ClientSession, tool: str, **args) -> dict:
    result = await session.call_tool(tool, args)
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def refused(session: ClientSession, tool: str, **args) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error
    return result.content[0].text


async def test_chunks_in_code_sees_them_chunks_out(server: Service, session_id: str) -> None:
    data = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(20_000))  # 640 kB: 3 chunks
    async with mcp_session(server.url, "streamable", {"x-session-id": session_id}) as session:
        for offset in range(0, len(data), CHUNK):
            chunk = base64.b64encode(data[offset : offset + CHUNK]).decode()
            written = await call(session, "write_file", path="in/data.bin", data=chunk, offset=offset)
        assert written["size"] == len(data)
        code = "import hashlib; open('plot.png', 'wb').write(b'png')\n"
        code += "hashlib.sha256(open('in/data.bin', 'rb').read()).hexdigest()"
        answer = await session.call_tool("python", {"code": code})
        assert hashlib.sha256(data).hexdigest() in answer.content[0].text
        listed = {f["path"]: f["size"] for f in (await call(session, "list_files"))["files"]}
        assert listed == {"in/data.bin": len(data), "plot.png": 3}
        back, offset = b"", 0
        while True:
            part = await call(session, "read_file", path="/mnt/data/in/data.bin", offset=offset)
            back += base64.b64decode(part["data"])
            offset = len(back)
            if part["eof"]:
                break
        assert back == data
        await session.call_tool("cleanup_session", {})


async def test_paths_outside_mnt_data_are_refused(server: Service, session_id: str) -> None:
    async with mcp_session(server.url, "streamable", {"x-session-id": session_id}) as session:
        code = "import os; os.symlink('/etc', 'out'); os.symlink('/etc/passwd', 'leak')"
        await session.call_tool("python", {"code": code})
        payload = base64.b64encode(b"x").decode()
        for path in ("../etc/x", "/etc/passwd", "a/../../x", "out/passwd", "leak", "", "/mnt/data"):
            assert "path" in await refused(session, "write_file", path=path, data=payload)
            assert "path" in await refused(session, "read_file", path=path)
        assert "max_bytes must be" in await refused(session, "read_file", path="x", max_bytes=10 * CHUNK)
        names = {f["path"] for f in (await call(session, "list_files"))["files"]}
        assert names == set()  # a symlink is not a file of /mnt/data, and nothing was written
        await session.call_tool("cleanup_session", {})


async def test_a_sessionless_client_moves_files_in_the_session_of_its_handle(server: Service) -> None:
    """The 2026-07-28 era (no MCP session, no x-session-id): the file tools follow the handle like `python`."""
    async with connect(f"{server.url}/mcp", "streamable-http") as client:
        made = await client.call_tool("python", {"code": "1", "session_handle": "new"})
        handle = made.structured_content["session_handle"]  # type: ignore[index]
        payload = base64.b64encode(b"by handle").decode()
        await client.call_tool("write_file", {"path": "h.txt", "data": payload, "session_handle": handle})
        seen = await client.call_tool("python", {"code": "open('h.txt').read()", "session_handle": handle})
        assert "by handle" in seen.content[0].text  # type: ignore[union-attr]
        lone = await client.call_tool("list_files", {})  # no handle: a session of its own, which has nothing
        assert json.loads(lone.content[0].text)["files"] == []  # type: ignore[union-attr]
        await client.call_tool("cleanup_session", {"session_handle": handle})
