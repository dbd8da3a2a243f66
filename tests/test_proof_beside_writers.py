"""prove-gone beside writers and housekeeping: a proof made while notes are written reads the
files a writer renames (its temporary note files, libgit2's temporary objects) again instead of
crashing or failing, and proofs that keep overlapping do not keep housekeeping out."""
import subprocess
import sys
import textwrap
import threading
import time

from mdmem import MemoryRepo
from mdmem.errors import LockTimeout
from mdmem.storage.maintenance import housekeeping_lock

TEAMS = {"payments": ["alice", "bob"]}


def test_overlapping_proofs_do_not_starve_housekeeping_of_its_lock(tmp_path):
    """Anyone may run prove-gone, and each proof holds the housekeeping lock shared. Two
    proofs that overlap (each starting before the other ends) kept it shared for as long as
    they went on, and housekeeping polling for it alone never got it. It now waits at a
    turnstile, as an erasure does at its gate: proofs arriving after it wait for it."""
    root = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice"]}, as_user="alice", embedder="none").root
    stop = time.monotonic() + 8.0

    def proofs(offset: float) -> None:  # back-to-back proofs, 0.4 s each, staggered
        time.sleep(offset)
        while time.monotonic() < stop:
            with housekeeping_lock(root, shared=True, timeout=30):
                time.sleep(0.4)

    threads = [threading.Thread(target=proofs, args=(o,)) for o in (0.0, 0.2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    try:
        with housekeeping_lock(root, shared=False, timeout=4.0):
            got = True
    except LockTimeout:
        got = False
    for t in threads:
        t.join()
    assert got, "housekeeping waited 4 s for its lock while proofs kept it shared"


def _churn(path, stop):
    """A shell loop creating and removing ``path`` as fast as it can (a writer's
    write-to-temporary-then-rename, as gitindex writes work-tree files: ``.<name>.mdmem-tmp``)."""
    return subprocess.Popen(["sh", "-c", f'while [ ! -e "{stop}" ]; do echo x > "{path}"; rm -f "{path}"; done'])


def test_a_proof_does_not_crash_on_a_work_tree_file_that_vanishes_under_its_walk(tmp_path):
    """mdmem writes a note as ``.k.md.mdmem-tmp`` then renames it: a proof made while a writer
    is at work lists that file and reads it after it is gone: the proof (anyone's, eraser or
    not) died with FileNotFoundError, seen with a real writer process remembering notes in a
    loop. The work tree is read as .git is, again when a file vanished."""
    repo = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["alice"], as_user="alice", embedder="none")
    repo.remember("Acme is fine", as_user="bob", kind="fact", subject="customer:acme", key="k", scope="team",
                  team="payments", new_key=True)
    folder = repo.root / "team" / "payments" / "customer" / "acme" / "fact"
    stop = tmp_path / "stop"
    churner = _churn(folder / ".k.md.mdmem-tmp", stop)
    errors = []
    try:
        for _ in range(40):
            try:
                repo.prove_gone(["Quentin"], as_user="bob")
            except OSError as exc:
                errors.append(repr(exc))
                break
    finally:
        stop.touch()
        churner.wait(timeout=30)
        repo.close()
    assert errors == []


WRITER = textwrap.dedent("""
    import sys, time
    from mdmem import MemoryRepo
    r = MemoryRepo.open(sys.argv[1], embedder="none")
    end = time.monotonic() + float(sys.argv[2])
    i = 0
    while time.monotonic() < end:
        r.remember(f"Writer note {i} " + "lorem ipsum " * 200, as_user="bob", kind="fact",
                   subject=f"customer:c{i % 50}", key="k", scope="team", team="payments")
        i += 1
    r.close()
""")


def test_an_erasers_proof_does_not_fail_on_a_writers_object_being_written(tmp_path):
    """While a writer commits, libgit2 writes each loose object as
    ``.git/objects/tmp_object_git2_*`` and renames it: an eraser's proof lists it and names it
    'git does not list its objects: cannot be checked; delete it' -- a FAIL for an erasure that
    is complete (a third of the proofs with one writer), and advice to delete a file a writer is
    still writing. A temporary object is read again a moment later; only one still there fails."""
    root = MemoryRepo.init(tmp_path / "m", teams=TEAMS, erasers=["alice"], as_user="alice", embedder="none").root
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), "25"])
    repo = MemoryRepo.open(root, embedder="none")
    bad = []
    try:
        time.sleep(2)
        while writer.poll() is None and not bad:
            report = repo.prove_gone(["Quentin"], as_user="alice").to_dict()
            bad = [w for needle in report["needles"] for check in needle["checks"].values()
                   for w in check["where"] if "tmp_object" in w]
    finally:
        writer.wait(timeout=60)
        repo.close()
    assert bad == []
