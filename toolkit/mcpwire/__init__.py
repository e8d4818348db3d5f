"""MCP over streamable HTTP without the SDK: the wire that the gateway's upstream pool and the orchestrator share."""
