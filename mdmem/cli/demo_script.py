"""The demo's steps, kept apart from the command so tests can run them."""
from __future__ import annotations

from pathlib import Path

from ..errors import Refused
from ..repo import MemoryRepo

T0 = "2026-10-01T09:00:00Z"
T1 = "2026-10-15T09:00:00Z"


def walk(path: Path) -> list[dict]:
    steps: list[dict] = []

    def step(title: str, output: str) -> None:
        steps.append({"title": title, "output": output})

    repo = MemoryRepo.init(path, teams={"payments": ["alice", "bob", "dana"], "search": ["carol"]}, erasers=["dana"],
                           now=T0, as_user="alice")
    step("init", f"memory repo at {path} with team payments = alice, bob, dana and team search = carol; "
         "dana may erase")
    r = repo.remember("Billing deploys only on Tuesdays and Thursdays", as_user="bob", kind="fact",
                      subject="service:billing", key="deploy.window", scope="team", team="payments", now=T0)
    step("remember (bob, team fact)", f"{r.status}: {r.path}")
    r = repo.remember("Billing deploys any weekday before 3pm", as_user="bob", kind="fact",
                      subject="service:billing", key="deploy.window", scope="team", team="payments", now=T1)
    step("supersede by key", f"{r.status}: {r.path} (superseded version {r.superseded[:10]})")
    r = repo.remember("I only deploy billing on Mondays because of the finance close", as_user="alice",
                      kind="fact", subject="service:billing", key="deploy.window", scope="private", now=T1)
    step("a private note under the same key", f"{r.status}: {r.path} (the team fact stays live)")
    try:
        repo.remember("Billing deploys whenever CI is green", as_user="bob", kind="fact",
                      subject="service:billing", key="deploys", scope="team", team="payments", now=T1)
    except Refused as exc:
        step("the gate refuses a paraphrase under a new key", str(exc))
    r = repo.remember("Billing p99 latency is 180ms (from the dashboard)", as_user="bob", kind="fact",
                      subject="service:billing", key="latency.p99", scope="team", team="payments",
                      source="tool:grafana", new_key=True, now=T1)
    step("an untrusted source is held for review", f"{r.status}: review id {r.review_id} ({r.reason})")
    got = repo.get(as_user="dana", subject="service:billing", kind="fact", key="deploy.window", now=T1)
    step("get (dana)", f"{got.path}: {got.note.text}")
    hist = repo.history(as_user="bob", subject="service:billing", kind="fact", key="deploy.window",
                        scope="team", team="payments")
    step("history from git (bob)", "\n".join(
        f"{v.commit[:10]} {v.time:%Y-%m-%d} {v.op:<9} {v.actor}: {v.note.text}" for v in hist))
    repo.remember("Search reindexes nightly at 2am", as_user="carol", kind="fact", subject="service:search",
                  key="reindex", scope="team", team="search", now=T1)
    repo.remember("Alice's phone is 555-0142", as_user="alice", kind="profile", subject="user:alice",
                  key="phone", now=T1)
    repo.remember("Refunds are allowed within 30 days", as_user="dana", kind="fact", subject="service:billing",
                  key="refund.window", scope="team", team="payments", new_key=True, now=T1)
    hits = repo.recall("When is billing allowed to deploy?", as_user="dana", now=T1)
    step("recall (dana): the current team fact, never Alice's private note",
         "\n".join(f"{h.score:.3f} {h.path}: {h.text}" for h in hits))
    past = repo.recall("When could billing deploy before?", as_user="dana", include_history=True, now=T1)
    step("recall with history: what was it before?", f"{past[0].text} (superseded)")
    step("startup view (bob, first lines)", "\n".join(repo.startup(as_user="bob", now=T1).splitlines()[:8]))
    receipt = repo.forget(as_user="alice", subject="user:alice", now=T1)
    step("forget (alice erases her own subject)",
         f"rewrote {receipt.counts['commits_rewritten']} commit(s); receipt {receipt.id} in audit/erasures.jsonl")
    own = repo.prove_gone(["555-0142"], as_user="alice", subject="user:alice")
    proof = repo.prove_gone(["555-0142"], as_user="dana", subject="user:alice")
    step("prove-gone", f"alice: {own.verdict} (she cannot read team/search; {', '.join(own.complete_by)} can)\n"
         f"dana: {proof.verdict}: git objects, reflogs, work tree, index, vectors, cache and views hold no copy\n"
         "cannot vouch for: " + "; ".join(proof.cannot_reach[:2]))
    repo.close()
    return steps
