"""Signed `mcp_approval_request` ids: only a request the orchestrator issued can be approved.

An approval runs a tool with no model turn in between, so the request it answers must be one an orchestrator
of this fleet wrote, with the server label, tool and arguments it wrote. A client-kept history (`store: false`,
the Agents SDK's hosted MCP with an approval callback) brings the request back with nothing kept on the server,
and the SDK's strict item types allow no extra field, so the signature travels in the id itself:
`mcpr_<32 hex nonce><32 hex HMAC>`. The HMAC covers the nonce, label, name and arguments, keyed with the secret
every replica shares (`toolkit.wire.fleet_secret`) under a domain of its own, so that no other value the fleet
signs can pass for one. A request signed by one replica is approved on any other.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re

from orchestrator.responses.events import new_id
from toolkit.wire import fleet_secret

_DOMAIN = b"toolfleet-mcp-approval-request:"
_SIGNED_ID = re.compile(r"(mcpr_[0-9a-f]{32})([0-9a-f]{32})")


def _mac(nonce: str, label: str, name: str, arguments: str, secret: bytes) -> str:
    fields = json.dumps([nonce, label, name, arguments]).encode()  # one encoding: no two field splits collide
    return hmac.new(secret, _DOMAIN + fields, hashlib.sha256).hexdigest()[:32]


def issue(label: str, name: str, arguments: str, secret: bytes | None = None) -> str:
    """The id of a new approval request for `name` on server `label` with these arguments, signed."""
    nonce = new_id("mcpr")
    return nonce + _mac(nonce, label, name, arguments, secret or fleet_secret())


def issued(approval_id: str, label: str, name: str, arguments: str, secret: bytes | None = None) -> bool:
    """Whether an approval request's id is this fleet's signature over exactly these label, name and arguments."""
    found = _SIGNED_ID.fullmatch(approval_id)
    if found is None:
        return False
    return hmac.compare_digest(found[2], _mac(found[1], label, name, arguments, secret or fleet_secret()))
