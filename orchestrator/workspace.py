"""A container's files in a tool sandbox's `/mnt/data`: the python tool's for `code_interpreter` with a
container, the container tool's for `shell` with a `container_reference` environment.

The container's files on the volume are the platform's copy; each sandbox is a cache of it. A tool session
is named by the container's id, so every response using the container reaches the same sandbox of that
tool. Before each call, the container files the sandbox does not hold are pushed (hidden `write_file`,
256 KiB chunks over MCP through the gateway); after it, `/mnt/data` is listed and what is new or changed is
pulled back (`read_file`) into container files (`source: "assistant"`), which the answer cites and the
call's item shows. So a file python wrote is in the shell's sandbox at its next call, and the other way
round. Nothing travels by shared disk, so each tool keeps its own replicas and hosts.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from orchestrator.containers import DATA_DIR, ContainerRecord, Containers, CreateContainer
from orchestrator.errors import RequestError
from orchestrator.tools import ToolOutcome, ToolSessions
from toolkit.sandbox.files import MAX_CHUNK
from toolkit.wire import refused_cap

log = structlog.get_logger(__name__)

MARKDOWN_LINK = re.compile(r"\[([^\]\n]*)\]\(([^)\s]+)\)")  # [text](target): the spans of text and target
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
DEFAULT_MEMORY = "1g"  # OpenAI's default memory_limit: the tool servers' own `--memory-mb` (1024 by default)


class WorkspaceError(Exception):
    """A file could not be moved between the platform and the sandbox."""


@dataclass(frozen=True)
class SandboxFiles:
    """One namespace's sandbox files, through the hidden file tools every sandbox tool server serves alike
    (`toolkit.sandbox.file_tools`): paths under /mnt/data, base64 chunks, `eof` after the last."""

    sessions: ToolSessions
    url: str  # the namespace's MCP endpoint, whose session for the container is named by its id

    async def _tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        out = await self.sessions.call(self.url, name, args)
        if out.is_error or out.structured is None:
            raise WorkspaceError(out.text or f"{name} gave no result")
        return out.structured

    async def listing(self) -> dict[str, tuple[int, int]]:
        """name -> (size, mtime_ns) of the regular files under /mnt/data."""
        found = (await self._tool("list_files", {})).get("files") or []
        return {str(f["path"]): (int(f["size"]), int(f["mtime_ns"])) for f in found}

    async def write(self, name: str, chunk: bytes, offset: int) -> None:
        await self._tool("write_file", {"path": name, "data": base64.b64encode(chunk).decode(), "offset": offset})

    async def read(self, name: str, offset: int) -> tuple[bytes, bool]:
        """The chunk at `offset`, and whether it is the file's last."""
        result = await self._tool("read_file", {"path": name, "offset": offset, "max_bytes": MAX_CHUNK})
        return base64.b64decode(str(result.get("data") or "")), bool(result.get("eof"))


