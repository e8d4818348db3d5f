"""Every header and label name the fleet's services agree on, and the signed owner header.

The names live here, apart from the code that reads them, so that a service which only passes a header on (the
gateway, the orchestrator) imports a few strings, not the module that acts on them (the docker SDK behind the
sandbox runtime, the drain state).

Fleet headers (`toolfleet-*`, `x-sandbox-*`) are written only by the fleet's services. A client's words never
become one: the orchestrator drops them from a client's `mcp` tool headers, and the owner header, which decides
whose quota and whose eviction a call counts against, is signed with the fleet secret so that a caller who can
reach the gateway directly cannot claim to be another key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import tempfile
from functools import cache
from pathlib import Path

SESSION_HEADER = "x-session-id"
"""A client's name for its tool session, kept across MCP sessions and replicas (the gateway pins by it)."""
REQUEST_ID_HEADER = "x-request-id"
"""The header that carries one request id from hop to hop (orchestrator -> gateway -> tool server)."""
OWNER_HEADER = "toolfleet-owner"
"""Who owns a tool call: `<owner>.<mac>`, set by the orchestrator, forwarded by the gateway, read by the tool."""
MEMORY_HEADER = "x-sandbox-memory-mb"
"""A caller's size for the sandbox of a session it starts (MiB): the orchestrator's, for a platform container whose
`memory_limit` is above the default 1g. Absent: the tool server's `--memory-mb`."""
SIZE_REFUSED = re.compile(rf"^(?:Error executing tool \S+: )?{MEMORY_HEADER}: .* at most (\d+) MiB")
"""A tool's refusal of a `MEMORY_HEADER` size above its cap (`size_refusal`), as its caller reads the cap back."""
DRAINING_HEADER = "toolfleet-draining"
"""On a tool replica's answer: it drains (`toolkit.drain`), so the gateway places no new session on it."""
ROOM_HEADER = "toolfleet-room"
"""On a tool replica's answer: the sessions it can still open, from which the gateway places new ones."""
RESET_HEADER = "toolfleet-session-reset"
"""Sent by the gateway with the first message of a session it moved off a drained replica."""
INSTANCE_HEADER = "toolfleet-instance"
"""On a tool replica's answer: the instance id its MCP task ids carry (`seal_task`), so the gateway routes
`tasks/*` by id to the replica that owns the task."""

ROLE_LABEL = "toolfleet.role"
"""Container label: which tool's sandbox (or `lease`) a container is."""
INSTANCE_LABEL = "toolfleet.instance"
"""Container label: the tool server instance that made the sandbox."""
OWNER_LABEL = "toolfleet.owner"
"""Container label: the instance whose owner lease the sandbox depends on."""
LEASE_LABEL = "toolfleet.lease"
"""Container label: the instance an owner lease container belongs to."""

RESERVED_PREFIXES = ("toolfleet-", "x-sandbox-")
"""Header name prefixes only fleet services may set."""
ANONYMOUS = "anonymous"
"""The owner of a call that names none (or names one with a bad signature): stock vLLM, a direct MCP client."""

SECRET_ENV = "TOOLFLEET_FLEET_SECRET"
SECRET_FILE_ENV = "TOOLFLEET_FLEET_SECRET_FILE"
_OWNER = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TASK_ID = re.compile(r"(?P<instance>[0-9a-f]{16})\.(?P<nonce>[0-9a-f]{32})\.(?P<mac>[0-9a-f]{32})")


def is_reserved(name: str) -> bool:
    """Whether a header name belongs to the fleet (case-insensitive)."""
    return name.lower().startswith(RESERVED_PREFIXES)


@cache
def fleet_secret() -> bytes:
    """The secret every service of one fleet shares: `TOOLFLEET_FLEET_SECRET`, else the file named by
    `TOOLFLEET_FLEET_SECRET_FILE`, else a machine-local file made once (0600) in the temp directory, which is what
    services started by hand on one machine share. Containers each have their own temp directory: compose passes
    the variable."""
    value = os.environ.get(SECRET_ENV)
    if value:
        return value.encode()
    named = os.environ.get(SECRET_FILE_ENV)
    if named:  # the operator's file (a mounted secret, maybe read-only, maybe a link): made only where missing
        path = Path(named)
        return (None if path.exists() else _made(path)) or _nonempty(path, path.read_bytes())
    return local_secret(Path(tempfile.gettempdir()) / f"toolfleet-fleet-secret-{os.getuid()}")


