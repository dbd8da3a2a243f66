"""Search: the disposable index beside the notes (Whoosh, vectors, embedders) and recall over it."""
