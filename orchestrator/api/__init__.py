"""The HTTP and WebSocket routes, one module per resource, each `router(deps) -> APIRouter` (`app.py` includes them)."""
