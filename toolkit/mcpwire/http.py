"""A small keep-alive HTTP/1.1 client for MCP calls: the gateway's hot path, and the orchestrator's tool calls
and its streams from the model workers.

httpx costs about half a millisecond per request in Python overhead; a tool call through the
gateway has a budget of one millisecond in all. This client does only what an MCP upstream
needs: one request at a time per pooled connection, `content-length` or chunked bodies,
streaming reads, and timeouts from `asyncio.timeout`. Failures surface as `OSError`,
`TimeoutError` or `ProtocolError`; each user maps them where they enter (the gateway: `upstream_errors`).

Every request head is checked against RFC 9110's grammar before a byte of it is written: a method
that is not a token, or a header name or value with CR, LF, NUL or another control character, is
refused (`InvalidHeader`), whoever built it. Header values are relayed from clients and, on legacy
SSE, derived from message bodies; a CRLF in one would end the head early and smuggle a request of
the caller's choosing onto a pooled connection that the next caller reads its answer from.

A pooled connection idle longer than `idle_s` is closed rather than reused: uvicorn closes idle
keep-alive connections after 5 s, and one closed by the upstream while a request is being written
would fail that request. A request that a reused connection ends without a byte of answer (the upstream
closed it before reading it: the keep-alive race) is sent once more on a new connection.
"""

from __future__ import annotations

import asyncio
import functools
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import overload
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024
READ_SIZE = 64 * 1024


_Key = tuple[str, str, int, str | None]
"""(scheme, host, port, address): one pool of idle connections per upstream origin and the address it is
pinned to (None: the host, resolved when a connection is made)."""


class ProtocolError(Exception):
    """The upstream broke HTTP/1.1 (or closed the connection mid-response)."""


class ClosedUnanswered(Exception):
    """A new connection the upstream closed before any answer: it may have died, or only shed load. `reset`:
    it reset the connection (a stopping server resets those it accepted but never read) rather than closing it."""

    def __init__(self, *, reset: bool = False) -> None:
        super().__init__("reset" if reset else "closed")
        self.reset = reset


class ConnectFailed(Exception):
    """No connection could be made (refused, unreachable, or the connect timed out)."""


class InvalidHeader(ValueError):
    """A request method, header name or header value outside RFC 9110's grammar: refused, nothing written."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        """The header at fault (None: the method)."""


_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
"""RFC 9110 5.6.2 `token`: a method or a field name."""
_TOKEN_RE = re.compile(_TOKEN)
_VALUE = r"[\t\x20-\x7e\x80-\xff]*"
"""RFC 9110 5.5 `field-value` as bytes may carry it: visible ASCII, SP, HTAB and obs-text; no CR, LF, NUL
or other control character (and no character above U+00FF, which latin-1 could not write)."""
_VALUE_RE = re.compile(_VALUE)
_TARGET = re.compile(r"[\x21-\x7e]+")
"""A request target: visible ASCII only."""
_FIELD_LINES = re.compile(f"(?:{_TOKEN}:[ ]{_VALUE}\r\n)*")
"""A whole block of `name: value` lines, checked in one match per request (the hot path), with a count of its
line ends: a value holding CRLF would otherwise pass as two good lines."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float | None = 2.0
    read: float | None = 600.0


