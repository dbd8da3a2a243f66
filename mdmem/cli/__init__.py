"""The `mdmem` command line: one module per command, wired in :mod:`mdmem.cli.main`."""
