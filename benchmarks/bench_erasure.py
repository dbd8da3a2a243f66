"""Erasure: the permissions scenario (erase Alice, prove it), forget_phone's four worlds,
kill -9 at random points of a forget (then resume and prove), a team note two people wrote
with one of them erased, a one-character private note erased (nothing else may change), and
forget + prove-gone time on repos of 1,000 and 10,000 commits (target <= 30 s at 10k).

Options: --quick (no timing, fewer kills), --kills N, --json."""
from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import shutil
import signal
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
                                 allow_paths=receipt.mentions_for_review)
        audit = (repo.root / "audit/erasures.jsonl").read_text()
        rows = []
        for needle, item in zip(needles, report.needles):
            failed = [k for k, c in item["checks"].items() if not c["passed"]]
            near = item["nearest"]
            rows.append([needle, "PASS" if item["passed"] else "FAIL: " + ", ".join(failed),
                         "no" if needle in audit else "yes",
                         f"{near['path'].rsplit('/', 1)[-1]} ({near['cosine']})" if near else "-"])
        rows.append(["(scope checks)", "PASS" if all(c["passed"] for c in report.scope.values()) else "FAIL",
                     "", ""])
        rows.append(["(mention scan)", f"{len(receipt.mentions)} live team note(s) for review", "", ""])
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
                              source="system:consolidate", channel="system", now=T0)
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
            rows.append([f"{n:,}", receipt.counts["commits_rewritten"], f"{t1 - t0:.1f}", f"{t2 - t1:.1f}",
                         f"{t2 - t0:.1f}", "PASS" if report.needles[0]["passed"] else "FAIL"])
    return rows


def _git(root, *args) -> bytes:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True).stdout


def _kill_world(path: Path) -> MemoryRepo:
    repo = MemoryRepo.init(path, teams={"payments": ["bob", "dana"]}, erasers=["dana"], now=T0, as_user="mdmem",
                           people=["ali"])
    for i in range(40):
        repo.remember(f"Billing fact {i}: retries wait {i * 3} seconds", as_user="bob", kind="fact",
                      subject=f"service:svc{i % 5}", key=f"k{i}", scope="team", team="payments", new_key=True,
                      now=T0 + dt.timedelta(minutes=i))
    repo.remember(f"Call Ali on {PHONE} after six", as_user="ali", kind="profile", subject="user:ali",
                  key="phone", now=T0)
    repo.remember(f"Session summary: the user gave their number {PHONE} for callbacks", as_user="ali",
                  kind="summary", subject="session:2026-10-01", source="system:consolidate", channel="system", now=T0)
    repo.recall("phone number", as_user="ali", now=T0)
    repo.close()
    return repo


def _cli(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mdmem.cli.main", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_loop(kills: int) -> list[list]:
    """kill -9 a `forget --text` at a random moment, then `forget --resume`; prove-gone must
    pass and no file holding the erased text may be left in the TMPDIR every process was given
    (not /tmp itself: other people's processes write there on this machine)."""
    rng = random.Random(10)
    stats = {"runs": 0, "killed": 0, "journal_left": 0, "resumed_ok": 0, "proofs_passed": 0, "plaintext_left": 0,
             "phases": {}}
    durations = []
    with tempfile.TemporaryDirectory(dir=Path(__file__).parent) as tmp:
        base = Path(tmp)
        tmpdir = base / "tmpdir"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir), "MDMEM_USER": "ali"}
        template = base / "template"
        _kill_world(template)
        i = 0
        while stats["killed"] < kills and i < kills * 3:
            i += 1
            root = base / f"run{i}"
            shutil_copy(template, root)
            stats["runs"] += 1
            t0 = time.perf_counter()
            proc = _cli(["forget", "--text", PHONE, "--repo", str(root)], env)
            if durations:
                time.sleep(rng.uniform(0.2, 1.0) * max(durations))
                if proc.poll() is None:
                    journal = root / ".git/mdmem-erasure/journal.json"
                    phase = "before journal"
                    if journal.exists():
                        try:
                            phase = __import__("json").loads(journal.read_text())["phase"]
                        except ValueError:
                            phase = "journal being written"
                    os.kill(proc.pid, signal.SIGKILL)
                    stats["killed"] += 1
                    stats["phases"][phase] = stats["phases"].get(phase, 0) + 1
            proc.wait()
            if not durations:
                durations.append(time.perf_counter() - t0)
            if (root / ".git/mdmem-erasure/journal.json").exists():
                stats["journal_left"] += 1
            # Any command finishes an interrupted erasure; `forget --resume` says so (exit 6: none was
            # left, the kill came before the journal or after the end) — then run the forget again
            # (exit 6 there: it had finished).
            resume = _cli(["forget", "--resume", "--repo", str(root)], env)
            resume.wait()
            ok = resume.returncode == 0
            if resume.returncode == 6:
                again = _cli(["forget", "--text", PHONE, "--repo", str(root)], env)
                again.wait()
                ok = again.returncode in (0, 6)
            stats["resumed_ok"] += ok
            repo = MemoryRepo.open(root)
            report = repo.prove_gone([PHONE], as_user="ali")
            stats["proofs_passed"] += bool(report.passed) and PHONE.encode() not in all_bytes(root)
            repo.close()
            leaked = [p for p in tmpdir.rglob("*") if p.is_file() and PHONE.encode() in p.read_bytes()]
            stats["plaintext_left"] += len(leaked)
            stats.setdefault("leaked", []).extend(str(p) for p in leaked)
            shutil.rmtree(root, ignore_errors=True)
    phases = ", ".join(f"{k}: {v}" for k, v in sorted(stats["phases"].items()))
    if stats.get("leaked"):
        phases += "; LEFT: " + ", ".join(stats["leaked"][:3])
    return [[stats["runs"], stats["killed"], stats["journal_left"], stats["resumed_ok"], stats["proofs_passed"],
             stats["plaintext_left"], phases]]