class Headers:
    """Response headers: `get` by lowercase name, `raw` as received (lowercased names)."""

    __slots__ = ("_map", "raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self.raw = raw
        self._map = dict(raw)
        """Kept as bytes: a response is asked for a handful of its headers, decoded as they are asked for."""

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    def get(self, name: str, default: str | None = None) -> str | None:
        value = self._map.get(name.encode("latin-1"))
        return default if value is None else value.decode("latin-1")

    def __getitem__(self, name: str) -> str:
        return self._map[name.encode("latin-1")].decode("latin-1")


class _Conn:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0
        """When it went back to the pool (monotonic clock)."""

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing() and not self.reader._buffer  # type: ignore[attr-defined]

    def close(self) -> None:
        self.writer.close()


class Response:
    """A response whose body is read on demand; `aclose` returns a fully read connection to the pool."""

    def __init__(
        self,
        pool: Pool,
        key: _Key,
        conn: _Conn,
        status: int,
        headers: Headers,
        read_s: float | None,
        head_only: bool,
    ) -> None:
        self._pool, self._key, self._conn = pool, key, conn
        self.status_code = status
        self.headers = headers
        self._read_s = read_s
        self._done = head_only or status in (204, 304)
        te = (headers.get("transfer-encoding") or "").lower()
        length = headers.get("content-length")
        self._chunked = "chunked" in te
        self._left = int(length) if length is not None and length.isdigit() else None
        if not self._chunked and self._left is None and not self._done:
            self._left = -1  # read to EOF; the connection cannot be reused
        if self._left == 0:
            self._done = True
        self._reusable = (headers.get("connection") or "").lower() != "close" and self._left != -1

    @property
    def complete(self) -> bool:
        """The whole body has been read."""
        return self._done

    async def _read(self, coro: Awaitable[bytes]) -> bytes:
        async with asyncio.timeout(self._read_s):
            return await coro

    async def _line(self, reader: asyncio.StreamReader) -> bytes:
        """One line; a line already received needs no timer (most chunk heads arrive with their data)."""
        if b"\n" in reader._buffer:  # type: ignore[attr-defined]
            return await reader.readline()
        return await self._read(reader.readline())

    async def _exactly(self, reader: asyncio.StreamReader, n: int) -> bytes:
        if len(reader._buffer) >= n:  # type: ignore[attr-defined]
            return await reader.readexactly(n)
        return await self._read(reader.readexactly(n))

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        reader = self._conn.reader
        try:
            while not self._done:
                if self._chunked:
                    line = await self._line(reader)
                    if not line.endswith(b"\n"):
                        raise ProtocolError("connection closed inside a chunked body")
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while (await self._line(reader)) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        self._done = True
                        return
                    data = await self._exactly(reader, size + 2)
                    yield data[:-2]
                elif self._left == -1:
                    data = await self._read(reader.read(READ_SIZE))
                    if not data:
                        self._done = True
                        return
                    yield data
                else:
                    want = min(READ_SIZE, self._left or 0)
                    # a body already received needs no timer (a small answer arrives with its head)
                    data = await (reader.read(want) if reader._buffer else self._read(reader.read(want)))  # type: ignore[attr-defined]
                    if not data:
                        raise ProtocolError("connection closed before the body ended")
                    self._left = (self._left or 0) - len(data)
                    self._done = self._left <= 0
                    yield data
        except asyncio.IncompleteReadError as exc:
            raise ProtocolError("connection closed inside the body") from exc
        except ValueError as exc:
            raise ProtocolError(f"bad chunk framing: {exc}") from exc

    async def aread(self, limit: int = 64 * 1024 * 1024) -> bytes:
        reader, left = self._conn.reader, self._left
        if not self._done and not self._chunked and left is not None and 0 < left <= len(reader._buffer):  # type: ignore[attr-defined]
            if left > limit:
                raise ProtocolError(f"response body exceeds {limit} bytes")
            self._left, self._done = 0, True  # a body that came with its head (a JSON answer) is taken whole
            return await reader.readexactly(left)
        parts: list[bytes] = []
        size = 0
        async for part in self.aiter_bytes():
            size += len(part)
            if size > limit:
                raise ProtocolError(f"response body exceeds {limit} bytes")
            parts.append(part)
        return b"".join(parts)

    async def finish(self, *, within_s: float) -> None:
        """Read the rest of a body nobody needs (the end of a stream whose answer was relayed), so the
        connection goes back to the pool; one that does not end in time, or breaks, is closed by `aclose`."""
        try:
            async with asyncio.timeout(within_s):
                async for _ in self.aiter_bytes():
                    pass
        except (TimeoutError, OSError, ProtocolError):
            self._reusable = False

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is None:
            return
        if self._done and self._reusable:
            self._pool.release(self._key, conn)
        else:
            conn.close()


class Pool:
    """Idle keep-alive connections per (host, port), each reused only within `idle_s` of its last answer."""

    def __init__(self, *, max_idle: int = 64, idle_s: float = 4.0, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        """Made on the first https connection: loading the system's CA store takes ~20 ms, blocking the loop."""
        self._idle: dict[_Key, list[_Conn]] = {}
        self._max_idle = max_idle
        self._idle_s = idle_s

    def release(self, key: _Key, conn: _Conn) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) < self._max_idle and conn.usable():
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()

    def _reusable(self, key: _Key) -> _Conn | None:
        """The most recently used idle connection to `key` that is still open and fresh enough; those idle past
        `idle_s` are closed: they are the oldest (the list is in release order), so the scan stops at the first."""
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest = time.monotonic() - self._idle_s
        stale = 0
        while stale < len(idle) and idle[stale].idle_since < oldest:
            idle[stale].close()
            stale += 1
        del idle[:stale]
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    async def _connect(self, key: _Key, timeouts: Timeouts) -> _Conn:
        try:
            async with asyncio.timeout(timeouts.connect):
                if key[0] == "https" and self._tls is None:
                    self._tls = ssl.create_default_context()
                tls = self._tls if key[0] == "https" else None
                reader, writer = await asyncio.open_connection(
                    key[3] or key[1], key[2], limit=MAX_HEAD, ssl=tls, server_hostname=key[1] if tls else None
                )
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
        _bound_unacknowledged(writer)
        return _Conn(reader, writer)

    async def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeouts: Timeouts,
        *,
        address: str | None = None,
        retried: Callable[[ClosedUnanswered], None] | None = None,
    ) -> Response:
        """Send one request; `address`: connect to that IP only (an address checked against SSRF, so DNS cannot
        move the server afterwards), with the URL's host still in `Host` and TLS SNI. `retried`: told when a
        reused connection closed unanswered and the request goes out again on a new one (for a caller that
        counts those)."""
        key, target, host = _origin(url)
        if address is not None:
            key = (key[0], key[1], key[2], address)
        head = _head(method, target, host, headers, body)
        conn = self._reusable(key)
        if conn is not None:
            try:
                return await self._exchange(key, conn, head, body, method, timeouts)
            except (ConnectionError, _StaleConnection) as exc:
                conn.close()
                if conn.reader._buffer:  # type: ignore[attr-defined]
                    raise ProtocolError("connection broken inside the response head") from None
                # no byte of answer: the upstream closed it before reading the request, so once more on a new one
                if retried is not None:
                    retried(ClosedUnanswered(reset=isinstance(exc, ConnectionError)))
            except BaseException:  # a timeout or a cancel inside the exchange: its answer may still come
                conn.close()
                raise
        conn = await self._connect(key, timeouts)
        try:
            return await self._exchange(key, conn, head, body, method, timeouts)
        except (ConnectionError, _StaleConnection) as exc:
            conn.close()
            if conn.reader._buffer:  # type: ignore[attr-defined]
                raise ProtocolError("connection broken inside the response head") from None
            raise ClosedUnanswered(reset=isinstance(exc, ConnectionError)) from exc
        except BaseException:
            conn.close()
            raise

    async def _exchange(
        self, key: _Key, conn: _Conn, head: bytes, body: bytes | None, method: str, timeouts: Timeouts
    ) -> Response:
        conn.writer.write(head + body if body else head)
        if timeouts.read is None:  # bounded by the caller (the orchestrator's call timeout): no timer of its own
            raw = await _response_head(conn)
        else:
            async with asyncio.timeout(timeouts.read):
                raw = await _response_head(conn)
        status, headers = _parse_head(raw)
        if status == 100:
            return await self._exchange(key, conn, b"", None, method, timeouts)
        return Response(self, key, conn, status, headers, timeouts.read, method == "HEAD")

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


