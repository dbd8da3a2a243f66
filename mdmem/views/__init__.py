"""MEMORY.md views: what an agent reads at startup, derived from the notes."""