def local_secret(path: Path) -> bytes:
    """The machine-local secret at `path`: made here, or read only from a regular file of this user that nobody
    else may read or write. The temp directory is everyone's, so another user could make a file of that name
    first (or a link to a file they can read), and with a secret they know sign any owner and the admin token."""
    if made := _made(path):
        return made
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a symbolic link: OSError (ELOOP)
    with os.fdopen(fd, "rb") as found:
        st = os.fstat(found.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise RuntimeError(
                f"refusing the fleet secret file {path}: it must be a regular file of uid {os.getuid()} that only "
                f"its owner may read (it is uid {st.st_uid}, mode {stat.filemode(st.st_mode)}); remove it, or set "
                f"{SECRET_ENV}"
            )
        return _nonempty(path, found.read())


def _made(path: Path) -> bytes | None:
    """A new secret written whole under a temporary name and linked in as `path` (so no reader ever sees it
    half written), or None when `path` is there already."""
    value = secrets.token_hex(32).encode()
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".toolfleet-secret-")  # 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(value)
        os.link(temporary, path)
    except FileExistsError:
        return None
    finally:
        os.unlink(temporary)
    return value


def _nonempty(path: Path, raw: bytes) -> bytes:
    if not (value := raw.strip()):
        raise RuntimeError(f"the fleet secret file {path} is empty")
    return value


def fleet_key(purpose: str) -> bytes:
    """A key of its own for one use of the fleet secret (`handles`, ...), so that no two uses can stand in for
    each other: a value signed for one purpose never checks for another."""
    return hmac.new(fleet_secret(), f"toolfleet key: {purpose}".encode(), hashlib.sha256).digest()


def admin_token() -> str:
    """The bearer token of a tool server's `/admin` routes (`toolkit.admin`): the gateway's, derived from the fleet
    secret, so only a service of the fleet lists or ends sessions; never a client's key."""
    return fleet_key("admin").hex()


def _mac(owner: str, secret: bytes) -> str:
    return hmac.new(secret, b"owner:" + owner.encode(), hashlib.sha256).hexdigest()[:32]


def sign_owner(owner: str, secret: bytes | None = None) -> str:
    """The owner header's value for `owner` (which must match `[A-Za-z0-9_-]{1,64}`)."""
    if not _OWNER.fullmatch(owner):
        raise ValueError(f"owner {owner!r} is not a valid owner name")
    return f"{owner}.{_mac(owner, secret or fleet_secret())}"


def read_owner(value: str | None, secret: bytes | None = None) -> str:
    """The owner a header value names when its signature holds, else `ANONYMOUS`."""
    if not value:
        return ANONYMOUS
    owner, _, mac = value.partition(".")
    if not _OWNER.fullmatch(owner) or not hmac.compare_digest(
        mac.encode(), _mac(owner, secret or fleet_secret()).encode()
    ):
        return ANONYMOUS
    return owner


def size_refusal(size_mb: int, cap_mb: int) -> str:
    """A tool server's refusal of a sandbox size above its cap; `refused_cap` reads the cap back from it."""
    return (
        f"{MEMORY_HEADER}: a sandbox of {size_mb} MiB was asked for; this server's sandboxes may have at most "
        f"{cap_mb} MiB (its --max-session-memory-mb)"
    )


def refused_cap(text: str) -> int | None:
    """The cap (MiB) of a tool's `size_refusal` (the MCP SDK may prefix the tool's name); None: not one."""
    match = SIZE_REFUSED.match(text)
    return int(match.group(1)) if match else None


def _task_mac(instance: str, nonce: str, owner: str, secret: bytes) -> str:
    return hmac.new(secret, f"task:{instance}.{nonce}:{owner}".encode(), hashlib.sha256).hexdigest()[:32]


def seal_task(instance: str, owner: str, secret: bytes | None = None) -> str:
    """A new MCP task id of tool instance `instance` (16 hex digits) for `owner`: unguessable (a random nonce),
    and sealed under the fleet secret so that only the same owner's calls can name it, and any fleet service
    can read the instance from it without a lookup (`task_instance`)."""
    nonce = secrets.token_hex(16)
    return f"{instance}.{nonce}.{_task_mac(instance, nonce, owner, secret or fleet_secret())}"


def task_instance(task_id: object, owner: str | None = None, secret: bytes | None = None) -> str | None:
    """The tool instance a task id names. With `owner`, only when the id was sealed for that owner: None for a
    malformed id, a forged one, or another owner's (which a caller must not be able to tell apart); without,
    whatever instance a well-formed id names (what the gateway routes by; the replica checks the seal)."""
    match = _TASK_ID.fullmatch(task_id) if isinstance(task_id, str) else None
    if match is None:
        return None
    if owner is None:
        return match["instance"]
    mac = _task_mac(match["instance"], match["nonce"], owner, secret or fleet_secret())
    return match["instance"] if hmac.compare_digest(mac, match["mac"]) else None


def unknown_task(task_id: object) -> str:
    """The one refusal of a task id that was never made for this caller, belongs to another owner, or expired:
    the same words from the gateway and from the tool replica."""
    shown = task_id[:120] if isinstance(task_id, str) else task_id
    return (
        f"unknown task {shown!r}: no task of this caller has that id here (it was never made for this caller, "
        "or it ended and its ttl passed)"
    )
