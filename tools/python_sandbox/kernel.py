"""The resident interpreter that runs *inside* a sandbox: one per session, state kept between calls.

Stdlib only, so it runs in any image with a `python3`. It is started as
`python3 -u -c <program> <config json>` (`toolkit.sandbox.file_tools.program`: this source after the kit's
stdlib-only `files.py`, which it imports as in the tree) and speaks JSON lines on the fds it was given as
stdin/stdout; it then points fds 0-2 away from the protocol, so user code (even a subprocess
writing to fd 1) can never corrupt a reply. Each request `{"id", "code", "timeout_s"}` gets one
reply `{"id", "output", "result", "error", "images", "timed_out", "truncated"}`. A request with an `op`
(`write`, `read`, `list`) moves file bytes in and out of the work dir instead, in chunks, without
touching the user's namespace: `files.answer`'s reply plus the `id`.

Snapshots are made and loaded here, never in the tool server (a snapshot is untrusted bytes): `snapshot` pickles
the user's globals with cloudpickle (bound in read-only by the backend) and a tar of the work dir (`files.tar_tree`),
and answers the names it could not pickle or read; the kit's `files.Transfer` carries the bytes out and in, in
chunks, and `restore` loads them. Modules are not pickled: their names are saved and imported again on restore.
"""

import ast
import base64
import importlib
import io
import json
import os
import resource
import signal
import sys
import traceback
import types

from toolkit.sandbox.files import SNAPSHOT_OPS, Transfer, answer, tar_tree, untar_tree


class Timeout(BaseException):
    """Raised in the user's code when its time is up; a BaseException so `except Exception` keeps it."""


class CappedText(io.TextIOBase):
    """A text stream that keeps the first `limit` characters and counts what it drops."""

    def __init__(self, shared):
        self._shared = shared

    def writable(self):
        return True

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._shared.add(text)
        return len(text)


class Capture:
    """stdout and stderr of one call, interleaved as the user saw them, capped."""

    def __init__(self, limit):
        self.limit = limit
        self.parts = []
        self.size = 0
        self.dropped = 0

    def add(self, text):
        room = self.limit - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))

    def text(self):
        return "".join(self.parts)


