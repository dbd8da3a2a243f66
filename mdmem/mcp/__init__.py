"""The MCP server: one identity per server, capabilities granted separately, one tool per module
(tools/). A boundary like cli/: it may read the environment and map errors, and holds no operation's
logic (each tool calls the facade)."""
