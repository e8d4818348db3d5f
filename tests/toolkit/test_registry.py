"""One registry shape: every store and backend resolves by name, and a wrong name reads the same everywhere."""

from __future__ import annotations

import fractions

import anyio
import pytest

from gateway.store import STORES as PIN_STORES
from gateway.store import open_store
from orchestrator.persist import BACKENDS as ORCHESTRATOR_STORES
from orchestrator.persist import open_stores
from orchestrator.settings import OrchestratorSettings
from toolkit import registry
from tools.browser.backends import BACKENDS as SEARCH
from tools.container.backends import BACKENDS as CONTAINER
from tools.python_sandbox.backends import BACKENDS as PYTHON
from tools.python_sandbox.backends import choose_backend_name

ALL = {
    "pin store": PIN_STORES,
    "store": ORCHESTRATOR_STORES,
    "search backend": SEARCH,
    "container backend": CONTAINER,
    "python backend": PYTHON,
}


def test_load_imports_only_the_chosen_name() -> None:
    table = {"fraction": "fractions:Fraction", "broken": "no_such_module_here:Thing"}
    assert registry.load(table, "fraction", "number kind") is fractions.Fraction
    with pytest.raises(ModuleNotFoundError):
        registry.load(table, "broken", "number kind")


def test_unknown_name_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^unknown number kind 'real'; choose one of fraction, auto$"):
        registry.check({"fraction": "fractions:Fraction"}, "real", "number kind", also=["auto"])
    assert registry.check({"fraction": "fractions:Fraction"}, "auto", "number kind", also=["auto"]) == "auto"


@pytest.mark.parametrize(("kind", "table"), ALL.items(), ids=list(ALL))
def test_every_registered_name_imports(kind: str, table: registry.Registry) -> None:
    for name in table:
        assert isinstance(registry.load(table, name, kind), type), name
    with pytest.raises(ValueError, match=rf"^unknown {kind} 'nope'; choose one of {', '.join(table)}$"):
        registry.load(table, "nope", kind)


def test_services_refuse_an_unknown_name_at_start_up() -> None:
    with pytest.raises(ValueError, match="unknown pin store 'http'; choose one of memory, redis"):
        open_store("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="unknown pin store 'mem'"):
        open_store("mem")
    with pytest.raises(ValueError, match=r"unknown store 'mongo'; choose one of sqlite, redis$"):
        open_stores(OrchestratorSettings(store="mongo"))
    with pytest.raises(ValueError, match=r"unknown python backend 'podman'; choose one of docker, local, auto$"):
        choose_backend_name("podman")


def test_configured_names_pick_their_store() -> None:
    stores = [open_store("memory"), open_store("redis://127.0.0.1:1/0")]  # Redis connects on first use
    stores.append(open_stores(OrchestratorSettings(store="sqlite", store_path=":memory:")))
    stores.append(open_stores(OrchestratorSettings(store="redis", redis_url="redis://127.0.0.1:1/0")))
    assert [type(s).__name__ for s in stores] == ["MemoryStore", "RedisStore", "SQLiteStores", "RedisStores"]
    for store in stores:
        anyio.run(store.aclose)
