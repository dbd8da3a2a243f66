"""Search: the disposable index beside the notes (Whoosh, vectors, embedders) and recall over it;
notes are the truth and everything here can be rebuilt from them. It reads git only through storage/
and never imports ops/, erasure/, the facade or the boundaries."""
