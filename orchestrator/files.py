"""Files (`/v1/files`): bytes on a volume, streamed in and out; metadata in the store; one owner each.

An upload is parsed as it arrives (python-multipart's push parser) and its file part written to a
`.part` file on the volume, so neither the body nor the file is ever held in memory; past
`--max-file-bytes` the upload stops with a 413 and the part is removed. Only a complete, valid upload
is renamed to its id and recorded. Another key's id answers the same 404 as a missing one.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import structlog
from python_multipart.exceptions import ParseError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header
from starlette.requests import Request
from starlette.responses import FileResponse

from orchestrator.errors import RequestError, StoreUnavailable
from orchestrator.persist import Objects

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

log = structlog.get_logger(__name__)

PURPOSES = ("assistants", "user_data")
"""What files are for here: input to code_interpreter and containers (Batch and fine-tuning do not exist)."""
EXPIRY_RANGE = (3600, 2_592_000)  # OpenAI's bounds on expires_after.seconds
FIELD_LIMIT = 4096  # a form field other than the file (purpose, expires_after[...])
WRITE_CHUNK = 1 << 20  # bytes gathered before one write in a worker thread
FIELDS = frozenset({"purpose", "expires_after[anchor]", "expires_after[seconds]"})


@dataclass
class FileRecord:
    id: str
    owner: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    expires_at: int  # the file's own `expires_after`, else the retention

    def body(self) -> dict[str, Any]:
        """The API's file object (`openai.types.FileObject`); `expires_at` is when it will be deleted."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
        }


