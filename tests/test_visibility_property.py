"""Property: whatever the users, teams and notes, recall never returns a note the asker
may not see: not ranked, not in history, not at a past time."""
import datetime as dt
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdmem import MemoryRepo, Refused

USERS = ["ann", "ben", "cat", "dov"]
WORDS = ["deploy", "billing", "window", "refund", "search", "ranking", "postgres", "standup", "alice", "secret"]
T0 = dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)

teams_st = st.dictionaries(st.sampled_from(["red", "blue", "green"]),
                           st.lists(st.sampled_from(USERS), min_size=1, max_size=3, unique=True),
                           min_size=1, max_size=3)
note_st = st.tuples(st.sampled_from(USERS), st.booleans(), st.sampled_from(["red", "blue", "green"]),
                    st.sampled_from(["service:a", "service:b"]), st.sampled_from(["k1", "k2", "k3"]),
                    st.lists(st.sampled_from(WORDS), min_size=2, max_size=5), st.integers(0, 48))


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(teams=teams_st, notes=st.lists(note_st, min_size=1, max_size=10),
       asker=st.sampled_from(USERS), query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_recall_never_returns_what_the_asker_may_not_see(teams, notes, asker, query):
    with tempfile.TemporaryDirectory() as tmp:
        repo = MemoryRepo.init(Path(tmp) / "m", teams=teams, now=T0, as_user="mdmem", people=USERS)
        for user, private, team, subject, key, words, hour in sorted(notes, key=lambda n: n[-1]):
            kw = dict(as_user=user, kind="fact", subject=subject, key=key, new_key=True,
                      now=T0 + dt.timedelta(hours=hour))
            if not private:
                kw.update(scope="team", team=team)
            try:
                repo.remember(" ".join(words), **kw)
            except Refused:
                pass  # not a member: the gate said no, which is the point
        allowed = set(repo.access.readable_roots(asker))
        now = T0 + dt.timedelta(hours=60)
        q = " ".join(query)
        for kwargs in ({}, {"include_history": True}, {"at": T0 + dt.timedelta(hours=24)}, {"kinds": ["fact"]},
                       {"subject": "service:a"}, {"subject": "service:b", "include_history": True}):
            for hit in repo.recall(q, as_user=asker, k=20, now=now, **kwargs):
                root = f"team/{hit.team}" if hit.scope == "team" else f"private/{hit.owner}"
                assert root in allowed, (asker, hit.path, kwargs)
                assert "/".join(hit.path.split("/")[:2]) in allowed
                assert hit.subject == kwargs.get("subject", hit.subject)
        repo.close()
