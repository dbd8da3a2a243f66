"""Policy: who may see and write what (the one visibility rule) and the write gate."""
