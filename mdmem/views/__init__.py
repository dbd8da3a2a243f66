"""MEMORY.md views: what an agent reads at startup, rendered from the notes (render.py) and the one
definition of which views a tree holds and whether they are fresh (fresh.py). Views never decide
visibility themselves (policy/access.py does) and never import ops/ or the facade."""
