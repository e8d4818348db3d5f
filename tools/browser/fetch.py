"""Direct HTTP page fetch behind the SSRF guard, with size, time, redirect and decompression limits.

Each hop resolves the host once (toolkit.netguard), refuses non-public addresses unless the host is
allowlisted, and connects to the checked address itself (the URL names the IP; Host and TLS SNI
name the host), so a second DNS answer can never steer the connection. Redirects are followed by
hand, each target checked again: by the guard, and against the domains the request allows (a page inside
them cannot send the browser outside). The whole fetch, slow body drip included, ends at the time limit.
"""

from __future__ import annotations

import codecs
import re
import zlib
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import anyio
import charset_normalizer
import httpx
from opentelemetry.trace import SpanKind

from toolkit.netguard import AddressRefused, resolve_checked
from toolkit.tracing import span
from tools.browser.backends.web import in_domains

TEXT_TYPES = (
    "text/html",
    "application/xhtml+xml",
    "text/plain",
    "text/markdown",
    "text/x-markdown",
    "application/json",
    "text/xml",
    "application/xml",
    "text/csv",
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_.:-]+)""", re.I)
_REDIRECTS = (301, 302, 303, 307, 308)


class FetchError(Exception):
    """A page could not be fetched; the message tells the model why, in words it can act on."""


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int = 5 * 1024 * 1024
    timeout_s: float = 10.0
    max_redirects: int = 5


@dataclass(frozen=True)
class Fetched:
    url: str
    content_type: str
    text: str


def _allowed(host: str, port: int, allowlist: frozenset[str]) -> bool:
    return host in allowlist or f"{host}:{port}" in allowlist


def _target(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise FetchError(f"cannot open {url!r}: only http and https URLs can be fetched")
    if not parts.hostname:
        raise FetchError(f"cannot open {url!r}: the URL names no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise FetchError(f"cannot open {url!r}: bad port") from exc
    return parts.scheme, parts.hostname, port


def _redirect(source: str, target: str, domains: tuple[str, ...]) -> str:
    """`target`, where `source` redirects, when it is inside the request's domains (the guard checks it next)."""
    if not in_domains(target, domains):
        host = urlsplit(target).hostname or target
        raise FetchError(
            f"{source} redirected to {target}; refused: {host} is outside the domains this request allows "
            f"({', '.join(domains)})"
        )
    return target


class _Body:
    """Decodes Content-Encoding by hand, so a small compressed body cannot expand past the size limit."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        if encoding in ("", "identity"):
            self._z = None
        elif encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
        else:
            raise FetchError(f"the server sent an unsupported content encoding {encoding!r}")

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise FetchError(f"the page is larger than the {self.limit // (1024 * 1024)} MiB limit")
        self.chunks.append(data)

    def feed(self, raw: bytes) -> None:
        if self._z is None:
            self._add(raw)
            return
        try:
            data = self._z.decompress(raw, self.limit - self.size + 1)
            self._add(data)
            while self._z.unconsumed_tail:
                self._add(self._z.decompress(self._z.unconsumed_tail, self.limit - self.size + 1))
        except zlib.error as exc:
            raise FetchError(f"the page's compressed body is corrupt ({exc})") from exc

    def bytes(self) -> bytes:
        return b"".join(self.chunks)


def decode_text(body: bytes, content_type: str) -> str:
    """The body as text: the declared charset, an HTML meta charset, a BOM, UTF-8; then for HTML the
    web's default windows-1252 (as browsers do), for other text charset detection."""
    declared = re.search(r"charset=([\w.:-]+)", content_type, re.I)
    names = [declared.group(1)] if declared else []
    if "html" in content_type and (meta := _META_CHARSET.search(body[:4096])):
        names.append(meta.group(1).decode("ascii"))
    for name in names:
        try:
            return body.decode(name)
        except (LookupError, UnicodeDecodeError):
            continue
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if body.startswith(bom):
            return body.decode(name, errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        if "html" in content_type:
            return body.decode("cp1252", errors="replace")
        best = charset_normalizer.from_bytes(body).best()
        return str(best) if best is not None else body.decode("utf-8", errors="replace")


class Fetcher:
    def __init__(self, limits: FetchLimits, allowlist: list[str], *, user_agent: str = "toolfleet-browser") -> None:
        self.limits = limits
        self.allowlist = frozenset(a.lower() for a in allowlist)
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            timeout=httpx.Timeout(limits.timeout_s),
            headers={"user-agent": user_agent, "accept-encoding": "gzip, deflate", "accept": "text/html,*/*;q=0.5"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str, domains: tuple[str, ...] = ()) -> Fetched:
        """The page at `url`, following redirects only within `domains` (empty: any domain)."""
        try:
            with span("browser.fetch", kind=SpanKind.CLIENT, url=url), anyio.fail_after(self.limits.timeout_s):
                return await self._follow(url, domains)
        except TimeoutError as exc:
            raise FetchError(f"{url} did not answer within {self.limits.timeout_s:g} s") from exc

    async def _follow(self, url: str, domains: tuple[str, ...]) -> Fetched:
        for _ in range(self.limits.max_redirects + 1):
            request = await self._pinned(url)
            try:
                response = await self._client.send(request, stream=True)
            except httpx.HTTPError as exc:
                raise FetchError(f"cannot reach {url}: {exc or type(exc).__name__}") from exc
            try:
                if response.status_code in _REDIRECTS and (location := response.headers.get("location")):
                    url = _redirect(url, urljoin(url, location), domains)
                    continue
                return await self._read(url, response)
            except httpx.HTTPError as exc:
                raise FetchError(f"reading {url} failed: {exc or type(exc).__name__}") from exc
            finally:
                await response.aclose()
        raise FetchError(f"too many redirects (more than {self.limits.max_redirects})")

    async def _pinned(self, url: str) -> httpx.Request:
        """The request for `url`, addressed to the IP the guard checked (Host and SNI keep the name)."""
        scheme, host, port = _target(url)
        parts = urlsplit(url)
        if _allowed(host, port, self.allowlist):
            return self._client.build_request("GET", url)
        try:
            address = str(await resolve_checked(host, port))
        except AddressRefused as exc:
            raise FetchError(f"refused to open {url}: {exc}") from exc
        netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        pinned = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
        host_header = host if parts.port is None else f"{host}:{port}"
        return self._client.build_request(
            "GET", pinned, headers={"host": host_header}, extensions={"sni_hostname": host}
        )

    async def _read(self, url: str, response: httpx.Response) -> Fetched:
        if response.status_code >= 400:
            raise FetchError(f"{url} answered HTTP {response.status_code}")
        content_type = response.headers.get("content-type", "text/html").lower()
        kind = content_type.split(";")[0].strip()
        if kind == "application/pdf":
            raise FetchError(f"{url} is a PDF; this browser does not read PDF files")
        if kind not in TEXT_TYPES:
            raise FetchError(f"{url} is {kind or 'of unknown type'}, not a page this browser can show")
        body = _Body(response.headers.get("content-encoding", "").strip().lower(), self.limits.max_bytes)
        async for raw in response.aiter_raw():
            body.feed(raw)
        data = body.bytes()
        wide = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or "utf-16" in content_type
        if b"\x00" in data[:8192] and not wide:
            raise FetchError(f"{url} sent binary data, not text")
        return Fetched(url=url, content_type=kind, text=decode_text(data, content_type))
