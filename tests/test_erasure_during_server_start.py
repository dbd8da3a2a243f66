"""A server restarts for an erasure that ended while it was starting: what it follows counts
from when it began (or when the process it replaced handed over), not from its first look,
which comes after it opened the repository and may have read the old history."""
import time

from conftest import T0, T1, TEAMS

from mdmem import MemoryRepo
from mdmem.mcp.reexec import RestartOnErasure, started_ns

SECRET = "Dana keeps the vault key under quokkabanana plinth"


def test_an_erasure_ending_after_a_server_began_but_before_its_first_look_restarts_it(tmp_path):
    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        repo.remember(SECRET, as_user="dana", kind="fact", subject="service:vault", key="key.place", scope="team",
                      team="payments", now=T0)
        began = started_ns({})  # the server process begins, then opens the repository...
        repo.forget(as_user="dana", paths=["team/payments/service/vault/fact/key.place.md"], now=T1)  # ...while an erasure ends
        assert RestartOnErasure([repo.root], since_ns=began).look()
        # A server that began after the erasure ended has nothing to restart for, nor one handed
        # over to after it.
        assert not RestartOnErasure([repo.root], since_ns=started_ns({})).look()
        assert not RestartOnErasure([repo.root], since_ns=started_ns({"since_ns": time.time_ns()})).look()
