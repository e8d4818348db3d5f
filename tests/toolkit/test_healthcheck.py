"""The image's HEALTHCHECK finds the service's port itself (any --port) and asks it for /healthz or /health."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.support.asgi import free_port, serve_asgi
from toolkit import healthcheck

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(port: int, state: str) -> str:
    return f"   0: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000 10001 0 1 1\n"


def test_only_listening_sockets_count_from_both_tables() -> None:
    tcp = HEADER + row(8802, "0A") + row(40000, "01")  # 01 = an established connection
    tcp6 = HEADER + "   0: 00000000000000000000000000000000:1F40 00000000000000000000000000000000:0000 0A x\n"
    assert healthcheck.listening_ports([tcp, tcp6]) == [8000, 8802]


def _app(path: str) -> Starlette:
    return Starlette(routes=[Route(path, lambda request: PlainTextResponse("ok"))])


def test_a_service_answering_healthz_or_a_worker_answering_health_is_healthy(tmp_path: Path) -> None:
    for path in ("/healthz", "/health"):
        with serve_asgi(_app(path)) as url:
            port = int(url.rsplit(":", 1)[1])
            (tmp_path / "tcp").write_text(HEADER + row(port, "0A"))
            assert healthcheck.main(tmp_path) == 0


def test_nothing_healthy_on_the_listening_ports_is_unhealthy(tmp_path: Path, capsys) -> None:
    with serve_asgi(_app("/other")) as url:
        port = int(url.rsplit(":", 1)[1])
        (tmp_path / "tcp").write_text(HEADER + row(port, "0A") + row(free_port(), "0A"))
        assert healthcheck.main(tmp_path) == 1
    assert "no healthy service" in capsys.readouterr().err
