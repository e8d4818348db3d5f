"""Where responses, conversations and owned objects are kept: one backend, chosen once by `--store`, holds all
three over one connection (`sqlite.py`: one file, one replica; `redis.py`: shared by several replicas).

The rest of the orchestrator sees only `base`'s records and protocols (those it uses are re-exported here) and
`open_stores`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.persist.base import Conversation, ConversationStore, Objects, Record, Store, Stores
from toolkit import registry

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

__all__ = ["BACKENDS", "Conversation", "ConversationStore", "Objects", "Record", "Store", "Stores", "open_stores"]

BACKENDS: registry.Registry = {
    "sqlite": "orchestrator.persist.sqlite:SQLiteStores",
    "redis": "orchestrator.persist.redis:RedisStores",
}


def open_stores(settings: OrchestratorSettings) -> Stores:
    """The stores of the backend `--store` names, built from the settings; an unknown name stops the start-up."""
    stores: Stores = registry.load(BACKENDS, settings.store, "store").from_settings(settings)
    return stores
