"""Operations behind the MemoryRepo facade: functions of an open repo's state (state.py),
one module per concern (read, write, holds, review, lifecycle, render, searching, founding,
consolidate, importing, scaffold). They never import the facade (repo.py)."""
