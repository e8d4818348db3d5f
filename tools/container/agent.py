"""The resident agent inside each session container (stdlib only; any image with `python3` runs it).

Run as the container's main process (`python3 -u -c PROGRAM`: this source after the kit's stdlib-only
`files.py`, which it imports as in the tree; `toolkit.sandbox.file_tools.program`), it reads one JSON request per line
on stdin and answers one JSON line per request on stdout, in any order (requests carry an `id`;
each runs in a thread of its own, started or reused, so a long command in one shell does not hold
up another). Run as `python3 -c PROGRAM --once JSON` (through `docker exec --user ...`) it answers one
request and exits.

Requests: `{"id", "op": "exec", "argv", "cwd", "env", "timeout_s", "max_bytes", "in_shell", "functions"}`,
the file requests `write`, `read` and `list` under /mnt/data (`files.py` states them), and the snapshot ops
(`files.Transfer` carries the bytes): `snapshot {workdir, shells}` packs /mnt/data and the work dir (each a
`files.tar_tree` tar) with the shells' state the server sent, in one tar; `restore {workdir}` unpacks one here
and answers the shells' state and which shells' directories are gone. The server never opens a snapshot.
Why a resident process: a `docker exec` costs several engine round trips per command (figures in
the backend's docstring); a line on an already attached stream costs none.

Every command starts in a new session (so one signal reaches its process group) and carries a
tag in its environment, inherited by everything it starts: at its deadline the agent kills the
group and every process still carrying the tag, until none is left. When a shell script
(`bash -c SCRIPT`, `sh -lc SCRIPT`, ...) exits, its final working directory and environment are
written to a private pipe with the functions it defined, so the server can keep them for that shell
(`session_name`). `in_shell` runs an argv command as such a script (quoted with `shlex.join`, under bash
where the image has it), so a named shell keeps its state whatever form the command takes.
"""

from __future__ import annotations

import io
import json
import os
import queue
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

from toolkit.sandbox.files import ROOT, SNAPSHOT_OPS, Transfer, answer, tar_tree, untar_tree

TAG = "TOOLFLEET_EXEC_TAG"
STATE_FD = "TOOLFLEET_STATE_FD"
SHELLS = ("sh", "bash", "dash", "zsh")
FILE_OPS = ("write", "read", "list")  # answered by the kit's `files.py`, as in the python tool
WRAPPER = (
    'trap \'__tf_rc=$?; { pwd; printf "\\000"; declare -f; printf "\\000"; env -0; } >&"$'
    + STATE_FD
    + '" 2>/dev/null; exit "$__tf_rc"\' EXIT; '
    '__tf_s=$1; eval "$2"; shift 2; eval "$__tf_s"'
)
"""Runs a script (`$1`) after the shell's saved functions (`$2`); at exit, writes where it stands, its
functions (bash's `declare -f`; nothing under dash) and its environment to the state pipe, NUL-separated."""
_write_lock = threading.Lock()
TRANSFER = Transfer()
SHELLS_PART = "shells.json"


def shell_script(argv: list[str]) -> tuple[list[str], str] | None:
    """`[bash, -lc, SCRIPT]` and the like: (the shell and its flags without -c, the script); else None."""
    if len(argv) != 3 or os.path.basename(argv[0]) not in SHELLS:
        return None
    flags = argv[1]
    if not (flags.startswith("-") and "c" in flags and flags[1:].isalpha()):
        return None
    rest = flags.replace("c", "")
    return [argv[0], *([rest] if rest != "-" else [])], argv[2]


class Capture:
    """Keeps the first and the last `limit // 2` bytes of a stream and counts what fell between."""

    def __init__(self, limit: int) -> None:
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.half:
            cut = len(self.tail) - self.half
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.dropped:
            return head + tail
        return f"{head}\n[... {self.dropped} bytes cut here ...]\n{tail}"


