"""The `mdmem` command line: one module per command (cmd_*.py), wired in main.py, with launch.py the
entry point and daemon.py the long-lived helper. With mcp/, the only code that reads the environment,
prints to a person or maps errors to exit codes."""
