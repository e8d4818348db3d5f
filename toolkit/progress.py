"""Progress notifications while a long tool call runs, so a caller that asked for them keeps waiting."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
from mcp.server.mcpserver import Context
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params


def heartbeat(ctx: Context, interval_s: float) -> contextlib.AbstractAsyncContextManager[None]:
    """Progress every `interval_s` for a caller that asked for it (`_meta.progressToken`), so SSE clients
    (vLLM gives up after 300 s of silence) wait. A call without a token can be sent no progress (the SDK
    drops it), so it runs without a heartbeat task: most calls, and those are answered as one JSON body."""
    if progress_token_from_params(ctx.request_context.params) is None:
        return contextlib.nullcontext()
    return _beating(ctx, interval_s)


@contextlib.asynccontextmanager
async def _beating(ctx: Context, interval_s: float) -> AsyncIterator[None]:
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_beat, ctx, interval_s)
        try:
            yield
        except Exception as exc:  # raised below, outside the group, so it is not wrapped
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if failure is not None:
        raise failure


async def _beat(ctx: Context, interval_s: float) -> None:
    ticks = 0
    while True:
        await anyio.sleep(interval_s)
        ticks += 1
        with contextlib.suppress(Exception):
            await ctx.report_progress(ticks, None, f"still running ({ticks * interval_s:.0f} s)")