def apply_limits(cfg):
    """rlimits from the launcher: address space, file size, open files, processes, core dumps."""
    limits = {
        "memory_bytes": resource.RLIMIT_AS,
        "file_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
        "processes": resource.RLIMIT_NPROC,
    }
    for key, which in limits.items():
        if cfg.get(key):
            resource.setrlimit(which, (cfg[key], cfg[key]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def on_timeout(signum, frame):
    raise Timeout()


def run_code(code, namespace):
    """exec the code; the value of a trailing expression is returned, as Jupyter shows it."""
    tree = ast.parse(code, "<python>", "exec")
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr):
        tree.body.pop()
        exec(compile(tree, "<python>", "exec"), namespace)
        value = eval(compile(ast.Expression(last.value), "<python>", "eval"), namespace)
        if value is not None:
            namespace["_"] = value
            return repr(value)
        return None
    exec(compile(tree, "<python>", "exec"), namespace)
    return None


def collect_figures(max_images):
    """Open matplotlib figures as base64 PNGs (then closed), when the user imported pyplot."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    images = []
    for num in plt.get_fignums()[:max_images]:
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png")
        images.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    plt.close("all")
    return images


def read_fd_capture(fd, limit):
    """What subprocesses and C code wrote to fds 1 and 2 during the call, capped; then empty it."""
    size = os.fstat(fd).st_size
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, min(size, limit)) if size else b""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return data.decode("utf-8", "replace"), max(0, size - limit)


def reap_strays():
    """Kill and reap every other process in the sandbox (background jobs, fork bombs): we are its pid 1."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


def format_error(exc):
    """A traceback without the kernel's own frames."""
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(type(exc), exc))
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != "<python>":
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def handle(request, namespace, cfg, fd_capture):
    limit = cfg["max_output_chars"]
    capture = Capture(limit)
    sys.stdout = sys.stderr = CappedText(capture)
    reply = {"id": request.get("id"), "result": None, "error": None, "timed_out": False, "images": []}
    signal.setitimer(signal.ITIMER_REAL, float(request.get("timeout_s") or cfg["timeout_s"]))
    try:
        reply["result"] = run_code(request["code"], namespace)
    except Timeout:
        reply["timed_out"] = True
    except BaseException as exc:
        reply["error"] = format_error(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if os.getpid() != KERNEL_PID:
        os._exit(0)  # a child the user forked must never answer on the protocol
    if os.getpid() == 1:
        reap_strays()
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    try:
        reply["images"] = collect_figures(cfg["max_images"])
    except Exception as exc:
        reply["error"] = (reply["error"] or "") + f"(figures could not be rendered: {exc})\n"
    fd_text, fd_dropped = read_fd_capture(fd_capture, limit)
    capture.add(fd_text)
    if reply["result"] is not None and len(reply["result"]) > limit:
        capture.dropped += len(reply["result"]) - limit
        reply["result"] = reply["result"][:limit]
    reply["output"] = capture.text()
    reply["truncated"] = capture.dropped + fd_dropped
    return reply


SKIPPED = ("__builtins__", "__name__")


def take_snapshot(namespace, workdir):
    """The session as bytes, and the names left out because they cannot be pickled (sockets, threads, locks)."""
    import cloudpickle

    kept, modules, unsaved = {}, {}, []
    for name, value in namespace.items():
        if name in SKIPPED:
            continue
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            continue
        try:
            cloudpickle.dumps(value)
        except Exception:
            unsaved.append(name)
            continue
        kept[name] = value
    files, skipped = tar_tree(workdir)
    blob = cloudpickle.dumps({"globals": kept, "modules": modules, "files": files})
    return blob, sorted(unsaved) + skipped


def rebind(value, namespace):
    """A function defined in the session, given the session's globals again (unpickled, it has a copy)."""
    if not isinstance(value, types.FunctionType) or value.__module__ != "__main__":
        return value
    fresh = types.FunctionType(value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__)
    fresh.__kwdefaults__, fresh.__dict__, fresh.__qualname__ = value.__kwdefaults__, value.__dict__, value.__qualname__
    return fresh


def load_snapshot(blob, namespace, workdir):
    """Load a snapshot into the session; the names whose module no longer imports are returned."""
    import cloudpickle

    state = cloudpickle.loads(blob)
    untar_tree(state["files"], workdir)
    missing = []
    for name, module in state["modules"].items():
        try:
            namespace[name] = importlib.import_module(module)
        except Exception:
            missing.append(name)
    for name, value in state["globals"].items():
        namespace[name] = rebind(value, namespace)
    return missing


def answer_snapshot(request, namespace, workdir, transfer):
    """A snapshot op's reply: the globals pickled with the work dir's files, or loaded back."""
    return transfer.answer(
        request,
        lambda _request: take_snapshot(namespace, workdir),
        lambda blob: {"missing": load_snapshot(blob, namespace, workdir)},
    )


KERNEL_PID = os.getpid()


def main():
    cfg = json.loads(sys.argv[1])
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    fd_capture = os.open(cfg["capture_path"], os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd_capture, 1)
    os.dup2(fd_capture, 2)
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""))
    apply_limits(cfg)
    signal.signal(signal.SIGALRM, on_timeout)
    os.chdir(cfg["workdir"])
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    transfer = Transfer()
    proto_out.write(b'{"ready": true}\n')
    proto_out.flush()
    for line in proto_in:
        try:
            request = json.loads(line)
            if request.get("op") in SNAPSHOT_OPS:
                reply = answer_snapshot(request, namespace, cfg["workdir"], transfer)
            elif "op" in request:
                reply = {**answer(request, cfg["workdir"]), "id": request.get("id")}
            else:
                reply = handle(request, namespace, cfg, fd_capture)
        except Exception as exc:
            reply = {
                "id": None,
                "error": f"kernel: bad request ({exc})",
                "output": "",
                "result": None,
                "images": [],
                "timed_out": False,
                "truncated": 0,
            }
        proto_out.write(json.dumps(reply).encode() + b"\n")
        proto_out.flush()


if __name__ == "__main__":
    main()
