"""Files in and out of a sandbox, from inside it: the one implementation both sandboxes run.

Stdlib only, for any `python3` >= 3.8: it is shipped as source ahead of the python kernel and the container
agent (`file_tools.program`) and answers their `write`, `read` and `list` requests. Every path is confined
to one root (`/mnt/data`): relative to it, or absolute under it, never with `..`. Each directory below the
root is opened from its parent's descriptor, and so is the file itself, each with `O_NOFOLLOW`, a link
refused before the open and the inode opened checked against the name's own after it (`_open_at`: gVisor
follows a link opened with O_DIRECTORY | O_NOFOLLOW). So a symlink in the leaf or in any parent is refused
rather than followed, and one swapped in between the check and the open is caught. The root itself may be
a link (it is the sandbox's own mount).

Requests and replies (base64 for bytes):

- `{"op": "write", "path", "data", "offset"}`: the bytes at `offset` (0 truncates first; the directories
  above the file are made) -> `{"size"}`, the file's size after the write;
- `{"op": "read", "path", "offset", "max_bytes"}` -> `{"data", "size", "eof"}`; `eof`: nothing follows the
  bytes returned (an empty file, or an offset at or past the end, reads as `data: ""`, `eof: true`);
- `{"op": "list"}` -> `{"files": [{"path", "size", "mtime_ns"}]}`: the regular files under the root (not
  under hidden directories, at most `LIST_LIMIT`, symlinks not followed), sorted by path.

A refused or failed request answers `{"error": TEXT}` instead.

Snapshots are made and loaded here too, inside the sandbox (a snapshot is untrusted bytes; the tool server never
opens one): `tar_tree` and `untar_tree` move a directory's plain files and folders, and `Transfer` answers the
chunked ops that carry a snapshot's bytes over the JSON-lines channel: `snapshot` (make it; its size and what was
left out), `snapshot_read {offset}` (a base64 chunk of it), `restore_write {data}` (collect one) and `restore`
(load what was collected). Each tool says what its snapshot holds.
"""

from __future__ import annotations

import base64
import binascii
import errno
import io
import os
import stat
import tarfile
import threading
from collections.abc import Callable
from typing import Any

ROOT = "/mnt/data"
"""Where a sandbox's movable files live (a size-capped tmpfs in each sandbox)."""
MAX_CHUNK = 256 * 1024
"""Most bytes one read or write moves: a chunk's base64 appears twice in a tool result (text and structured),
and must stay under the mcp client's 1 MiB event limit."""
LIST_LIMIT = 1000
"""Most files one listing names."""

SNAPSHOT_CHUNK = 4 * 1024 * 1024
"""Most snapshot bytes one `snapshot_read` or `restore_write` line carries (base64 in one JSON line)."""
SNAPSHOT_OPS = ("snapshot", "snapshot_read", "restore_write", "restore")

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO left here is refused, never waited on


class FileError(Exception):
    """A request refused before any file was touched; its text is the reply's `error`."""


def answer(request: dict[str, Any], root: str = ROOT) -> dict[str, Any]:
    """The reply to one file request: its result, or `{"error"}` naming the path and the reason."""
    op = request.get("op")
    try:
        if op == "list":
            return {"files": listing(root)}
        if op == "write":
            return {"size": write(root, request.get("path"), request.get("data"), _offset(request))}
        if op == "read":
            return read(root, request.get("path"), _offset(request), _count(request.get("max_bytes")))
        raise FileError(f"unknown file op {op!r} (write, read or list)")
    except FileError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": _os_error(op, request.get("path"), exc, root)}


