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


def test_the_lock_free_quiet_check_sees_every_erasure_look_would_and_nothing_else(tmp_path):
    # The HTTP server asks quiet() on its event loop before each call and hops to a thread for
    # look() only when it says False: a quiet() that missed an erasure would answer from caches
    # holding the erased text.
    with MemoryRepo.init(tmp_path / "mem", teams=TEAMS, erasers=["dana"], now=T0, as_user="dana") as repo:
        repo.remember(SECRET, as_user="dana", kind="fact", subject="service:vault", key="key.place", scope="team",
                      team="payments", now=T0)
        restart = RestartOnErasure([repo.root], since_ns=started_ns({}))
        assert restart.quiet() and restart.quiet()  # asking records nothing
        repo.remember("Billing deploys on Tuesdays", as_user="dana", kind="fact", subject="service:billing",
                      key="deploy.day", scope="team", team="payments", now=T0)
        assert restart.quiet()  # a write is not an erasure
        repo.forget(as_user="dana", paths=["team/payments/service/vault/fact/key.place.md"], now=T1)
        assert not restart.quiet() and not restart.quiet()  # until look() has seen it...
        assert restart.look()
        assert not restart.quiet()  # ...and then for good: the server is on its way out
