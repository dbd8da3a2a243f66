"""The disposable cache beside the notes: full-text index, vectors, embedding cache."""
