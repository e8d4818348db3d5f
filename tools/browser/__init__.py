"""The browser tool server: gpt-oss search / open / find over MCP, offline by default."""
