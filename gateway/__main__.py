"""`toolfleet gateway` / `python -m gateway`: serve the gateway; SIGHUP (or a changed file) reloads the routes."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import structlog
from starlette.types import ASGIApp

from gateway.app import build_app
from gateway.config import GatewayConfig, load_config, local_fleet
from gateway.lifecycle import build_gateway
from gateway.service import Gateway
from gateway.settings import GatewaySettings
from toolkit.serve import run_service

log = structlog.get_logger(__name__)


def reload(gw: Gateway, path: Path | None) -> bool:
    """Apply the config file again; a broken file is logged and the running config kept."""
    if path is None:
        return False
    try:
        gw.apply(load_config(path))
    except Exception as exc:
        log.error("config.reload_failed", path=str(path), error=str(exc))
        return False
    return True


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


async def watch(gw: Gateway, path: Path, every_s: float) -> None:
    """Reload on SIGHUP and when the file's mtime changes."""
    stamp = _mtime(path)

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGHUP) as signals:
            async for _ in signals:
                log.info("config.sighup")
                reload(gw, path)

    async with anyio.create_task_group() as tg:
        tg.start_soon(on_signal)
        while every_s > 0:
            await anyio.sleep(every_s)
            now = _mtime(path)
            if now != stamp:
                stamp = now
                log.info("config.changed", path=str(path))
                reload(gw, path)


def routes(settings: GatewaySettings) -> GatewayConfig:
    """The routes file when one is given, else the local fleet (and the log says so, and how to override it)."""
    if settings.config is not None:
        return load_config(settings.config)
    cfg = local_fleet()
    log.info(
        "config.default",
        message="no routes file given: serving the local fleet; --config FILE (TOOLFLEET_GATEWAY_CONFIG) overrides it",
        routes={name: list(ns.replicas) for name, ns in cfg.namespaces.items()},
    )
    return cfg


def app(settings: GatewaySettings) -> ASGIApp:
    """The gateway over its routes; a routes file is also watched, so edits apply without a restart."""
    gw = build_gateway(routes(settings))
    if (config := settings.config) is not None:
        gw.background["config-watch"] = lambda: watch(gw, config, settings.watch_s)
    return build_app(gw)


def main(argv: Sequence[str] | None = None) -> int:
    settings = GatewaySettings.from_args(list(argv) if argv is not None else sys.argv[1:], "toolfleet gateway")
    return run_service("gateway", settings, app)


if __name__ == "__main__":
    raise SystemExit(main())
