"""Storage: the only code that touches git (pygit2 or the git binary) and the work tree; GitStore
(gitstore.py) is the one seam, each concern a mixin module of its own. It knows nothing of kinds,
visibility or the index, and never imports the layers above it."""