def check_filename(name: str, param: str) -> str:
    """A file name that is one path component: it names a file in /mnt/data later, never a path."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or len(name.encode()) > 255:
        raise RequestError(f"invalid file name {name!r}: one path component, no '/', '..' or NUL", param)
    return name


@dataclass
class _Form:
    """The state of one multipart body while it streams: small fields kept, the file part spooled out."""

    limit: int
    allowed: frozenset[str]
    too_large: str
    fields: dict[str, str] = field(default_factory=dict)
    filename: str | None = None
    size: int = 0
    pending: list[bytes] = field(default_factory=list)
    pending_size: int = 0
    _header: bytes = b""
    _name: str | None = None
    _value: bytearray = field(default_factory=bytearray)
    _headers: dict[bytes, bytes] = field(default_factory=dict)
    _is_file: bool = False

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self._begin,
            "on_header_field": self._field,
            "on_header_value": self._hvalue,
            "on_headers_finished": self._headers_done,
            "on_part_data": self._data,
            "on_part_end": self._end,
        }

    def _begin(self) -> None:
        self._headers, self._value, self._header = {}, bytearray(), b""

    def _field(self, data: bytes, start: int, end: int) -> None:
        self._header = data[start:end].lower()

    def _hvalue(self, data: bytes, start: int, end: int) -> None:
        self._headers[self._header] = self._headers.get(self._header, b"") + data[start:end]

    def _headers_done(self) -> None:
        _, params = parse_options_header(self._headers.get(b"content-disposition", b""))
        self._name = params.get(b"name", b"").decode("utf-8", "replace")
        self._is_file = self._name == "file"
        if self._is_file:
            if self.filename is not None:
                raise RequestError("only one file may be uploaded per request", "file")
            self.filename = check_filename(params.get(b"filename", b"").decode("utf-8", "replace"), "file")
        elif self._name not in self.allowed:
            raise RequestError(f"unknown form field {self._name!r}", self._name or None)

    def _data(self, data: bytes, start: int, end: int) -> None:
        if not self._is_file:
            self._value += data[start:end]
            if len(self._value) > FIELD_LIMIT:
                raise RequestError(f"form field {self._name!r} is too long", self._name)
            return
        self.size += end - start
        if self.size > self.limit:
            raise RequestError(f"the file is larger than {self.too_large}", "file", 413)
        self.pending.append(data[start:end])
        self.pending_size += end - start

    def _end(self) -> None:
        if not self._is_file and self._name:
            self.fields[self._name] = self._value.decode("utf-8", "replace")

    def take(self) -> bytes:
        out = b"".join(self.pending)
        self.pending, self.pending_size = [], 0
        return out


def _expiry(form: _Form, now: int, retention_s: float) -> int:
    anchor, seconds = form.fields.get("expires_after[anchor]"), form.fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return now + int(retention_s)
    if anchor != "created_at":
        raise RequestError("expires_after.anchor must be 'created_at'", "expires_after.anchor")
    if not (seconds or "").isdigit() or not EXPIRY_RANGE[0] <= int(seconds or 0) <= EXPIRY_RANGE[1]:
        raise RequestError(f"expires_after.seconds must be an integer in {EXPIRY_RANGE}", "expires_after.seconds")
    return now + min(int(seconds or 0), int(retention_s))


def page(items: list[Any], *, limit: int, order: str, after: str | None, before: str | None = None) -> dict[str, Any]:
    """A cursor page (`first_id`, `last_id`, `has_more`) of objects in stored order: the first `limit` after
    `after`, or with `before` the `limit` just before it (an unknown cursor: an empty page)."""
    if order == "desc":
        items = items[::-1]
    ids = [i.id for i in items]
    start = ids.index(after) + 1 if after in ids else (0 if after is None else len(ids))
    end = ids.index(before) if before in ids else (len(ids) if before is None else 0)
    window = items[start:end]
    shown = window[-limit:] if before is not None else window[:limit]
    return {
        "object": "list",
        "data": [i.body() for i in shown],
        "first_id": shown[0].id if shown else None,
        "last_id": shown[-1].id if shown else None,
        "has_more": len(window) > limit,
    }


@contextlib.asynccontextmanager
async def receive_upload(
    request: Request, target: Path, limit: int, fields: frozenset[str], too_large: str | None = None
) -> AsyncIterator[_Form]:
    """Stream a multipart body's one `file` part to `target` and yield the form for the caller to record;
    a bad body, the size limit (`too_large` says which), or a failure in the caller's block removes the bytes
    again."""
    ctype, params = parse_options_header(request.headers.get("content-type", ""))
    if ctype != b"multipart/form-data" or not params.get(b"boundary"):
        raise RequestError("the request body must be multipart/form-data with a 'file' part", "file")
    part = target.with_name(f".part-{target.name}")
    form = _Form(limit, fields, too_large or f"this server's limit of {limit} bytes")
    try:
        parser = MultipartParser(params[b"boundary"], form.callbacks())
        async with await anyio.open_file(part, "xb") as out:
            async for chunk in request.stream():
                _parse(parser, chunk)
                if form.pending_size >= WRITE_CHUNK:
                    await out.write(form.take())
            _parse(parser, None)
            await out.write(form.take())
        if form.filename is None:
            raise RequestError("the upload has no 'file' part", "file")
        await anyio.Path(part).rename(target)
        yield form
    except BaseException:
        with anyio.CancelScope(shield=True):
            for leftover in (part, target):
                await anyio.Path(leftover).unlink(missing_ok=True)
        raise


def _parse(parser: MultipartParser, chunk: bytes | None) -> None:
    """Feed the parser (None: the end); a body that is not valid multipart, names a field in bytes that are
    not text, or stops before its closing boundary (a cut-off upload, whose file part may be any prefix of
    the file) is the caller's error (400), not ours."""
    try:
        parser.finalize() if chunk is None else parser.write(chunk)
    except RequestError:
        raise
    except (ParseError, UnicodeDecodeError) as exc:
        raise RequestError(f"the multipart body is malformed: {exc}", "file") from exc
    if chunk is None and parser.state != MultipartState.END:
        raise RequestError("the multipart body ends before its closing boundary: the upload is incomplete", "file")


