"""Policy: the one visibility rule and write permissions (access.py), every write-gate check
(gate.py) and who committed each note (verify.py). It may read notes and config but never touches
git, the index, the views or the operations."""
