"""The errors that reach a caller, OpenAI's error body, and the one place an exception becomes that body."""

from __future__ import annotations

from typing import Any

import structlog
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

log = structlog.get_logger(__name__)


class RequestError(ValueError):
    """The caller's request is invalid: HTTP 400 with this message."""

    etype = "invalid_request_error"

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code
        self.headers: dict[str, str] = {}


def error_body(message: str, etype: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape, the body of every 4xx/5xx the orchestrator answers."""
    return {"error": {"message": message, "type": etype, "param": param, "code": code}}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """`error_body`'s shape, as the OpenAPI document declares it for every 4xx/5xx."""

    error: ErrorDetail


class StoreUnavailable(Exception):
    """A store cannot be reached (Redis down): HTTP 503, never blamed on the caller."""


ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "The request was refused (OpenAI's error shape)"},
    "5XX": {"model": ErrorBody, "description": "The service failed (OpenAI's error shape)"},
}
"""Declared on every route; also keeps FastAPI from declaring its own `{"detail"}` 422 body."""
PARAM_SOURCES = frozenset({"body", "query", "path", "header", "cookie"})


def error_response(exc: BaseException, where: str | None = None) -> JSONResponse:
    """The single exception-to-wire boundary; `where` ("METHOD /path") names an unknown route."""
    headers: dict[str, str] = {}
    match exc:
        case RequestError():
            status, etype, msg, param, code = exc.status, exc.etype, str(exc), exc.param, exc.code
            headers = exc.headers
        case StoreUnavailable():
            log.warning("store.unavailable", error=str(exc))
            status, etype, msg, param, code = 503, "server_error", str(exc), None, "store_unavailable"
        case ValidationError() | RequestValidationError():
            first = exc.errors()[0]
            loc = list(first["loc"])
            if isinstance(exc, RequestValidationError) and loc and loc[0] in PARAM_SOURCES:
                loc = loc[1:]  # FastAPI names where the parameter was: OpenAI's `param` is the name alone
            param = ".".join(str(p) for p in loc) or None
            status, etype, msg, code = 400, "invalid_request_error", f"{param}: {first['msg']}", None
        case HTTPException():  # routing: no such path, or no such method on it: both 404, as OpenAI answers
            status, etype, param, code = (
                404 if exc.status_code == 405 else exc.status_code,
                "invalid_request_error",
                None,
                None,
            )
            msg = f"Invalid URL ({where})" if status == 404 and where else str(exc.detail)
            headers = dict(exc.headers or {}) if status == exc.status_code else {}
        case _:
            log.error("request.crashed", error=repr(exc))
            status, etype, msg, param, code = 500, "server_error", "internal error", None, None
    return JSONResponse(error_body(msg, etype, param, code), status, headers=headers)
