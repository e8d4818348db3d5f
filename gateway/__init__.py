"""The MCP gateway: one front door for every tool namespace (see gateway/README.md)."""

from gateway.app import build_app
from gateway.config import GatewayConfig, load_config, parse_config
from gateway.service import Gateway

__all__ = ["Gateway", "GatewayConfig", "build_app", "load_config", "parse_config"]
