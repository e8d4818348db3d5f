"""The one way the services make a Redis client (the orchestrator's stores, the gateway's pin store).

`redis` is imported lazily: only deployments that configure Redis need the package. Commands retry a dropped
connection a few times: after a Redis restart every pooled connection is dead, and a client made by `from_url`
alone does not retry, so each of them failed one command (a pin, or the store of a response its caller had
already been answered `completed` for).
"""

from __future__ import annotations

from typing import Any

RETRIES = 3


def redis_client(url: str, **options: Any) -> Any:
    """An asyncio Redis client for `url`; `options` go to `from_url` (e.g. `decode_responses=True`)."""
    import redis.asyncio as redis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff

    return redis.from_url(url, retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), RETRIES), **options)