def components(root: str, path: Any) -> list[str]:
    """The names from the root down to the file `path` names: relative to the root or absolute under it."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise FileError(f"invalid path {path!r}: a file under {root}, without '..'")
    rest = path[len(root) :] if path == root or path.startswith(root + "/") else path
    if path.startswith("/") and rest == path:
        raise FileError(f"path {path!r} is outside {root}")
    names = [n for n in rest.split("/") if n not in ("", ".")]
    if ".." in names:
        raise FileError(f"invalid path {path!r}: a file under {root}, without '..'")
    if not names:
        raise FileError(f"path {path!r} is {root} itself, not a file under it")
    return names


def write(root: str, path: Any, data: Any, offset: int) -> int:
    """Write one chunk at `offset`; the file's size after it."""
    names = components(root, path)
    if not isinstance(data, str):
        raise FileError("data must be a base64 string")
    try:
        raw = base64.b64decode(data, validate=True)
    except binascii.Error as exc:
        raise FileError(f"data is not valid base64: {exc}") from None
    parent = _walk(root, names[:-1], make=True)
    try:
        flags = os.O_WRONLY | os.O_CREAT | _FILE | (os.O_TRUNC if offset == 0 else 0)
        fd = _open_at(parent, names[-1], flags)
    finally:
        os.close(parent)
    try:
        _regular(fd, path)
        os.pwrite(fd, raw, offset)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read(root: str, path: Any, offset: int, count: int) -> dict[str, Any]:
    """Up to `count` bytes from `offset`, the file's size, and whether they reach its end."""
    names = components(root, path)
    parent = _walk(root, names[:-1], make=False)
    try:
        fd = _open_at(parent, names[-1], os.O_RDONLY | _FILE)
    finally:
        os.close(parent)
    try:
        size = _regular(fd, path)
        data = os.pread(fd, count, offset)
    finally:
        os.close(fd)
    return {"data": base64.b64encode(data).decode("ascii"), "size": size, "eof": offset + len(data) >= size}


