"""Shared kit for every toolfleet service: settings, logging, sessions, the MCP tool-server app, the CLI."""
