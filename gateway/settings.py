"""The gateway's static settings (flags and `TOOLFLEET_GATEWAY_*`); routes live in the YAML config."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from toolkit.settings import ServiceSettings


class GatewaySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="TOOLFLEET_GATEWAY_", cli_kebab_case=True, extra="ignore")

    port: int = Field(8800, description="port to bind")
    config: Path | None = Field(
        None, description="routes YAML (namespaces, replicas, policies); none = the local fleet on 127.0.0.1:8801-8803"
    )
    watch_s: float = Field(2.0, description="reload the config when the file changes (checked this often); 0 = off")
