"""Who a bearer token names: the verified person, agent label and capabilities of one HTTP
request to the memory server. Static tokens (a server-side file of salted hashes) and JWT
access tokens from an organisation's identity provider; the MCP server adapts both to the
SDK's verifier interface (mcp/http.py)."""
