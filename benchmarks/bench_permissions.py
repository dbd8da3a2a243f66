"""permissions_and_erasure.json: scope-aware supersession, history, per-scope digests,
and (with recall) the seven leak probes."""
from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import scenario, table, wants_json  # noqa: E402

from mdmem import MemoryRepo, Refused  # noqa: E402

DATA = scenario("permissions_and_erasure.json")
T0 = dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)
PRIVATE = [w for w in DATA["writes"] if w["scope"] == "private"]


def build(path: Path) -> tuple[MemoryRepo, dt.datetime]:
    repo = MemoryRepo.init(path, teams=DATA["teams"], now=T0, as_user="mdmem")
    for w in DATA["writes"]:
        kw = dict(as_user=w["actor"], kind=w["kind"], subject=w["subject"], key=w["key"], scope=w["scope"],
                  team=w.get("team"), now=T0 + dt.timedelta(hours=w["t"]))
        try:
            repo.remember(w["value"], **kw)
        except Refused:
            repo.remember(w["value"], new_key=True, **kw)  # each write here is a distinct fact
    now = T0 + dt.timedelta(hours=3)
    for c in DATA["consolidate"]:
        member = sorted(DATA["teams"][c["team"]])[0]
        repo.consolidate(as_user=member, subject=c["subject"], team=c["team"], now=now)
    return repo, now


def private_text_in(text: str, reader: str) -> bool:
    return any(w["value"] in text for w in PRIVATE if w["actor"] != reader)


def write_checks(repo, now) -> list[list]:
    team = repo.get(as_user="bob", subject="service:billing", kind="fact", key="deploy.window", now=now)
    live_ok = team.path.startswith("team/payments/") and "3pm" in team.note.text
    hist = repo.history(as_user="bob", path=team.path)
    hist_ok = all(not private_text_in(v.note.text, "bob") for v in hist if v.note)
    digests = [s for s in repo.notes(as_user="alice", now=now) + repo.notes(as_user="carol", now=now)
               if s.note.kind == "summary"]
    digest_ok = all(not any(w["value"] in d.note.text for w in PRIVATE) for d in digests)
    return [["team deploy.window stays live beside Alice's private note", "yes" if live_ok else "NO"],
            ["Bob's history of the team fact free of private notes", "yes" if hist_ok else "NO"],
            [f"per-scope digests ({len(digests)}) free of private text", "yes" if digest_ok else "NO"]]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        repo, now = build(Path(tmp) / "mem")
        table("permissions: writes", ["check", "result"], write_checks(repo, now), as_json=wants_json())
        try:
            from bench_permissions_recall import recall_table
        except ImportError:
            return
        recall_table(repo, now, DATA)


if __name__ == "__main__":
    main()