UNACKNOWLEDGED_MS = 20_000
"""How long bytes sent on a connection may go unacknowledged before the kernel drops it (`TCP_USER_TIMEOUT`).
A peer whose machine is gone sends no reset: a request written on a pooled connection to it would otherwise
wait out the whole call timeout. A slow server is not affected (its kernel acknowledges what it has not read)."""


def _bound_unacknowledged(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    option = getattr(socket, "TCP_USER_TIMEOUT", None)  # Linux
    if option is not None and sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, option, UNACKNOWLEDGED_MS)


async def _response_head(conn: _Conn) -> bytes:
    """The request sent, the answer's head (up to its blank line). The kernel's ETIMEDOUT (the request went
    unacknowledged, `UNACKNOWLEDGED_MS`) is a broken connection: the peer never read it, so it may go again."""
    try:
        await conn.writer.drain()
        return await conn.reader.readuntil(b"\r\n\r\n")
    except TimeoutError as exc:  # only the socket's: a caller's deadline arrives here as a cancellation
        raise ConnectionAbortedError(f"the upstream acknowledged nothing for {UNACKNOWLEDGED_MS} ms") from exc
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise _StaleConnection from exc
        raise ProtocolError("connection closed inside the response head") from exc
    except asyncio.LimitOverrunError as exc:
        raise ProtocolError("response head too large") from exc


