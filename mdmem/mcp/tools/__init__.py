"""MCP tools, one per module: each exports make(ctx) and DESCRIPTION and calls one facade method.
A tool never decides visibility or provenance itself: the server passes the identity and the channel."""