def _tagged(tag: str) -> list[int]:
    """Pids whose environment carries the command's tag (readable for our own uid's processes)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _holding(pids: list[int], inodes: set[str]) -> list[int]:
    """Those of `pids` that hold one of the pipes (`pipe:[inode]`) open."""
    holders = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders


def kill_tree(proc: subprocess.Popen[bytes], tag: str, only: set[str] | None = None, budget_s: float = 0.9) -> int:
    """SIGKILL the command's group and every tagged process (or those holding `only` pipes) until none is left."""
    killed: set[int] = set()
    deadline = time.monotonic() + budget_s
    while True:
        if only is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        pids = _tagged(tag)
        if only is not None:
            pids = _holding(pids, only)
        pids = [p for p in pids if _alive(p)]
        if not pids or time.monotonic() > deadline:
            return len(killed)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_exec(req: dict, tag: str) -> dict:
    argv, cwd = list(req["argv"]), req["cwd"]
    if not os.path.isdir(cwd):
        return {"error": f"workdir {cwd} does not exist or is not a directory"}
    env = {k: v for k, v in os.environ.items() if k != TAG}
    for key, value in (req.get("env") or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env[TAG] = tag
    start_env = dict(env)
    script = shell_script(argv)
    if script is None and req.get("in_shell"):
        script = [shutil.which("bash", path=env.get("PATH")) or "sh"], shlex.join(argv)
    if script is None and "/" not in argv[0] and shutil.which(argv[0], path=env.get("PATH")) is None:
        return {"error": f"command not found: {argv[0]}", "exit_code": 127}
    state_r = state_w = -1
    if script is not None:
        state_r, state_w = os.pipe()
        env[STATE_FD] = str(state_w)
        shell, body = script
        argv = [*shell, "-c", WRAPPER, shell[0], body, req.get("functions") or ""]
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(state_w,) if state_w >= 0 else (),
        )
    except FileNotFoundError:
        return _closed({"error": f"command not found: {argv[0]}", "exit_code": 127}, state_r, state_w)
    except PermissionError:
        return _closed({"error": f"permission denied: {argv[0]}", "exit_code": 126}, state_r, state_w)
    except OSError as exc:
        return _closed({"error": f"cannot start {argv[0]}: {exc.strerror}"}, state_r, state_w)
    if state_w >= 0:
        os.close(state_w)
    return _collect(proc, req, tag, state_r, start_env, cwd)


def _closed(reply: dict, *fds: int) -> dict:
    for fd in fds:
        if fd >= 0:
            os.close(fd)
    return reply


def _collect(proc: subprocess.Popen[bytes], req: dict, tag: str, state_r: int, start_env: dict, cwd: str) -> dict:
    limit = int(req["max_bytes"])
    out, err = Capture(limit), Capture(limit)
    inodes = {f"pipe:[{os.fstat(p.fileno()).st_ino}]" for p in (proc.stdout, proc.stderr) if p is not None}
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    state = bytearray()
    if state_r >= 0:
        sel.register(state_r, selectors.EVENT_READ, state)
    deadline = time.monotonic() + float(req["timeout_s"])
    timed_out, stopped, exited_at = False, 0, None
    while sel.get_map():
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            kill_tree(proc, tag)
            break
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 0.2:  # the command is done; leftovers hold the output
            stopped = kill_tree(proc, tag, only=inodes)
            break
        for key, _ in sel.select(min(0.05, deadline - now)):
            fd = key.fd if isinstance(key.fileobj, int) else key.fileobj.fileno()
            data = os.read(fd, 65536)
            if not data:
                sel.unregister(key.fileobj)
            elif key.data is state:
                state += data
            else:
                key.data.feed(data)
    sel.close()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    if state_r >= 0:
        os.close(state_r)
    code = proc.wait()
    reply = {
        "stdout": out.text(),
        "stderr": err.text(),
        "exit_code": code if code >= 0 else 128 - code,
        "timed_out": timed_out,
        "truncated": out.dropped + err.dropped,
        "stopped_background": stopped,
    }
    if state and not timed_out:
        reply.update(_state_change(bytes(state), start_env, cwd))
    return reply


