"""The `container` tool: shell commands in a persistent per-session container."""
