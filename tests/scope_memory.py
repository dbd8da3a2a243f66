"""A memory of every root in one repository, as mdmem kept it before scope repositories: what
`mdmem split` turns into scope repositories, and what the host tests then serve from a real host."""
from __future__ import annotations

from pathlib import Path

from mdmem import MemoryRepo

T0, T1, T2 = "2026-10-01T09:00:00Z", "2026-10-02T09:00:00Z", "2026-10-03T09:00:00Z"
ALICE_OLD = "Alice is interviewing at Acme next week"
ALICE_NEW = "Alice accepted the offer from Acme Corp"
BOB_PRIVATE = "Bob keeps his bike lock code at 8812"
PAYMENTS = "Payments deploy on Tuesdays after the standup"
SEARCH = "Search reindexes nightly at two in the morning"
ERASED = "Carol's badge number is 99-ZEBRA-1717 do not share"
OPS = "Ops rotates the database credentials every quarter"
# notes about bob in three team repositories (what an erasure of user:bob spans)
ABOUT_BOB = {"team/payments": "Bob covers the payments pager on weekends in December",
             "team/search": "Bob asked search for a faster synonym rebuild last sprint",
             "team/ops": "Bob holds the spare key for the ops server cage"}
TEAMS = {"payments": ["alice", "bob", "dana"], "search": ["carol", "dana"], "ops": ["bob", "carol", "dana"]}
ROOTS = ["private/alice", "private/bob", "private/carol", "private/dana", "team/ops", "team/payments", "team/search"]
# what each root's repository may hold; anything from another root is a leak
TEXTS = {"private/alice": [ALICE_OLD, ALICE_NEW], "private/bob": [BOB_PRIVATE],
         "team/payments": [PAYMENTS, "Invoices are cut by the scanner tool", ABOUT_BOB["team/payments"]],
         "team/search": [SEARCH, ABOUT_BOB["team/search"]], "team/ops": [OPS, ABOUT_BOB["team/ops"]]}


def old_memory(path: Path) -> Path:
    """One repository of every root, as before scope repositories: history (a note in two
    versions), a hold waiting for review, an erasure receipt."""
    repo = MemoryRepo.init(path, teams=TEAMS,
                           erasers=["dana"], as_user="dana", now=T0, embedder="none")
    with repo:
        repo.remember(ALICE_OLD, as_user="alice", kind="profile", subject="user:alice", key="job", scope="private",
                      now=T0)
        repo.remember(ALICE_NEW, as_user="alice", kind="profile", subject="user:alice", key="job", scope="private",
                      now=T1)
        repo.remember(BOB_PRIVATE, as_user="bob", kind="profile", subject="user:bob", key="bike", scope="private",
                      now=T0)
        repo.remember(PAYMENTS, as_user="bob", kind="fact", subject="service:billing", key="deploy.window",
                      scope="team", team="payments", now=T0)
        repo.remember(SEARCH, as_user="carol", kind="fact", subject="service:search", key="reindex", scope="team",
                      team="search", now=T0)
        repo.remember(ERASED, as_user="carol", kind="fact", subject="service:search", key="badge", scope="team", new_key=True,
                      team="search", now=T1)
        repo.remember(OPS, as_user="carol", kind="fact", subject="service:db", key="rotation", scope="team",
                      team="ops", now=T0)
        for root, text in ABOUT_BOB.items():
            team = root.split("/")[1]
            writer = {"payments": "alice", "search": "carol", "ops": "carol"}[team]
            repo.remember(text, as_user=writer, kind="fact", subject="user:bob", key=f"{team}.note", scope="team",
                          team=team, new_key=True, now=T1)
        held = repo.remember("Invoices are cut by the scanner tool", as_user="bob", kind="fact",
                             subject="service:billing", key="invoices", scope="team", team="payments",
                             source="tool:scanner", new_key=True, now=T1)
        assert held.status == "held"
        repo.forget(as_user="dana", paths=["team/search/service/search/fact/badge.md"], now=T2)
    return path


