"""An `openai` embedding service that is down, too slow, or answers what are not the model's vectors: each file
fails with a `last_error` that says which (a `server_error`: the fleet's side broke, not the file), is not half
indexed, and the server goes on to the next. The file_search server (a subprocess) embeds through a real HTTP
server on loopback that this module runs and misbehaves on purpose; the calls come through a real gateway and an
orchestrator, read with the `openai` SDK."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.file_search.test_vector_stores_api import client, orchestrator, settled  # noqa: F401
from tests.support.asgi import free_port, serve_asgi
from tests.support.service import Service, running_service


def vectors(count: int, width: int, value: float = 1.0) -> JSONResponse:
    return JSONResponse({"data": [{"index": i, "embedding": [value] * width} for i in range(count)]})


async def never_answers(request: Request) -> Response:
    """Holds the request until its client gives up (the file_search server's own timeout): the body was read, so
    the next message the server receives is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    return Response(status_code=499)


BROKEN: dict[str, Any] = {
    "not JSON": lambda n: PlainTextResponse("<html>busy</html>"),
    "an error status": lambda n: JSONResponse({"error": {"message": "model overloaded"}}, status_code=503),
    "too few vectors": lambda n: vectors(n - 1, 384),
    "vectors of another width": lambda n: vectors(n, 3),
    "zero vectors": lambda n: vectors(n, 384, 0.0),
}
SAYS = {
    "not JSON": "answered no embeddings list",
    "an error status": 'answered 503: {"error":{"message":"model overloaded"}}',
    "too few vectors": "answered 0 vectors for 1 texts",
    "vectors of another width": "answered vectors of width [3], not the model's 384",
    "zero vectors": "answered a zero or non-finite vector",
}


def embeddings_app(how: str) -> Starlette:
    async def embeddings(request: Request) -> Response:
        texts = (await request.json())["input"]
        return await never_answers(request) if how == "slow" else BROKEN[how](len(texts))

    return Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"])])


@pytest.fixture(scope="module")
def port() -> int:
    """Where the embedding service is said to be: nothing listens there but inside a test that serves it."""
    return free_port()


@pytest.fixture(scope="module")
def file_search(model_dir: Path, data_dir: Path, port: int) -> Iterator[Service]:
    """The server told to embed at `port`, giving up on an answer after 1 s (overrides conftest's local one)."""
    args = ["-m", "tools.file_search", "--data-dir", str(data_dir), "--model-dir", str(model_dir), "--drain-s", "0"]
    args += ["--embedder", "openai", "--embeddings-url", f"http://127.0.0.1:{port}/v1", "--embeddings-timeout-s", "1"]
    with running_service(args) as svc:
        yield svc


def failed_with(url: str, name: str) -> dict[str, str]:
    """Index one file into a new store; the file's `last_error` once it settled, after checking nothing of it
    is searchable."""
    sdk = client(url)
    upload = sdk.files.create(file=(name, b"Sea otters hold hands while they sleep."), purpose="assistants")
    store = sdk.vector_stores.create(name=name, file_ids=[upload.id])
    done = settled(sdk, store.id, upload.id)
    assert done.status == "failed" and done.last_error is not None, done
    counts = sdk.vector_stores.retrieve(store.id).file_counts
    assert (counts.failed, counts.completed, counts.in_progress) == (1, 0, 0)
    return {"code": done.last_error.code, "message": done.last_error.message}


def test_a_service_that_is_down_fails_the_file(orchestrator: str, port: int) -> None:  # noqa: F811
    error = failed_with(orchestrator, "down.txt")
    assert error["code"] == "server_error", error
    assert f"embedding service http://127.0.0.1:{port}/v1/embeddings unreachable: ConnectError" in error["message"]


@pytest.mark.parametrize("how", ["slow", *BROKEN])
def test_a_service_answering_badly_fails_the_file_saying_how(orchestrator: str, port: int, how: str) -> None:  # noqa: F811
    with serve_asgi(embeddings_app(how), port=port):
        error = failed_with(orchestrator, f"{how}.txt")
    assert error["code"] == "server_error", error
    assert "file_search unavailable: embedding service " in error["message"], error
    assert (SAYS.get(how) or "did not answer within 1.0 s") in error["message"], error