def shutil_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


def two_writers() -> list[list]:
    """bob writes a team note, alice supersedes it, bob again; alice leaves the team and an
    eraser erases her. The note survives; her name is nowhere in history."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = MemoryRepo.init(Path(tmp) / "mem", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"],
                               now=T0, as_user="mdmem")
        path = "team/payments/service/billing/fact/deploy.window.md"
        kw = dict(kind="fact", subject="service:billing", key="deploy.window", scope="team", team="payments")
        repo.remember("Billing deploys only on Tuesdays", as_user="bob", now=T0, **kw)
        repo.remember("Billing deploys on Tuesdays and Thursdays", as_user="alice",
                      now=T0 + dt.timedelta(days=1), **kw)
        repo.remember("Billing deploys any weekday before 3pm", as_user="bob", now=T0 + dt.timedelta(days=2), **kw)
        repo.remember("I take Fridays off for climbing", as_user="alice", kind="preference", subject="user:alice",
                      key="dayoff", now=T0 + dt.timedelta(days=2))
        # She left: the team's configuration no longer names her (a reviewed change, as any).
        cfg = repo.root / "mdmem.toml"
        cfg.write_text(cfg.read_text().replace('"alice", ', ""))
        _git(repo.root, "commit", "-qam", "payments: a member left", "--no-verify")
        repo = MemoryRepo.open(repo.root)
        when = T0 + dt.timedelta(days=3)
        receipt = repo.forget(as_user="dana", owner="alice", now=when)
        get_ok = "3pm" in repo.get(as_user="bob", path=path, now=when).note.text
        versions = len(repo.history(as_user="bob", path=path))
        word = re.compile(rb"(?i)(?<![a-z0-9])alice(?![a-z0-9])")
        meta = _git(repo.root, "log", "--all", "--format=%an%n%ae%n%cn%n%ce%n%B")
        in_meta = len(word.findall(meta))
        in_files = 0
        config_versions = 0
        for commit in _git(repo.root, "rev-list", "--all").decode().split():
            for line in _git(repo.root, "ls-tree", "-r", commit).decode().splitlines():
                meta_part, name = line.split("\t", 1)
                data = _git(repo.root, "cat-file", "-p", meta_part.split()[2])
                if name == "mdmem.toml":
                    config_versions += bool(word.search(data))
                    continue
                in_files += len(word.findall(data)) + len(word.findall(name.encode()))
        return [["team note survives (bob's get)", "yes" if get_ok else "NO"],
                ["its versions in bob's history", f"{versions} (expected 3)"],
                ["'alice' in commit authors/committers/messages", in_meta],
                ["'alice' in any file or path of any commit (but mdmem.toml)", in_files],
                ["mdmem.toml versions naming her (configuration: never rewritten)", config_versions],
                ["receipt names her", "yes" if b"alice" in json.dumps(receipt.to_dict()).encode().lower() else "no"]]


def one_character() -> list[list]:
    """bob remembers "y" privately, then it is erased: every other file's bytes in every
    commit must be as they were. By path: nothing else may differ at all. By owner (erasing
    bob): only his identity fields may differ, so with his pseudonym read back as "bob" the
    bytes must be equal."""
    rows = []
    for how in ("path", "owner"):
        with tempfile.TemporaryDirectory() as tmp:
            repo = MemoryRepo.init(Path(tmp) / "mem", teams={"payments": ["bob", "dana"], "search": ["carol"]},
                                   now=T0, as_user="mdmem")
            repo.remember("Yes, every deploy needs a ticket", as_user="dana", kind="fact",
                          subject="service:billing", key="ticket", scope="team", team="payments", now=T0)
            r = repo.remember("y", as_user="bob", kind="fact", subject="user:bob", key="answer",
                              now=T0 + dt.timedelta(hours=1))
            repo.remember("my yearly review is in May", as_user="carol", kind="fact", subject="user:carol",
                          key="review", now=T0 + dt.timedelta(hours=2))
            repo.remember("Search yields 20 results a page", as_user="carol", kind="fact",
                          subject="service:search", key="page", scope="team", team="search",
                          now=T0 + dt.timedelta(hours=3))

            def snapshots(pseudonym: bytes | None = None) -> list[dict]:
                out = []
                for commit in _git(repo.root, "rev-list", "--reverse", "main").decode().split():
                    tree = {}
                    for line in _git(repo.root, "ls-tree", "-r", commit).decode().splitlines():
                        meta_part, name = line.split("\t", 1)
                        if not name.startswith("private/bob/"):
                            data = _git(repo.root, "cat-file", "-p", meta_part.split()[2])
                            tree[name] = data.replace(pseudonym, b"bob") if pseudonym else data
                    if not out or out[-1] != tree:
                        out.append(tree)
                return out

            before = snapshots()
            when = T0 + dt.timedelta(hours=4)
            if how == "path":
                receipt = repo.forget(as_user="bob", paths=[r.path], now=when)
                after = snapshots()
            else:
                receipt = repo.forget(as_user="bob", owner="bob", now=when)
                after = snapshots(receipt.targets["owner"].encode())
            after = after[:-1]  # the last commit is the erasure receipt
            compared = sum(len(t) for t in before)
            diffs = sum(1 for a, b in zip(before, after) for p in set(a) | set(b) if a.get(p) != b.get(p))
            diffs += abs(len(before) - len(after))
            removed = b"[removed]" in _git(repo.root, "log", "--all", "-p", "--format=")
            rows.append([f"--{how}", len(before), compared, diffs, "yes" if removed else "no",
                         "PASS" if diffs == 0 and not removed else "FAIL"])
    return rows


def main():
    as_json = wants_json()
    kills = int(sys.argv[sys.argv.index("--kills") + 1]) if "--kills" in sys.argv else (6 if "--quick" in sys.argv
                                                                                         else 24)
    table("permissions_and_erasure: erase Alice (subject + owner), then prove-gone",
          ["needle", "prove-gone", "receipt free of needle", "nearest remaining (pointer)"], alice(),
          as_json=as_json)
    table("forget_phone: is the number in any stored byte (every object decompressed, every file)?",
          ["world", "scrub copies", "before", "after", "expected before/after", "result"], phone_worlds(),
          as_json=as_json)
    table(f"kill -9 at a random point of `forget --text`, then `forget --resume` (target: {kills} kills)",
          ["runs", "killed", "journal left", "resumed ok", "proofs passed", "plaintext left (must be 0)",
           "killed in phase"], kill_loop(kills), as_json=as_json)
    table("two writers of one team note, one erased (dana erases alice after she left)", ["check", "result"],
          two_writers(), as_json=as_json)
    table("one-character private note erased: every other file's bytes in every commit",
          ["erased by", "commits (snapshots)", "files compared", "files that differ", "[removed] anywhere",
           "result"],
          one_character(), as_json=as_json)
    if "--quick" not in sys.argv:
        table("erasure time (forget by path + text, then prove-gone)",
              ["commits", "commits rewritten", "forget s", "prove-gone s", "total s", "proof"], timing(as_json),
              as_json=as_json)


if __name__ == "__main__":
    main()