class Files:
    """The files of every key: upload, look up (owner-checked), list, delete and expire."""

    def __init__(
        self, objects: Objects, directory: Path, *, max_bytes: int, retention_s: float, max_bytes_per_key: int = 0
    ) -> None:
        self.objects, self.directory, self.max_bytes, self.retention_s = objects, directory, max_bytes, retention_s
        self.max_bytes_per_key = max_bytes_per_key
        directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_settings(cls, objects: Objects, settings: OrchestratorSettings) -> Files:
        return cls(
            objects,
            Path(settings.files_dir),
            max_bytes=settings.max_file_bytes,
            retention_s=settings.file_retention_s,
            max_bytes_per_key=settings.max_file_bytes_per_key,
        )

    def path(self, file_id: str) -> Path:
        return self.directory / file_id

    async def upload(self, request: Request, owner: str) -> FileRecord:
        """Stream a multipart upload to the volume and record it; any failure leaves nothing behind."""
        file_id = "file-" + secrets.token_hex(16)
        limit, too_large = await self.room(owner)
        async with receive_upload(request, self.path(file_id), limit, FIELDS, too_large) as form:
            purpose = form.fields.get("purpose")
            if purpose not in PURPOSES:
                raise RequestError(f"purpose must be one of {', '.join(PURPOSES)} (got {purpose!r})", "purpose")
            now = int(time.time())
            expires = _expiry(form, now, self.retention_s)
            record = FileRecord(file_id, owner, form.filename or "", purpose, form.size, now, expires)
            await self.objects.put("file", asdict(record))
        log.info("file.uploaded", file_id=file_id, bytes=record.bytes, purpose=purpose)
        return record

    async def room(self, owner: str) -> tuple[int, str | None]:
        """What the key's next upload (a file, or a file into a container) may carry, and what to say past it:
        the file bound, or less where the key's files leave less of theirs (a key at its bound is refused before
        a byte is read). Replicas uploading for one key at the same moment each see the others' files only once
        recorded."""
        if not self.max_bytes_per_key:
            return self.max_bytes, None
        used = await self.held(owner)
        room = self.max_bytes_per_key - used
        bound = f"--max-file-bytes-per-key, {self.max_bytes_per_key} bytes, of which this key's files hold {used}"
        if room <= 0:
            raise RequestError(f"this key's files are at {bound}: delete some first", "file", 413)
        return (room, f"the {room} bytes left by {bound}") if room < self.max_bytes else (self.max_bytes, None)

    async def left(self, owner: str) -> int | None:
        """The bytes the key's files may still grow by under --max-file-bytes-per-key (None: no such bound)."""
        return self.max_bytes_per_key - await self.held(owner) if self.max_bytes_per_key else None

    async def held(self, owner: str) -> int:
        """The bytes of the key's files and of its containers' files (uploaded, copied in, or written by code:
        a copy counts again, though the volume may share its bytes by a hard link)."""
        total = sum(int(o["bytes"]) for o in await self.objects.owned("file", owner))
        for container in await self.objects.owned("container", owner):
            total += sum(int(o["bytes"]) for o in await self.objects.owned("container_file", container["id"]))
        return total

    async def find(self, file_id: str, owner: str) -> FileRecord:
        """The caller's file; another key's, a missing or an expired one: the same 404."""
        found = await self.objects.get("file", file_id)
        if found is None or found["owner"] != owner:
            raise RequestError(f"No such File object: {file_id}", "file_id", 404, "not_found")
        return FileRecord(**found)

    async def download(self, file_id: str, filename: str) -> FileResponse:
        """The bytes, streamed from the volume; a record whose bytes this replica cannot see is a 503 that says
        why (replicas sharing a Redis store must share `--files-dir` too)."""
        if not await anyio.Path(self.path(file_id)).is_file():
            log.error("file.bytes_missing", file_id=file_id, files_dir=str(self.directory))
            raise StoreUnavailable(f"the bytes of {file_id} are not on this replica's files volume")
        return FileResponse(self.path(file_id), media_type="application/octet-stream", filename=filename)

    async def delete(self, file_id: str, owner: str) -> None:
        await self.find(file_id, owner)
        await self.objects.delete("file", file_id)
        await anyio.Path(self.path(file_id)).unlink(missing_ok=True)

    async def page(
        self, owner: str, *, purpose: str | None, limit: int, order: str, after: str | None
    ) -> dict[str, Any]:
        """A cursor page of the caller's files, as the SDK's `files.list` pages through them."""
        records = [FileRecord(**o) for o in await self.objects.owned("file", owner)]
        return page([r for r in records if purpose in (None, r.purpose)], limit=limit, order=order, after=after)

    async def prune(self) -> None:
        """Delete the bytes of expired files (each claimed once across replicas) and stale `.part` files."""
        for file_id in await self.objects.take_expired("file"):
            await anyio.Path(self.path(file_id)).unlink(missing_ok=True)
            log.info("file.expired", file_id=file_id)
        stale = time.time() - 6 * 3600  # an upload in progress that long ago has died with its replica
        async for entry in anyio.Path(self.directory).glob(".part-*"):
            with contextlib.suppress(FileNotFoundError):
                if (await entry.stat()).st_mtime < stale:
                    await entry.unlink(missing_ok=True)