def listing(root: str) -> list[dict[str, Any]]:
    """The regular files under the root, walked by directory descriptors (a symlink is neither listed nor
    entered); a root that does not exist holds none."""
    found: list[dict[str, Any]] = []
    if not os.path.isdir(root):
        return found
    for top, dirs, names, top_fd in os.fwalk(root, follow_symlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            try:
                st = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while we walked
                continue
            if stat.S_ISREG(st.st_mode):
                rel = os.path.relpath(os.path.join(top, name), root)
                found.append({"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
                if len(found) >= LIST_LIMIT:
                    return found
    return found


def _walk(root: str, names: list[str], make: bool) -> int:
    """A descriptor of the directory `names` lead to from the root, each step refusing a symlink."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in names:
            step = _step(fd, name, make)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _step(parent: int, name: str, make: bool) -> int:
    """The directory `name` in `parent`, made first if it is missing and `make`."""
    if make:
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o755, dir_fd=parent)
            except FileExistsError:  # made meanwhile (by the user's code): opened as anything else is
                pass
    return _open_at(parent, name, _DIR)


def _open_at(parent: int, name: str, flags: int, mode: int = 0o644) -> int:
    """`name` in `parent` opened, never through a symlink. O_NOFOLLOW alone is not enough: gVisor follows a
    link opened with O_DIRECTORY | O_NOFOLLOW. So a link is refused before the open (nothing is created or
    truncated through it), and after it the file opened must be the name's own (not one swapped in)."""
    try:
        before = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        before = None  # the open creates it, or says it is missing
    if before is not None and stat.S_ISLNK(before.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    fd = os.open(name, flags, mode, dir_fd=parent)
    try:
        opened, named = os.fstat(fd), os.stat(name, dir_fd=parent, follow_symlinks=False)
        if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _regular(fd: int, path: str) -> int:
    """The size of the open file, which must be a regular one (not a directory, FIFO or device)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise FileError(f"path {path!r} is not a regular file")
    return st.st_size


def _offset(request: dict[str, Any]) -> int:
    offset = request.get("offset") or 0
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise FileError(f"offset must be an integer >= 0, not {offset!r}")
    return offset


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_CHUNK:
        raise FileError(f"max_bytes must be in 1..{MAX_CHUNK}, not {value!r}")
    return value


def _os_error(op: Any, path: Any, exc: OSError, root: str) -> str:
    """An OS failure in the words the caller needs: a symlink on the way is named as such."""
    if exc.errno == errno.ELOOP:
        return f"path {path!r} goes through a symlink; symlinks under {root} are not followed"
    if exc.errno == errno.ENOTDIR:
        return f"path {path!r} goes through something that is not a directory"
    return f"cannot {op} {path!r}: {exc.strerror or exc}"


def tar_tree(root: str) -> tuple[bytes, list[str]]:
    """The plain files and folders under `root` as a tar, and the paths left out: links, devices, FIFOs, sockets
    and what this user cannot read. Hard links become copies, so a restore needs no link member."""
    buf = io.BytesIO()
    skipped: list[str] = []
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for top, dirs, names, top_fd in os.fwalk(root, follow_symlinks=False, onerror=_skipped(skipped)):
            dirs.sort()
            for name in dirs + sorted(names):
                path = os.path.join(top, name)
                if not _tar_one(tar, os.path.relpath(path, root), name, top_fd):
                    skipped.append(path)
    return buf.getvalue(), skipped


def _skipped(skipped: list[str]) -> Callable[[OSError], None]:
    def note(exc: OSError) -> None:
        skipped.append(str(exc.filename))

    return note


def _tar_one(tar: tarfile.TarFile, arcname: str, name: str, top_fd: int) -> bool:
    """Add one entry; False when it is not a plain file or folder, or cannot be read."""
    try:
        st = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
        info = tarfile.TarInfo(arcname)
        info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            return True
        if not stat.S_ISREG(st.st_mode):
            return False
        with os.fdopen(_open_at(top_fd, name, os.O_RDONLY | _FILE), "rb") as f:
            data = f.read()  # whole, before the tar is touched: a file a running process shrinks meanwhile
        info.size = len(data)  # must not leave half a member behind
        tar.addfile(info, io.BytesIO(data))
        return True
    except OSError:
        return False


def untar_tree(data: bytes, root: str) -> None:
    """Extract a `tar_tree` tar into `root`: plain files and folders only (links and devices are dropped), and a
    member named absolutely or with `..` refuses the whole snapshot."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        for member in members:
            if member.name.startswith("/") or ".." in member.name.split("/"):
                raise ValueError(f"unsafe path in snapshot: {member.name!r}")
            member.mode &= 0o755
        safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # checked again
        tar.extractall(root, members=members, **safe)


class Transfer:
    """A snapshot's bytes carried over the JSON-lines channel in base64 chunks, each way; one per sandbox."""

    def __init__(self) -> None:
        self._out = b""
        self._in = bytearray()
        self._lock = threading.Lock()  # the container agent answers each request in a thread of its own

    def answer(
        self,
        request: dict[str, Any],
        take: Callable[[dict[str, Any]], tuple[bytes, list[str]]],
        load: Callable[[bytes], dict[str, Any]],
    ) -> dict[str, Any]:
        """A snapshot op's reply; what fails (a snapshot the sandbox cannot read) is an `error`, never a crash.
        `take` makes the snapshot the `snapshot` request asks for (its bytes, the names left out); `load` loads
        one and gives the `restore` reply (`missing`: what did not come back, and what else the tool answers)."""
        try:
            with self._lock:
                reply = self._op(request, take, load)
        except Exception as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        return {**reply, "id": request.get("id")}

    def _op(
        self,
        request: dict[str, Any],
        take: Callable[[dict[str, Any]], tuple[bytes, list[str]]],
        load: Callable[[bytes], dict[str, Any]],
    ) -> dict[str, Any]:
        op = request["op"]
        if op == "snapshot":
            self._out, unsaved = take(request)
            return {"size": len(self._out), "unsaved": unsaved}
        if op == "snapshot_read":
            offset = int(request["offset"])
            chunk = self._out[offset : offset + SNAPSHOT_CHUNK]
            if offset + len(chunk) >= len(self._out):
                self._out = b""
            return {"data": base64.b64encode(chunk).decode("ascii")}
        if op == "restore_write":
            self._in += base64.b64decode(request["data"], validate=True)
            return {}
        blob, self._in = bytes(self._in), bytearray()
        return load(blob)
