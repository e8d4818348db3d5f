"""What the orchestrator lets in and out: keys, per-key limits, body bounds, MCP servers, approvals, addresses."""
