"""The `python` MCP tool server: stateful sandboxed Python sessions (docker or local bubblewrap backend)."""