@dataclass
class Workspace:
    """One response's use of a container by one namespace's tool session."""

    record: ContainerRecord
    owner: str
    containers: Containers
    files: SandboxFiles
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (size, mtime_ns) after the last call
    held: dict[str, str] | None = None  # name -> the container file id the sandbox holds; None: not compared yet
    made: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> container file written in this response
    unsaved: list[str] = field(default_factory=list)  # why each file the last call wrote was not saved

    @property
    def container_id(self) -> str:
        return self.record.id

    async def run(self, call: Callable[[], Awaitable[ToolOutcome]]) -> ToolOutcome:
        """The call, with the container's files in place before it and what it wrote saved after it."""
        try:
            await self._push()
        except WorkspaceError as exc:
            text = f"Error: the container's files could not be copied into /mnt/data: {exc}"
            return ToolOutcome(text, True, outcome="error")
        outcome = await call()
        try:
            await self.containers.find(self.container_id, self.owner)  # in use: its expiry starts again from now
            outcome.files = await self._pull()
            if self.unsaved:
                outcome.text += "\n[" + "; ".join(self.unsaved) + "]"
        except WorkspaceError as exc:
            outcome.text += f"\n[the files written under /mnt/data could not be saved: {exc}]"
        except RequestError:  # deleted (or expired) while the call ran: nothing to save the files into
            outcome.text += f"\n[container {self.container_id} is gone: the files written were not saved]"
        return outcome

    async def _push(self) -> None:
        """The container files the sandbox does not hold: all the first time (but those it already has at
        their size, from an earlier response), then those added since (by the API or another tool)."""
        files = {f.path.removeprefix(DATA_DIR + "/"): f for f in await self.containers.files_of(self.container_id)}
        if self.held is None:
            self.seen = await self.files.listing()
            self.held = {name: f.id for name, f in files.items() if self.seen.get(name, (-1,))[0] == f.bytes}
        missing = [(name, f) for name, f in files.items() if self.held.get(name) != f.id]
        for name, f in missing:
            await self._send(name, self.containers.files.path(f.id))
            self.held[name] = f.id
        if missing:
            self.seen = await self.files.listing()
            log.info("workspace.pushed", container_id=self.container_id, url=self.files.url, files=len(missing))

    async def _send(self, name: str, source: Path) -> None:
        offset = 0
        async with await anyio.open_file(source, "rb") as f:
            while True:
                chunk = await f.read(MAX_CHUNK)
                await self.files.write(name, chunk, offset)
                offset += len(chunk)
                if len(chunk) < MAX_CHUNK:  # the last chunk (an empty file: the one write that creates it)
                    return

    async def _pull(self) -> list[dict[str, Any]]:
        """What the call wrote or changed under /mnt/data, as new container files."""
        now = await self.files.listing()
        saved, self.unsaved = [], []
        left = await self.containers.files.left(self.owner)  # read once; each file saved below takes its share
        held = {f.path: f.bytes for f in await self.containers.files_of(self.container_id)}
        for name, (size, _) in now.items():
            if self.seen.get(name) == now[name]:
                continue
            replaced = held.get(f"{DATA_DIR}/{name}", 0)
            room, bound = self.containers.output_room(left, replaced)
            if size > room:
                log.warning("workspace.not_saved", container_id=self.container_id, path=name, bytes=size, room=room)
                self.unsaved.append(f"{DATA_DIR}/{name} ({size} bytes) was not saved: past {bound}")
                continue
            record = await self.containers.store_output(self.container_id, name, self._receive(name, room, bound))
            held[record.path] = record.bytes
            left = None if left is None else left - record.bytes + replaced
            self.made[record.path] = record.body()
            if self.held is not None:
                self.held[name] = record.id
            saved.append(record.body())
        self.seen = now
        return saved

    async def _receive(self, name: str, room: int, bound: str) -> AsyncIterator[bytes]:
        """The file's chunks, refused past `room` (the file may still be growing after it was listed)."""
        offset = 0
        while True:
            data, eof = await self.files.read(name, offset)
            offset += len(data)
            if offset > room:
                raise WorkspaceError(f"{DATA_DIR}/{name} grew past {bound}")
            yield data
            if eof or not data:
                return

    def citations(self, text: str) -> list[dict[str, Any]]:
        """`container_file_citation`s of the files written in this response that the text names (as
        `sandbox:/mnt/data/NAME`, `/mnt/data/NAME` or `NAME`), each mention spanned once.

        A markdown link to a file, `[NAME](sandbox:/mnt/data/NAME)`, is one citation, over its target: the
        span a client swaps for the file's download URL, as OpenAI's `file_path` annotation of a `sandbox:`
        link spanned that path; the same file named in the link's text is not cited again."""
        found = list(self._mentions(text))
        targets = {m.span(): file_id for m, file_id, _ in found}
        linked = [
            (link.span(1), targets[link.span(2)]) for link in MARKDOWN_LINK.finditer(text) if link.span(2) in targets
        ]
        return [
            {
                "type": "container_file_citation",
                "container_id": self.container_id,
                "file_id": file_id,
                "filename": filename,
                "start_index": m.start(),
                "end_index": m.end(),
            }
            for m, file_id, filename in sorted(found, key=lambda f: f[0].start())
            if not any(start <= m.start() < end and linked_id == file_id for (start, end), linked_id in linked)
        ]

    def _mentions(self, text: str) -> Iterator[tuple[re.Match[str], str, str]]:
        """Each mention of a file written in this response: (its match, the file's id, its file name)."""
        for path, body in self.made.items():
            name = path.removeprefix(DATA_DIR + "/")
            mention = rf"(?<![\w./-])(?:sandbox:)?(?:{re.escape(DATA_DIR)}/)?{re.escape(name)}(?![\w/-])"
            for m in re.finditer(mention, text):
                yield m, body["id"], name.rpartition("/")[2]

    def images(self, files: list[dict[str, Any]], public_url: str) -> list[dict[str, Any]]:
        """`image` outputs of a call: its image files, each a URL to the container file's content."""
        return [
            {"type": "image", "url": f"{public_url}/v1/containers/{self.container_id}/files/{f['id']}/content"}
            for f in files
            if f["path"].lower().endswith(IMAGE_SUFFIXES)
        ]


