"""The MCP server: one identity per server, one tool per module."""
