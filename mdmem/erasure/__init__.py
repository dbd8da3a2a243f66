"""Erasure: the plan, the crash-safe journal, the history rewrite, the receipt and the proof that
something is gone (prove-gone). It acts on git only through storage/history_ops and never imports the
facade (repo.py), the CLI or the MCP server."""
