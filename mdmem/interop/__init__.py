"""Meeting agents where they keep memory: Claude's memory tool, Claude Code's hooks and files,
Codex's AGENTS.md, basic-memory and Obsidian vaults, Letta memory repositories, mem0 exports.
Each module speaks one format, on top of the MemoryRepo facade and its write gate."""
