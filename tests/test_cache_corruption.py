"""Every cache is disposable: each cache file damaged in turn (truncated, garbage,
empty, wrong type); writes and recall go on, with one warning line, and the cache is rebuilt.
The whole matrix over every index file runs in benchmarks/bench_faults.py."""
from __future__ import annotations

import logging
import os
import random
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import T0, T1, TEAMS, run_cli, team_fact

from mdmem import MemoryRepo
from mdmem.storage.gitdir import cache_dir

MODES = ("truncated", "garbage", "empty", "wrong-type")


def corrupt(path, mode: str, seed: int = 7) -> None:
    """Damage one cache file the way a crash, a full disk or a stray tool would."""
    data = path.read_bytes()
    if mode == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif mode == "garbage":
        path.write_bytes(random.Random(seed).randbytes(max(len(data), 64)))
    elif mode == "empty":
        path.write_bytes(b"")
    elif path.suffix == ".json":
        path.write_text("[]")
    elif path.suffix == ".sqlite":
        path.unlink()
        db = sqlite3.connect(str(path))
        db.execute("CREATE TABLE cache (other TEXT)") if "embeddings" in path.name else \
            db.execute("CREATE TABLE meta (blob TEXT PRIMARY KEY, json TEXT, extra INT NOT NULL)")
        db.execute("INSERT INTO " + ("cache VALUES ('x')" if "embeddings" in path.name
                                     else "meta VALUES ('x', '[1]', 1)"))
        db.commit()
        db.close()
    else:  # an index file replaced by a folder
        path.unlink()
        path.mkdir()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """One repo with notes, history, a built index, versions index, views and caches."""
    root = tmp_path_factory.mktemp("seed") / "mem"
    repo = MemoryRepo.init(root, teams=TEAMS, now=T0, as_user="mdmem")
    team_fact(repo, "Billing deploys only on Tuesdays")
    team_fact(repo, "Billing deploys any weekday before 3pm", now=T1)
    assert repo.recall("billing deploy", as_user="bob", include_history=True, now=T1)
    repo.close()
    return root


def cache_files(root):
    base = cache_dir(root)
    out = ["state.json", "versions.json", "embeddings.sqlite", "viewmeta.sqlite"]
    out += ["verify.json"] if (base / "verify.json").exists() else []
    toc = sorted(p.name for p in (base / "fulltext").iterdir() if p.suffix == ".toc")
    seg = sorted(p.name for p in (base / "fulltext").iterdir() if p.suffix == ".seg")
    vtoc = sorted(p.name for p in (base / "versions").iterdir() if p.suffix == ".toc")
    return out + [f"fulltext/{toc[-1]}", f"fulltext/{seg[0]}", f"versions/{vtoc[-1]}"]


def copy_of(seeded, tmp_path):
    root = tmp_path / "mem"
    shutil.copytree(seeded, root, symlinks=True)
    return root


