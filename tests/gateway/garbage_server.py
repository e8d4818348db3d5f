"""An upstream that answers garbage, for the gateway's bad-input tests.

Usage: python tests/gateway/garbage_server.py --port 0 --mode html|badjson|badsse|hugeint|slowheaders
Prints `READY <port>`.
"""

from __future__ import annotations

import argparse
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODIES = {
    "html": ("text/html", b"<html>not mcp</html>"),
    "badjson": ("application/json", b"{this is not json"),
    "badsse": ("text/event-stream", b"event: message\ndata: {garbage\n\n"),
    # JSON, but past the digits Python parses (4300): not a reply the gateway can read
    "hugeint": ("application/json", b'{"jsonrpc": "2.0", "id": 7, "result": {"n": ' + b"9" * 5000 + b"}}"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", default="html")
    args = parser.parse_args()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            ctype, body = BODIES[args.mode]
            self.send_response(200)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_DELETE = do_GET = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        time.sleep(0)


if __name__ == "__main__":
    main()
