"""`item_reference` input items: `{"type": "item_reference", "id": ...}` (or a bare `{"id": ...}`) stands
for an item of the caller's own stored responses (their input and output items) or of the conversation the
request continues, and is replaced by that item before anything else reads the input.

The store keeps, per stored response, a small index `owner/ref:ITEM_ID -> response id` beside the kept
web_search results (`Store.put_results`): the key carries the owner, so another key's ids find nothing,
and the item itself is read from the response record, so a deleted or expired response's items are gone
with it. An id that resolves to nothing is a 400 naming the input item."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import RequestError
from orchestrator.persist import Record, Store


def _key(owner: str, item_id: str) -> str:
    return f"{owner}/ref:{item_id}"


def is_reference(item: dict[str, Any]) -> bool:
    """An item reference: typed as one, or an item with nothing but its id (the type is optional)."""
    return item.get("type") == "item_reference" or set(item) == {"id"}


Items = list[dict[str, Any]]


async def resolve(store: Store, owner: str, items: Items, earlier: Items) -> Items:
    """`items` with each reference replaced by the item it names (from `earlier`, the conversation's items,
    or from `owner`'s stored responses)."""
    refs = {i: item.get("id") for i, item in enumerate(items) if is_reference(item)}
    if not refs:
        return items
    for i, item_id in refs.items():
        if not isinstance(item_id, str) or not item_id:
            raise RequestError("item_reference needs the id of an item", f"input[{i}].id")
    known = {str(item.get("id")): item for item in earlier}
    wanted = [str(x) for x in refs.values() if x not in known]
    indexed = await store.get_results([_key(owner, x) for x in wanted]) if wanted else {}
    records: dict[str, Record | None] = {}
    out = list(items)
    for i, item_id in refs.items():
        item = known.get(str(item_id))
        response_id = indexed.get(_key(owner, str(item_id)))
        if item is None and response_id is not None:
            if response_id not in records:
                records[response_id] = await store.get(response_id)
            item = _find(records[response_id], owner, str(item_id))
        if item is None:
            raise RequestError(f"item {item_id!r} not found", f"input[{i}].id", 400, "item_not_found")
        out[i] = dict(item)
    return out


def _find(record: Record | None, owner: str, item_id: str) -> dict[str, Any] | None:
    if record is None or record.owner != owner:
        return None
    return next((it for it in [*record.input_items, *record.body.get("output", [])] if it.get("id") == item_id), None)


async def index(store: Store, record: Record) -> None:
    """Make a stored response's input and output items resolvable by their ids, for its owner."""
    ids = [it.get("id") for it in [*record.input_items, *record.body.get("output", [])]]
    entries = {_key(record.owner, i): record.id for i in ids if isinstance(i, str) and i}
    if entries:
        await store.put_results(entries)