async def resolve(
    ns: str,
    spec: str | dict[str, Any],
    where: str,
    owner: str,
    containers: Containers,
    sessions: ToolSessions,
    url: str | None,
) -> Workspace | None:
    """The workspace of namespace `ns` that a request names: a container of the caller's (another key's or a
    missing one: 404), or a new one for code_interpreter's `auto` with `file_ids` or `memory_limit`; None:
    plain `auto` (the conversation's own sandbox, as before)."""
    if isinstance(spec, dict) and not spec.get("file_ids") and spec.get("memory_limit") is None:
        return None
    if url is None:
        raise RequestError(f"this container needs the {ns} tool server, and none is configured", where, 503)
    if isinstance(spec, str):
        try:
            record = await containers.find(spec, owner)
        except RequestError as exc:  # named as the request has it
            raise RequestError(str(exc), where, exc.status, exc.code) from None
    else:
        memory = spec.get("memory_limit") or DEFAULT_MEMORY
        create = CreateContainer(name="code_interpreter auto", file_ids=list(spec.get("file_ids") or []))
        try:
            record = await containers.create_from(create.model_copy(update={"memory_limit": memory}), owner)
        except RequestError as exc:
            field = "memory_limit" if exc.param == "memory_limit" else "file_ids"  # a file id is missing, or twice
            raise RequestError(str(exc), f"{where}.{field}", exc.status, exc.code) from None
    sessions.named[url] = record.id
    if (size := sandbox_mb(record.memory_limit)) is not None:
        sessions.sizes[url] = size
        try:
            await _check_size(ns, record, sessions, url, where if isinstance(spec, str) else f"{where}.memory_limit")
        except RequestError:
            if not isinstance(spec, str):  # the `auto` container made for this request goes with it
                await containers.delete(record.id, owner)
            raise
    return Workspace(record, owner, containers, SandboxFiles(sessions, url))


def sandbox_mb(memory: str) -> int | None:
    """The sandbox size, in MiB, that a container asks its tool server for; None for the default 1g, which is
    the tool's own `--memory-mb` (so an operator who set it lower keeps every default container working)."""
    return None if memory == DEFAULT_MEMORY else int(memory.removesuffix("g")) * 1024


async def _check_size(ns: str, record: ContainerRecord, sessions: ToolSessions, url: str, field: str) -> None:
    """Start the container's sandbox now (its first call would anyway), so a size above what the tool server
    allows (its `--max-session-memory-mb`) is the request's 400 rather than a failed call mid-response."""
    out = await sessions.call_once(url, "list_files", {})
    if out.is_error and (cap := refused_cap(out.text)) is not None:  # in the request's words, not the tool's
        message = (
            f"memory_limit {record.memory_limit!r} is larger than this fleet's {ns} sandboxes may be "
            f"(at most {cap} MiB)"
        )
        raise RequestError(message, field)
