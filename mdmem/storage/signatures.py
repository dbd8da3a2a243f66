"""Who a commit is by: identities for actors, the committer, SSH-signed commits and their verification."""
from __future__ import annotations

import datetime as _dt
import subprocess
from pathlib import Path


import pygit2

from ..errors import GitFailed


COMMITTER = ("mdmem", "mdmem@localhost")


def default_identity(actor: str) -> tuple[str, str]:
    return actor, f"{actor}@mdmem.invalid"


def signature(name: str, email: str, when: _dt.datetime) -> pygit2.Signature:
    return pygit2.Signature(name, email, int(when.timestamp()), 0)


class Signing:
    """GitStore's signatures methods (mixed into :class:`mdmem.storage.gitstore.GitStore`)."""

    def signed_commit(self, author, committer, message: str, tree, parents) -> pygit2.Oid:
        """A commit signed with git's SSH signing (``ssh-keygen -Y sign -n git``), as
        ``git commit -S`` with gpg.format=ssh would make it."""
        content = self.repo.create_commit_string(author, committer, message, tree, parents)
        proc = subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "git", "-f", str(self.signing_key)],
                              input=content.encode("utf-8"), capture_output=True)
        if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
            raise GitFailed(f"signing: ssh-keygen could not sign with {self.signing_key}: "
                             f"{proc.stderr.decode(errors='replace').strip()}")
        return self.repo.create_commit_with_signature(content, proc.stdout.decode("ascii"))

    def signatures(self, commits: list[str], allowed_signers: bytes | None) -> dict[str, tuple[str, str]]:
        """commit -> (git's %G? status letter, signer principal), checked against an allowed-signers
        file given as bytes (written to a scratch file inside .git/, removed after)."""
        if not commits:
            return {}
        scratch = Path(self.repo.path) / "mdmem-allowed-signers"
        scratch.write_bytes(allowed_signers or b"")
        try:
            out = self.git("-c", f"gpg.ssh.allowedSignersFile={scratch}", "log", "--no-walk=unsorted",
                           "--format=%H%x1f%G?%x1f%GS", *commits, check=False)
        finally:
            scratch.unlink(missing_ok=True)
        found = {}
        for line in out.splitlines():
            parts = line.split("\x1f")
            if len(parts) == 3:
                found[parts[0]] = (parts[1], parts[2])
        return found
