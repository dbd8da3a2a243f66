"""Storage: the only code that touches git (pygit2 or the git binary) and the work tree."""