def _state_change(raw: bytes, start_env: dict, cwd: str) -> dict:
    """What a shell script changed: its new working directory, its functions and the variables it set or unset."""
    new_cwd, _, rest = raw.partition(b"\n\0")
    functions, _, env_blob = rest.partition(b"\0")
    ignored = (TAG, STATE_FD, "PWD", "OLDPWD", "SHLVL", "_")
    env = {}
    for item in env_blob.split(b"\0"):
        key, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and key not in ignored:
            env[key] = value
    changed: dict[str, str | None] = {k: v for k, v in env.items() if start_env.get(k) != v}
    changed.update({k: None for k in start_env if k not in env and k not in ignored})
    change: dict = {"env_changes": changed, "functions": functions.decode("utf-8", "replace")}
    path = new_cwd.decode("utf-8", "replace")
    if path and path != cwd:
        change["cwd"] = path
    return change


def take_snapshot(req: dict) -> tuple[bytes, list]:
    """/mnt/data's and the work dir's trees and the shells' state in one tar; the paths left out."""
    parts, skipped = {SHELLS_PART: json.dumps(req["shells"]).encode()}, []
    for part, root in _roots(req["workdir"]).items():
        parts[part], left_out = tar_tree(root)
        skipped += left_out
    return tar_of(parts), skipped


def tar_of(parts: dict[str, bytes]) -> bytes:
    """One tar holding each named part as a plain file: the snapshot's outer layer."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in parts.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def load_snapshot(blob: bytes, workdir: str) -> dict:
    """Unpack a `take_snapshot` tar here: the trees into their roots; the shells' state back to the server, with
    the names of shells whose directory did not come back."""
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        parts = {}
        for member in tar.getmembers():
            source = tar.extractfile(member) if member.isfile() else None
            if source is not None:
                parts[member.name] = source.read()
    for part, root in _roots(workdir).items():
        untar_tree(parts[part], root)
    shells = json.loads(parts[SHELLS_PART])
    gone = [name for name, shell in shells.items() if not os.path.isdir(str(shell.get("cwd")))]
    return {"shells": shells, "gone": gone}


def _roots(workdir: str) -> dict:
    return {"data.tar": ROOT} if workdir == ROOT else {"data.tar": ROOT, "work.tar": workdir}


def handle(req: dict) -> dict:
    try:
        if req["op"] == "exec":
            reply = run_exec(req, f"{os.getpid()}-{req.get('id')}")
        elif req["op"] in FILE_OPS:
            reply = answer(req)
        elif req["op"] in SNAPSHOT_OPS:
            reply = TRANSFER.answer(req, take_snapshot, lambda blob: load_snapshot(blob, req["workdir"]))
        else:
            reply = {"error": f"unknown op {req['op']!r}"}
    except OSError as exc:
        reply = {"error": f"{exc.strerror or exc}: {getattr(exc, 'filename', '') or ''}".rstrip(": ")}
    except Exception as exc:
        reply = {"error": f"agent failure: {type(exc).__name__}: {exc}"}
    reply["id"] = req.get("id")
    return reply


def _answer(req: dict) -> None:
    line = json.dumps(handle(req)) + "\n"
    with _write_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class Workers:
    """Threads that answer requests, kept for the next one when done (at most `keep` idle at a time).

    Why not a thread per request: starting one costs about 0.07 ms under runc and a millisecond under gVisor,
    on every warm call. Why not a fixed pool: a request must never wait for another (a long command in one
    shell does not hold up the next), so a request that finds no idle thread starts one. Why a cap on idle
    ones: threads count against the container's pids limit, which is the user's process budget."""

    def __init__(self, keep: int = 4) -> None:
        self._keep = keep
        self._idle = 0
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[dict] = queue.SimpleQueue()

    def submit(self, req: dict) -> None:
        with self._lock:
            reuse = self._idle > 0
            if reuse:
                self._idle -= 1  # that idle thread is now promised this request
        if reuse:
            self._queue.put(req)
        else:
            threading.Thread(target=self._work, args=(req,), daemon=True).start()

    def _work(self, req: dict) -> None:
        while True:
            _answer(req)
            with self._lock:
                if self._idle >= self._keep:
                    return
                self._idle += 1
            req = self._queue.get()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--once":
        sys.stdout.write(json.dumps(handle(json.loads(sys.argv[2]))) + "\n")
        return
    sys.stdout.write('{"ready": true}\n')
    sys.stdout.flush()
    workers = Workers()
    for line in sys.stdin:
        if line.strip():
            workers.submit(json.loads(line))


if __name__ == "__main__":
    main()
