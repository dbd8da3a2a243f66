"""The git host's side of sharing: access rules generated from each scope repository's declared
membership (gitolite.conf blocks; Forgejo/Gitea, GitLab and GitHub settings as text), what a
person's key may read on a host, and turning one repository of many roots into scope repositories.
Git and ssh go through storage/host_git.py; who may read or rewrite a root is policy/access.py's."""
