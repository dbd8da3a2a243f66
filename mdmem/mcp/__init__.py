"""The MCP server: on stdio one identity per server, capabilities granted separately (server.py);
over HTTP (http.py, http_guard.py) the person, agent and capabilities of each request from its
verified bearer token (auth/). One tool per module (tools/). A boundary like cli/: it may read
the environment and map errors, and holds no operation's logic (each tool calls the facade)."""
