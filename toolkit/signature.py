"""The signature the MCP SDK reads for a `@kit.tool` body: its schema, its context and what it answers.

A tool body takes only its own arguments and returns its operation (an `Op`), so the kit's wrapper around it
is what the SDK registers. The SDK builds the tool's input schema, finds the context and derives the output
schema from that wrapper's signature and annotations; `ToolSignature` gives the wrapper the body's arguments
plus what the kit needs (`ctx`, `session_handle`), so the listed schema is the one the body declares.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mcp.server.mcpserver import Context

from toolkit import handles

KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY

S = TypeVar("S")
T = TypeVar("T")
Op = Callable[[S], Awaitable[T]]
"""A tool's operation on the caller's session state; a body is annotated `-> Op[State, Answer]`."""
Body = Callable[..., Op[Any, Any]]
"""A tool body: it checks its arguments (before any session is taken) and returns its operation."""

CONTEXT = "ctx"
"""The argument a body names to be given the call's `Context` (the browser reads its request options)."""


@dataclass(frozen=True, slots=True)
class ToolSignature:
    body: Body
    own: inspect.Signature
    """The body's signature, its annotations evaluated."""
    answer: Any
    """What the body's operation answers (`T` of its `Op[S, T]`): a `Reply`, or a structured type."""

    @classmethod
    def of(cls, body: Body) -> ToolSignature:
        own = inspect.signature(body, eval_str=True)
        return cls(body, own, _answer(own.return_annotation, body))

    @property
    def takes_context(self) -> bool:
        return CONTEXT in self.own.parameters

    def dress(self, wrapper: Callable[..., Any], returns: Any) -> None:
        """Give `wrapper` what the SDK reads, as `functools.wraps` would, but with the body's arguments followed
        by `ctx` (unless the body takes it) and `session_handle`, and answering `returns`."""
        params = list(self.own.parameters.values())
        if not self.takes_context:
            params.append(inspect.Parameter(CONTEXT, KEYWORD_ONLY, annotation=Context))
        params.append(inspect.Parameter(handles.ARGUMENT, KEYWORD_ONLY, default=None, annotation=str | None))
        signature = self.own.replace(parameters=params, return_annotation=returns)
        body = self.body
        wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = body.__name__, body.__qualname__, body.__doc__
        wrapper.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
        vars(wrapper)["__signature__"] = signature  # what `inspect.signature` reads; typeshed's functions lack it


def _answer(annotation: Any, body: Body) -> Any:
    """`T` of a body's return annotation `Op[S, T]`."""
    args = typing.get_args(annotation)  # `Callable[[S], Awaitable[T]]`: (S, Awaitable[T])
    answers = typing.get_args(args[-1]) if args else ()
    if len(answers) != 1:
        raise TypeError(f"tool body {body.__qualname__} must be annotated `-> Op[State, Answer]`, not {annotation!r}")
    return answers[0]
