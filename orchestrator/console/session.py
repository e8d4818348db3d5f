"""Who may use the console: an admin key posted once buys a signed session cookie; CSRF tokens bound to it.

The cookie is `ADMIN_ID.EXPIRES.NONCE.SIGNATURE`, signed with a secret derived from the configured admin keys,
so every replica with the same keys accepts it (each replica's console shows the whole fleet) and removing or
rotating an admin key ends its sessions. It holds no key, only the key's id. Logout drops the cookie; a copy of
it kept elsewhere stays valid until it expires (`SESSION_S`), as with any stateless session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import Request

from orchestrator.guard.auth import ApiKeys

COOKIE = "toolfleet_console"
LOGIN_COOKIE = "toolfleet_console_login"  # the login form's own double-submit CSRF nonce: no session exists yet
SESSION_S = 12 * 3600


@dataclass(frozen=True)
class Session:
    admin: str  # the admin key's id (`guard.auth.key_id`), never the key
    csrf: str  # the token every POST form of this session carries


class ConsoleSessions:
    """Signs and checks session cookies; `enabled` is false when no admin key is configured (console closed)."""

    def __init__(self, admin_keys: Iterable[str]) -> None:
        keys = sorted(set(admin_keys))
        self.admins = ApiKeys(keys)
        self._secret = hashlib.sha256(b"toolfleet-console\0" + "\0".join(keys).encode()).digest()

    @property
    def enabled(self) -> bool:
        return self.admins.enabled

    def _sign(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()

    def issue(self, admin: str) -> str:
        """A new cookie value for the admin whose key was just checked."""
        payload = f"{admin}.{int(time.time()) + SESSION_S}.{secrets.token_hex(16)}"
        return f"{payload}.{self._sign(payload)}"

    def check(self, request: Request) -> Session | None:
        """The request's session, or None: no cookie, a forged or expired one, or one whose key was removed."""
        value = request.cookies.get(COOKIE, "")
        parts = value.split(".")
        if len(parts) != 4 or not self.enabled:
            return None
        admin, expires, nonce, signature = parts
        if not hmac.compare_digest(signature, self._sign(f"{admin}.{expires}.{nonce}")):
            return None
        if not expires.isdigit() or int(expires) < time.time() or admin not in self.admins.ids():
            return None
        return Session(admin, self._sign(f"csrf:{nonce}"))


def csrf_ok(expected: str, form: dict[str, str]) -> bool:
    """A POST form's token against the session's (or the login nonce): compared in constant time."""
    return bool(expected) and hmac.compare_digest(form.get("csrf", "").encode(), expected.encode())
