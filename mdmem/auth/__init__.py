"""Who a bearer token names: the verified person, agent label and capabilities of one HTTP
request to the memory server. Static tokens (a server-side file of salted hashes,
static_tokens.py) and JWT access tokens from an organisation's identity provider
(jwt_tokens.py); the MCP server adapts both to the SDK's verifier interface (mcp/http.py) and
checks the person against the memory. Knows nothing of the memory itself: never imports the
facade, ops/, search/ or the boundaries (cli/, mcp/), never reads the environment or prints."""
