"""Implementations chosen by configuration name: a registry maps each name to `module:attribute`.

Every service picks its stores and backends this one way, so an operator's typo reads the same
everywhere and a service imports only what it was configured with (the docker backend needs no
bubblewrap, the memory store no redis package).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

Registry = Mapping[str, str]
"""Configuration name -> `package.module:Attribute`, imported only when that name is chosen."""


def check(registry: Registry, name: str, kind: str, *, also: Iterable[str] = ()) -> str:
    """`name` when the registry or `also` (names the caller resolves itself) knows it; else a ValueError listing all."""
    known = [*registry, *also]
    if name not in known:
        raise ValueError(f"unknown {kind} {name!r}; choose one of {', '.join(known)}")
    return name


def load(registry: Registry, name: str, kind: str) -> Any:
    """The attribute (usually a class) registered under `name`, imported now; an unknown name fails as in `check`."""
    module, _, attribute = registry[check(registry, name, kind)].partition(":")
    return getattr(importlib.import_module(module), attribute)