def _head(method: str, target: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request head, checked in one match before it is encoded: nothing is written unless it holds."""
    fields = f"host: {host}\r\n" + "".join([f"{k}: {v}\r\n" for k, v in headers.items()])
    # every line valid, and as many lines as headers: a CRLF inside a value would make two valid-looking lines
    if not _FIELD_LINES.fullmatch(fields) or fields.count("\n") != len(headers) + 1 or not _TOKEN_RE.fullmatch(method):
        raise _refusal(method, headers)
    if body is not None or method in ("POST", "PUT"):
        fields += f"content-length: {len(body or b'')}\r\n"
    return f"{method} {target} HTTP/1.1\r\n{fields}\r\n".encode("latin-1")


def _refusal(method: str, headers: dict[str, str]) -> InvalidHeader:
    """Which part of a refused head is at fault (off the hot path: only a refused head gets here)."""
    if not _TOKEN_RE.fullmatch(method):
        return InvalidHeader(f"request method {method!r} is not an RFC 9110 token")
    for name, value in headers.items():
        if not _TOKEN_RE.fullmatch(name):
            return InvalidHeader(f"header name {name!r} is not an RFC 9110 token", name)
        if not _VALUE_RE.fullmatch(value):
            return InvalidHeader(f"header {name!r} has a character not allowed in an HTTP field value", name)
    return InvalidHeader("the upstream URL's host is not a valid Host header")


@functools.lru_cache(maxsize=1024)
def _origin(url: str) -> tuple[_Key, str, str]:
    """(pool key, request target, Host header) of an upstream URL; parsed once per URL, not per request."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProtocolError(f"upstreams are http:// or https:// URLs, not {url!r}")
    key = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), None)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not _TARGET.fullmatch(target):
        raise ProtocolError(f"upstream URL {url!r} has a path that is not a valid request target")
    return key, target, parts.netloc.rpartition("@")[2]


class _StaleConnection(Exception):
    """A pooled connection the upstream had closed; the request is retried on a new one."""


_HEADER_LINE = re.compile(rb"([^:\r\n]*):([^\r\n]*)\r\n")
"""One `name: value` line, matched all at once, not line by line; the whitespace around the name and the value
is stripped after (lazy quantifiers stripping it in the pattern made the match 3x slower)."""


def _parse_head(raw: bytes) -> tuple[int, Headers]:
    """Status and headers of a response head (`raw` ends with its blank line)."""
    end = raw.find(b"\r\n")
    status_line = raw[:end].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1.") or not status_line[1].isdigit():
        raise ProtocolError(f"not an HTTP/1.1 response: {raw[:end][:80]!r}")
    pairs = _HEADER_LINE.findall(raw, end + 2)
    if len(pairs) != raw.count(b"\r\n") - 2:  # every line but the status line and the blank one is a header
        raise ProtocolError("malformed response header")
    headers = [(name.strip(b" \t").lower(), value.strip(b" \t")) for name, value in pairs]
    return int(status_line[1]), Headers(headers)
