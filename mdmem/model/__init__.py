"""The domain model: notes and their frontmatter, paths as identity, kinds and their contracts,
validation and time. It imports nothing of mdmem but errors: no git, no index, no policy, no I/O beyond
parsing the bytes it is given."""
