"""The domain model: notes, paths, kinds and their contracts, validation, time."""
