"""Erasure: the permissions scenario (erase Alice, prove it), forget_phone's four worlds,
and forget + prove-gone time on repos of 1,000 and 10,000 commits (target < 30 s at 10k)."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import scenario, table, wants_json  # noqa: E402

from mdmem import MemoryRepo  # noqa: E402
from mdmem.model.note import Note  # noqa: E402

T0 = dt.datetime(2026, 10, 1, 9, tzinfo=dt.timezone.utc)
PHONE = "555-0142"


def all_bytes(root: Path) -> bytes:
    objects = subprocess.run(["git", "-C", str(root), "cat-file", "--batch-all-objects", "--batch"],
                             capture_output=True).stdout
    return objects + b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def alice() -> list[list]:
    import bench_permissions as bp

    data = bp.DATA
    with tempfile.TemporaryDirectory() as tmp:
        repo, now = bp.build(Path(tmp) / "mem")
        repo.recall("warm the caches", as_user="alice", now=now)
        receipt = repo.forget(as_user="alice", subject="user:alice", owner="alice", now=now)
        needles = data["erasure"]["needles"]
        report = repo.prove_gone(needles, as_user="alice", subject="user:alice", owner="alice",
                                 allow_paths=receipt["mentions_for_review"])
        audit = (repo.root / "audit/erasures.jsonl").read_text()
        rows = []
        for needle, item in zip(needles, report["needles"]):
            failed = [k for k, c in item["checks"].items() if not c["pass"]]
            near = item["nearest"]
            rows.append([needle, "PASS" if item["pass"] else "FAIL: " + ", ".join(failed),
                         "no" if needle in audit else "yes",
                         f"{near['path'].rsplit('/', 1)[-1]} ({near['cosine']})" if near else "-"])
        rows.append(["(scope checks)", "PASS" if all(c["pass"] for c in report["scope"].values()) else "FAIL",
                     "", ""])
        rows.append(["(mention scan)", f"{len(receipt['mentions'])} live team note(s) for review", "", ""])
        seed = data["erasure"]["seed_result"]
        rows.append(["seed", f"text left in file after delete: {seed['deleted_text_in_file_after_delete_secure_delete_off']}",
                     "", f"nearest cosine {seed['nearest_remaining_cosine']}"])
        return rows


def phone_worlds() -> list[list]:
    expected = scenario("forget_phone.json")["expected"]
    rows = []
    for case in expected:
        quoted = case["world"] != "ordinary line"
        with tempfile.TemporaryDirectory() as tmp:
            repo = MemoryRepo.init(Path(tmp) / "mem", teams={}, now=T0, as_user="mdmem")
            r = repo.remember(f"My phone number is {PHONE}", as_user="ali", kind="profile", subject="user:ali",
                              key="phone", now=T0)
            if quoted:
                repo.remember(f"Session summary: the user gave their number {PHONE} for callbacks",
                              as_user="ali", kind="summary", subject="session:2026-10-01",
                              source="system:consolidate", now=T0)
            repo.recall("phone number", as_user="ali", now=T0)
            before = PHONE.encode() in all_bytes(repo.root)
            repo.forget(as_user="ali", paths=[r.path], scrub=case["scrub"], now=T0)
            after = PHONE.encode() in all_bytes(repo.root)
            ok = (before, after) == (case["before"], case["after"])
            rows.append([case["world"], case["scrub"], before, after, f"{case['before']}/{case['after']}",
                         "match" if ok else "MISMATCH"])
    return rows


def big_repo(path: Path, commits: int) -> MemoryRepo:
    """``commits`` commits through git fast-import (an import), the phone note among them."""
    repo = MemoryRepo.init(path, teams={"payments": ["bob"]}, erasers=["bob"], now=T0, as_user="mdmem")
    head = repo.store.head()
    lines = []
    for i in range(commits):
        key = f"k{i % max(1, commits // 5)}"
        text = f"Fact {i}: setting {key} is {i * 7919 % 10007}" if i != commits // 2 else f"Call Ali on {PHONE}"
        subject = "user:ali" if i == commits // 2 else f"service:svc{i % 40}"
        if i == commits // 2:
            key = "phone"
        note = Note(id=f"01J{i:023d}", kind="fact", subject=subject, key=key, scope="team", team="payments",
                    owner="bob", source="user", valid_from=T0 + dt.timedelta(minutes=i), text=text)
        data = note.dumps().encode()
        note_path = f"team/payments/{subject.replace(':', '/')}/fact/{key}.md"
        ts = int((T0 + dt.timedelta(minutes=i)).timestamp())
        msg = f"remember fact {subject}/{key}\n\nMemory-Op: create\nMemory-Actor: bob\nMemory-Source: user\n".encode()
        lines.append(b"commit refs/heads/main\n")
        lines.append(f"committer bob <bob@mdmem.invalid> {ts} +0000\n".encode())
        lines.append(f"data {len(msg)}\n".encode() + msg)
        if i == 0:
            lines.append(f"from {head}\n".encode())
        lines.append(f"M 100644 inline {note_path}\ndata {len(data)}\n".encode() + data + b"\n")
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet", "--force"], input=b"".join(lines), check=True)
    subprocess.run(["git", "-C", str(path), "reset", "-q", "--hard", "main"], check=True)
    return MemoryRepo.open(path)


def timing(as_json: bool) -> list[list]:
    rows = []
    for n in (1000, 10000):
        with tempfile.TemporaryDirectory() as tmp:
            repo = big_repo(Path(tmp) / "mem", n)
            repo.reindex()
            t0 = time.perf_counter()
            receipt = repo.forget(as_user="bob", texts=[PHONE],
                                  paths=["team/payments/user/ali/fact/phone.md"])
            t1 = time.perf_counter()
            report = repo.prove_gone([PHONE], as_user="bob", owner="bob")
            t2 = time.perf_counter()
            rows.append([f"{n:,}", receipt["counts"]["commits_rewritten"], f"{t1 - t0:.1f}", f"{t2 - t1:.1f}",
                         f"{t2 - t0:.1f}", "PASS" if report["needles"][0]["pass"] else "FAIL"])
    return rows


def main():
    as_json = wants_json()
    table("permissions_and_erasure: erase Alice (subject + owner), then prove-gone",
          ["needle", "prove-gone", "receipt free of needle", "nearest remaining (pointer)"], alice(),
          as_json=as_json)
    table("forget_phone: is the number in any stored byte (every object decompressed, every file)?",
          ["world", "scrub copies", "before", "after", "expected before/after", "result"], phone_worlds(),
          as_json=as_json)
    if "--quick" not in sys.argv:
        table("erasure time (forget by path + text, then prove-gone)",
              ["commits", "commits rewritten", "forget s", "prove-gone s", "total s", "proof"], timing(as_json),
              as_json=as_json)


if __name__ == "__main__":
    main()
