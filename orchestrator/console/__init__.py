"""The operator console at `/console`: server-rendered pages over this replica's state and the gateway's admin API."""
