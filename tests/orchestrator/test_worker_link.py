"""The worker client's HTTP (`_Link`, on the kit's keep-alive pool): one connection serves generation after
generation, vLLM's stream framing is read whatever its chunking, a proxy the environment names is refused, and
an https worker is checked against the CA store (as httpx, the transport before, did)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestrator.worker.client import GenerateRequest, WorkerError, WorkerPool, WorkerUnavailable, sse_objects
from orchestrator.worker.scripted import Scenario, ScriptedModel
from orchestrator.worker.scripted import build_app as build_worker
from tests.support.asgi import serve_asgi


class Counted(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, counting the connections the worker accepted."""

    made: ClassVar[int] = 0

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        type(self).made += 1
        super().connection_made(transport)


@pytest.fixture(scope="module")
def worker() -> Iterator[tuple[str, ScriptedModel]]:
    model = ScriptedModel(Scenario())
    with serve_asgi(build_worker(model), http=Counted) as url:
        yield url, model


async def test_generations_one_after_another_share_one_connection(worker) -> None:
    """Each stream is read past `[DONE]` to its end, so its connection goes back to the pool for the next."""
    url, model = worker
    pool = WorkerPool([url], health_interval_s=3600)
    try:
        await pool.check_health()
        made = Counted.made
        for _ in range(5):
            chunks = [c async for c in pool.generate(GenerateRequest([1, 2, 3], 8))]
            assert chunks[-1].prompt_tokens == 3 and any(c.token_ids for c in chunks)
        assert Counted.made - made <= 1  # the check's connection, or one new one, serves all five
        assert model.stats.completed >= 5
    finally:
        await pool.aclose()


async def _chunked(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
        await asyncio.sleep(0)


async def test_the_stream_framing_is_read_whatever_the_chunks_cut() -> None:
    body = b'data: {"choices": [{"text": "a"}]}\r\n\r\ndata: {"choices": [{"text": "b"}]}\n\ndata: [DONE]\n\n'
    whole = [o async for o in sse_objects(_chunked(body))]
    split = [o async for o in sse_objects(_chunked(*(body[i : i + 3] for i in range(0, len(body), 3))))]
    assert whole == split == [{"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]}]


@pytest.mark.parametrize(
    ("line", "says"),
    [
        (b"data: {not json\n\n", "worker sent a malformed stream chunk: '{not json'"),
        (b"data: \xff\n\n", "worker sent a malformed stream chunk: '\ufffd'"),
        (b"data: [1]\n\n", "worker sent a stream chunk that is not an object: '[1]'"),
    ],
)
async def test_a_broken_stream_chunk_is_a_worker_error_naming_it(line: bytes, says: str) -> None:
    with pytest.raises(WorkerError) as err:
        async for _ in sse_objects(_chunked(line)):
            pass
    assert str(err.value) == says


def test_a_proxy_the_environment_names_for_a_worker_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx, the transport before, sent workers' requests through it; the pool connects directly, so it says so."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    with pytest.raises(ValueError, match=r"worker http://127.0.0.1:8000 would go through the proxy .*NO_PROXY"):
        WorkerPool(["http://127.0.0.1:8000"])
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    WorkerPool(["http://127.0.0.1:8000"])  # bypassed: direct, as asked


@pytest.fixture
def tls_worker(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The stand-in over https, with a self-signed certificate for 127.0.0.1 made by the openssl CLI."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = ["-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    named = ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)]
    subprocess.run(["openssl", "req", *made, *named], check=True, capture_output=True)
    with serve_asgi(build_worker(ScriptedModel(Scenario())), ssl_certfile=str(cert), ssl_keyfile=str(key)) as url:
        yield url.replace("http://", "https://"), cert


async def test_an_https_worker_is_served_when_its_certificate_is_trusted_and_refused_when_not(
    tls_worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = tls_worker
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the CA store the pool's TLS context loads
    trusted = WorkerPool([url], health_interval_s=3600)
    try:
        assert [c async for c in trusted.generate(GenerateRequest([1, 2, 3], 8))]
    finally:
        await trusted.aclose()
    monkeypatch.delenv("SSL_CERT_FILE")
    untrusted = WorkerPool([url], health_interval_s=3600, api="harmony")
    try:
        with pytest.raises(WorkerUnavailable, match="ConnectFailed: SSLCertVerificationError"):
            async for _ in untrusted.generate(GenerateRequest([1, 2, 3], 8)):
                pass
    finally:
        await untrusted.aclose()
