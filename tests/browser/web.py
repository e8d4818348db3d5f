"""A small web for the browser's tests, served on 127.0.0.1: pages, links, redirects, slow and broken answers."""

from __future__ import annotations

import gzip
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

LONG_WORDS = " ".join(f"word{i}" for i in range(400))
TEA = """<!doctype html><html><head><title>Tea facts</title><script>var hidden = "script text";</script>
<style>body { color: red }</style></head><body>
<h1>Tea</h1>
<p>Tea is a drink made from leaves. Green tea comes from China. See <a href="/coffee">coffee † beans</a>
or the <a href="https://en.wikipedia.org/wiki/Tea">encyclopedia</a>.</p>
<p>Brackets 【like these】 are text, not links. <img src="cup.png" alt="a cup of tea"></p>
<ul><li>Black tea is oxidised.</li><li>White tea is young.</li></ul>
<p>{long}</p>
<p>The phrase at the end is quite particular.</p>
</body></html>""".replace("{long}", LONG_WORDS)
COFFEE = (
    "<html><head><title>Coffee facts</title></head><body><p>Coffee is brewed. <a href='/tea'>Tea</a></p></body></html>"
)


async def page(request: Request) -> Response:
    name = request.path_params["name"]
    return (
        HTMLResponse({"tea": TEA, "coffee": COFFEE}[name]) if name in ("tea", "coffee") else Response(status_code=404)
    )


async def chain(request: Request) -> Response:
    n = int(request.path_params["n"])
    return RedirectResponse("/tea" if n == 0 else f"/chain/{n - 1}", status_code=302)


async def loop(request: Request) -> Response:
    return RedirectResponse("/loop", status_code=301)


async def to(request: Request) -> Response:
    """A redirect to any URL (the SSRF cases: an allowed site sending the browser somewhere else)."""
    return RedirectResponse(request.query_params["url"], status_code=302)


async def slow(request: Request) -> Response:
    """A body that drips one byte every half second, forever: only a total time limit ends it."""

    async def drip():
        yield b"<html><body>"
        while True:
            await anyio.sleep(0.5)
            yield b"x"

    return StreamingResponse(drip(), media_type="text/html")


async def bomb(request: Request) -> Response:
    """A few KiB of gzip that expand to 64 MiB."""
    body = gzip.compress(b"a" * (64 * 1024 * 1024), compresslevel=9)
    return Response(body, media_type="text/plain", headers={"content-encoding": "gzip"})


async def huge(request: Request) -> Response:
    return PlainTextResponse("line of text\n" * (6 * 1024 * 1024 // 13))


async def latin1(request: Request) -> Response:
    html = '<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head><body><p>cr\xe8me br\xfbl\xe9e</p>'
    return Response(html.encode("latin-1"), media_type="text/html")


async def cp1252(request: Request) -> Response:
    """Windows-1252 HTML that declares no charset anywhere (what a browser decodes as windows-1252)."""
    html = "<html><head><title>Caf\xe9 menu</title></head><body><p>cr\xe8me br\xfbl\xe9e € 5</p></body></html>"
    return Response(html.encode("cp1252"), headers={"content-type": "text/html"})


async def utf16(request: Request) -> Response:
    return Response("\ufeffÜber Tee: grün, schwarz".encode("utf-16-le"), headers={"content-type": "text/plain"})


async def binary(request: Request) -> Response:
    return Response(bytes(range(256)) * 10, media_type="application/octet-stream")


async def nul_text(request: Request) -> Response:
    return Response(b"\x00\x01\x02 not text", media_type="text/plain")


async def lines(request: Request) -> Response:
    """A plain-text page of `n` numbered lines (the find benchmark's 10,000-line page)."""
    n = int(request.path_params["n"])
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog {i % 97}\n" for i in range(n))
    return PlainTextResponse(text)


async def broken(request: Request) -> Response:
    return PlainTextResponse("server error", status_code=500)


def web_app() -> Starlette:
    return Starlette(
        routes=[
            Route("/chain/{n:int}", chain),
            Route("/loop", loop),
            Route("/to", to),
            Route("/slow", slow),
            Route("/bomb", bomb),
            Route("/huge", huge),
            Route("/latin1", latin1),
            Route("/binary", binary),
            Route("/cp1252", cp1252),
            Route("/utf16", utf16),
            Route("/nul", nul_text),
            Route("/broken", broken),
            Route("/lines/{n:int}", lines),
            Route("/{name}", page),
        ]
    )


CORPUS = {
    "guide/tea.html": "<html><head><title>Corpus tea guide</title></head><body><h1>Tea guide</h1>"
    "<p>Oolong tea is partly oxidised. Read <a href='../notes/kettle.md'>the kettle notes</a>.</p></body></html>",
    "notes/kettle.md": "# Kettle notes\n\nBoil water to 95 degrees for oolong.\n",
    "notes/plain.txt": "Plain text about samovars and water.\n",
    "ignored.bin": "not a document",
}


def write_corpus(root: Path) -> Path:
    """The small test corpus (HTML, Markdown, text, and a file that is none of them) under `root`."""
    for rel, text in CORPUS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def browser_args(web: str, corpus: Path, index: Path, *extra: str) -> list[str]:
    """`python -m tools.browser` flags for a server over the test corpus that may fetch the fixture web."""
    host = web.removeprefix("http://")
    return [
        "-m",
        "tools.browser",
        "--corpus-dir",
        str(corpus),
        "--index-dir",
        str(index),
        "--ssrf-exempt-hosts",
        host,
        "--fetch-timeout-s",
        "3",
        *extra,
    ]
