"""MCP tool servers, one package per namespace."""
