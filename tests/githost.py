"""A real git host for the tests: gitolite3 behind an sshd of its own on 127.0.0.1.

One host per test session (per xdist worker): a system user created for it (unlocked with
``usermod -p '*'``: sshd with ``UsePAM no`` refuses the keys of a locked account), ``gitolite
setup`` as that user, sshd with its own config, host key, pid file and a free port, one ssh key
per test person. Tests create their repositories on it (each under a namespace of its own, so
tests never share a repository) by pushing rules to gitolite-admin, as a host's admin would.

Needs root (a user, an sshd) and Debian's gitolite3 + openssh-server; without them the tests
skip with the reason, except under CI=true where the host's absence is a failure.
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PEOPLE = ("alice", "bob", "carol", "dana")
ADMIN = "admin"
SSHD = "/usr/sbin/sshd"


class HostUnavailable(Exception):
    """Why this machine cannot run the host (no root, a package missing)."""


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "the git host needs root (it creates a system user and runs sshd)"
    for tool, package in (("gitolite", "gitolite3"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client"),
                          ("useradd", "passwd"), ("runuser", "util-linux")):
        if not shutil.which(tool):
            return f"`{tool}` is missing (apt-get install {package})"
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing (apt-get install openssh-server)"
    return None


def _run(*args: str, env: dict | None = None, cwd: Path | None = None, input: str | None = None) -> str:
    r = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=cwd, input=input)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {r.stdout}{r.stderr}")
    return r.stdout


def _retry_locked(*args: str) -> None:
    """useradd/usermod lock /etc/passwd; another session (an xdist worker) may hold it a moment."""
    for _ in range(50):
        r = subprocess.run(list(args), capture_output=True, text=True)
        if r.returncode == 0:
            return
        if "lock" not in r.stderr:
            break
        time.sleep(0.2)
    raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {r.stderr}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class GitHost:
    base: Path                     # root-owned scratch: keys, sshd files, admin clone
    home: Path                     # the gitolite user's home (repositories/ lives here)
    user: str
    port: int
    sshd: subprocess.Popen
    keys: dict[str, Path] = field(default_factory=dict)   # person -> private key file
    _counter: int = 0

    # -- how a person reaches the host ------------------------------------------------------
    def ssh_command(self, person: str) -> str:
        """What GIT_SSH_COMMAND is for ``person``: their key only, no host-key prompts."""
        return (f"ssh -F /dev/null -i {self.keys[person]} -o IdentitiesOnly=yes -o BatchMode=yes "
                "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
                f"-p {self.port}")

    def env(self, person: str, base: dict | None = None) -> dict:
        """An environment whose git and ssh act as ``person`` on this host."""
        env = dict(os.environ if base is None else base)
        env["GIT_SSH_COMMAND"] = self.ssh_command(person)
        env.pop("SSH_AUTH_SOCK", None)
        return env

    def url(self, name: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}/{name}"

    @property
    def address(self) -> str:
        """The ssh address (user@host:port) mdmem's host commands take."""
        return f"{self.user}@127.0.0.1:{self.port}"

    def git(self, person: str, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(["git", *args], capture_output=True, text=True, env=self.env(person), cwd=cwd)
        if check and r.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} as {person}: {r.stdout}{r.stderr}")
        return r

    def ssh(self, person: str, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([*self.ssh_command(person).split(), f"{self.user}@127.0.0.1", *command],
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise AssertionError(f"ssh {' '.join(command)} as {person}: {r.stdout}{r.stderr}")
        return r

    def bare(self, name: str) -> Path:
        """A repository's folder on the host (what `mdmem guard` protects)."""
        return self.home / "repositories" / f"{name}.git"

    def namespace(self) -> str:
        """A fresh repository namespace for one test (``t3`` -> repositories ``t3/team/payments``...)."""
        self._counter += 1
        return f"t{os.getpid()}x{self._counter}"

    # -- the admin's side -------------------------------------------------------------------
    @property
    def admin_url(self) -> str:
        return self.url("gitolite-admin")

    def run_as_host(self, *args: str) -> str:
        """A command as the gitolite user (what an admin with a shell on the host runs)."""
        return _run("runuser", "-u", self.user, "--", "env", f"HOME={self.home}", f"PATH={os.environ['PATH']}", *args)

    def add_people(self, people) -> None:
        """Give gitolite each person's public key (keydir/<person>.pub), as its admin does."""
        _add_people(self, people)

    def stop(self) -> None:
        if self.sshd.poll() is None:
            self.sshd.send_signal(signal.SIGTERM)
            try:
                self.sshd.wait(10)
            except subprocess.TimeoutExpired:
                self.sshd.kill()
                self.sshd.wait()
        # sshd's children (a session still open) are in the process group it was started in.
        try:
            os.killpg(self.sshd.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _retry_locked("userdel", self.user)
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)


def start_host() -> GitHost:
    """Start a host: raises HostUnavailable naming what is missing, RuntimeError if a step fails."""
    reason = unavailable_reason()
    if reason:
        raise HostUnavailable(reason)
    base = Path(tempfile.mkdtemp(prefix="mdmem-githost-"))
    user = f"mdmemgit{os.getpid()}"[:31]
    # Not under the test's temp folder: pytest-xdist gives each worker a private (0700) one, and
    # the gitolite user must reach its home.
    home = Path(tempfile.mkdtemp(prefix="mdmem-gitolite-", dir="/tmp"))
    sshd = None
    try:
        subprocess.run(["userdel", user], capture_output=True)     # a leftover of a killed session
        _retry_locked("useradd", "--system", "--home-dir", str(home), "--shell", "/bin/sh", "--no-create-home", user)
        _retry_locked("usermod", "-p", "*", user)     # a locked account's keys are refused (UsePAM no)
        pw = pwd.getpwnam(user)
        os.chown(home, pw.pw_uid, pw.pw_gid)
        home.chmod(0o755)
        keys = {}
        for person in (ADMIN, *PEOPLE):
            key = base / "keys" / person
            key.parent.mkdir(exist_ok=True)
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", person, "-f", str(key))
            keys[person] = key
        admin_pub = home / "admin.pub"
        shutil.copy(base / "keys" / "admin.pub", admin_pub)
        os.chown(admin_pub, pw.pw_uid, pw.pw_gid)
        as_host = ["runuser", "-u", user, "--", "env", f"HOME={home}", f"PATH={os.environ['PATH']}"]
        _run(*as_host, "gitolite", "setup", "-pk", str(admin_pub))
        # Repositories gitolite creates from now on get HEAD -> main, the branch mdmem pushes
        # (docs/sharing.md); after setup: gitolite-admin itself must stay on master.
        _run(*as_host, "git", "config", "--global", "init.defaultBranch", "main")
        # sshd's privilege separation folder; Debian creates it only when the service starts.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key"))
        port = _free_port()
        config = base / "sshd_config"
        config.write_text(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host_key'}\nPidFile {base / 'sshd.pid'}\n"
            "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            f"AuthorizedKeysFile {home}/.ssh/authorized_keys\nAllowUsers {user}\nStrictModes no\n"
            "PermitRootLogin no\nLogLevel ERROR\nMaxStartups 100:30:200\nMaxSessions 50\n")
        sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                                stderr=open(base / "sshd.log", "wb"), start_new_session=True)
        host = GitHost(base=base, home=home, user=user, port=port, sshd=sshd, keys=keys)
        _wait_for(host)
        host.add_people(PEOPLE)
        return host
    except BaseException:
        if sshd is not None and sshd.poll() is None:
            sshd.kill()
            sshd.wait()
        subprocess.run(["userdel", user], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
        log = base / "sshd.log"
        if log.exists():
            print(log.read_text(errors="replace"))
        shutil.rmtree(base, ignore_errors=True)
        raise


def _wait_for(host: GitHost, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if host.sshd.poll() is not None:
            raise RuntimeError(f"sshd exited {host.sshd.returncode}: {(host.base / 'sshd.log').read_text()}")
        r = host.ssh(ADMIN, "info", check=False)
        if r.returncode == 0:
            return
        last = r.stderr
        time.sleep(0.1)
    raise RuntimeError(f"the git host did not answer in {timeout}s: {last}")


def _add_people(host: "GitHost", people) -> None:
    admin = host.base / "gitolite-admin"
    if not admin.exists():
        host.git(ADMIN, "clone", "-q", host.admin_url, str(admin))
        _run("git", "-C", str(admin), "config", "user.name", "host admin")
        _run("git", "-C", str(admin), "config", "user.email", "admin@host.invalid")
    for person in people:
        shutil.copy(host.keys[person].with_suffix(".pub"), admin / "keydir" / f"{person}.pub")
    _run("git", "-C", str(admin), "add", "-A")
    _run("git", "-C", str(admin), "commit", "-q", "-m", "people's keys")
    host.git(ADMIN, "push", "-q", "origin", "HEAD", cwd=admin)



def session_host():
    """The session fixture's body: a started host, stopped after; a skip (or under CI=true a
    failure) naming why this machine cannot run one."""
    import pytest

    try:
        host = start_host()
    except HostUnavailable as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the git host tests must run in CI: {e}")
        pytest.skip(f"no git host: {e}")
    try:
        yield host
    finally:
        host.stop()


def every_byte(folder: Path) -> bytes:
    """Every file under ``folder`` (.git included) as stored, plus every git object it holds,
    decompressed (a pack stores text zlib-compressed, so a raw scan alone would miss it)."""
    chunks = []
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                chunks.append(p.read_bytes())
    for git_dir in {p.parent for p in Path(folder).rglob("HEAD") if (p.parent / "objects").is_dir()}:
        r = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch",
                            "--unordered"], capture_output=True)
        chunks.append(r.stdout)
    return b"\n".join(chunks)
