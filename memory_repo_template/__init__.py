"""Data package: the files `mdmem init` lays down in a new memory repository."""