@pytest.mark.parametrize("mode", MODES)
def test_every_cache_file_damaged_in_turn(seeded, tmp_path, caplog, mode):
    for i, name in enumerate(cache_files(seeded)):
        root = copy_of(seeded, tmp_path / f"{i}")
        corrupt(cache_dir(root) / name, mode)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mdmem"):
            repo = MemoryRepo.open(root)
            r = team_fact(repo, "Refunds take 30 days for marketplace orders", key="refund.window",
                          new_key=True, now=T1)
            assert r.status == "committed", name
            hits = repo.recall("when does billing deploy", as_user="bob", now=T1)
            assert hits and hits[0].text == "Billing deploys any weekday before 3pm", (name, mode)
            assert repo.recall("marketplace refunds", as_user="bob", now=T1)[0].key == "refund.window"
            past = repo.recall("billing deploy before", as_user="bob", include_history=True, now=T1)
            assert any("Tuesdays" in h.text for h in past), (name, mode)
            repo.close()
        warnings = [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
        assert len(warnings) <= 1, (name, mode, [w.getMessage() for w in warnings])
        # Once rebuilt, nothing is left to warn about.
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mdmem"):
            repo = MemoryRepo.open(root)
            assert repo.recall("when does billing deploy", as_user="bob", now=T1)
            repo.close()
        assert not caplog.records, (name, mode)


def test_an_index_folder_replaced_by_a_file(seeded, tmp_path):
    root = copy_of(seeded, tmp_path)
    shutil.rmtree(cache_dir(root) / "fulltext")
    (cache_dir(root) / "fulltext").write_text("not an index")
    repo = MemoryRepo.open(root)
    assert repo.recall("when does billing deploy", as_user="bob", now=T1)[0].text.startswith("Billing deploys any")


def test_a_missing_segment_file(seeded, tmp_path):
    root = copy_of(seeded, tmp_path)
    for p in (cache_dir(root) / "fulltext").iterdir():
        if p.suffix in (".seg", ".trm", ".pst"):
            p.unlink()
    repo = MemoryRepo.open(root)
    assert repo.recall("when does billing deploy", as_user="bob", now=T1)[0].text.startswith("Billing deploys any")


def test_the_cli_prints_one_warning_line_and_exits_0(seeded, tmp_path):
    root = copy_of(seeded, tmp_path)
    (cache_dir(root) / "viewmeta.sqlite").write_bytes(b"garbage" * 100)
    (cache_dir(root) / "state.json").write_text("[]")
    proc = run_cli("remember", "Refunds take 30 days", "--kind", "fact", "--subject", "service:billing",
                   "--key", "refund.window", "--new-key", "--scope", "team", "--team", "payments",
                   "--as", "bob", "--repo", str(root), "--now", T1)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("mdmem: warning:") == 1 and "viewmeta.sqlite" in proc.stderr
    proc = run_cli("recall", "when does billing deploy", "--as", "bob", "--repo", str(root), "--now", T1)
    assert proc.returncode == 0 and "any weekday" in proc.stdout, proc.stderr
    assert proc.stderr.count("mdmem: warning:") == 1 and "state.json" in proc.stderr
    assert "Traceback" not in proc.stderr


REBUILD_KILLED = r"""
import os, signal, sys
from mdmem import MemoryRepo
from mdmem.search import note_index
point = sys.argv[2]
target = {"swap": ("cachefiles", "swap_in"), "write": ("fulltext", "make_schema")}[point]
module = getattr(note_index, target[0])
original = getattr(module, target[1])
def die(*a, **k):
    if point == "swap":
        # after the old index was moved away, before the new one is renamed in
        folder = a[0]
        os.replace(folder, folder.with_name(folder.name + ".old"))
    os.kill(os.getpid(), signal.SIGKILL)
setattr(module, target[1], die)
MemoryRepo.open(sys.argv[1]).reindex(rebuild=True)
"""


@pytest.mark.parametrize("point", ["write", "swap"])
def test_a_rebuild_killed_midway_leaves_recall_working(seeded, tmp_path, point):
    root = copy_of(seeded, tmp_path)
    proc = subprocess.run([sys.executable, "-c", REBUILD_KILLED, str(root), point], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    repo = MemoryRepo.open(root)
    repo.index.worktree_check_seconds = 0
    hits = repo.recall("when does billing deploy", as_user="bob", now=T1)
    assert hits and hits[0].text == "Billing deploys any weekday before 3pm"
    assert not [p for p in os.listdir(cache_dir(root)) if p.endswith((".new", ".old"))]


@pytest.mark.parametrize("path,becomes", [("embeddings.sqlite", "folder"), ("viewmeta.sqlite", "folder"),
                                          ("../mdmem-locks", "file"), ("../mdmem-locks/index.lock", "folder"),
                                          ("../mdmem-locks/write.lock", "folder"),
                                          ("../mdmem-locks/daemon.lock", "folder"), ("", "file")])
def test_a_cache_path_of_the_wrong_type_is_dropped_not_a_crash(seeded, tmp_path, path, becomes):
    """A folder where a cache file belongs (or the reverse, .mdmem itself as a
    file) stopped every command with exit 70 or a bare OS error. The lock files beside the
    cache folder (.git/mdmem-locks) likewise."""
    root = copy_of(seeded, tmp_path)
    target = (cache_dir(root) / path).resolve() if path else cache_dir(root)
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    if becomes == "folder":
        target.mkdir(parents=True)
        (target / "x").write_text("x")
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("not a folder")
    for args in (["recall", "when does billing deploy", "--as", "bob"],
                 ["remember", "Refunds take 30 days", "--kind", "fact", "--subject", "service:billing", "--key",
                  "refund.window", "--new-key", "--scope", "team", "--team", "payments", "--as", "bob"],
                 ["startup", "--as", "bob"]):
        proc = run_cli(*args, "--repo", str(root), "--now", T1)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_a_link_to_a_file_at_a_databases_journal_is_left_for_sqlite(tmp_path):
    """open_sqlite moves a folder, FIFO or dangling link at <db>-journal aside (every open
    failed on it), but a link to a file may be a hot journal SQLite must roll back: moving it
    aside handed back a half-written database."""
    import os
    import sqlite3

    from mdmem.cache import open_sqlite

    db_path = tmp_path / "c.sqlite"
    sqlite3.connect(db_path).close()
    (tmp_path / "elsewhere").write_bytes(b"")
    journal = tmp_path / "c.sqlite-journal"
    journal.symlink_to(tmp_path / "elsewhere")
    open_sqlite(db_path, lambda db: None).close()
    assert journal.is_symlink() and not (tmp_path / "broken").exists()
    journal.unlink()
    journal.symlink_to(tmp_path / "nowhere")  # dangling: moved aside
    open_sqlite(db_path, lambda db: None).close()
    assert not os.path.lexists(journal) and (tmp_path / "broken").exists()
