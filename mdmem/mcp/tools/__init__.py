"""MCP tools, one per module."""
