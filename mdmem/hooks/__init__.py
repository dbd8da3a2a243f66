"""mdmem's git hooks: install.py says where they are installed from and lays them down (used by
init and every command's first look at a clone); run.py is what they run at each commit, merge and
rebase. install.py never imports the facade; run.py opens the repository like any command does."""
