"""The full-text index of a bulk import, built in a second process while the import writes.

A 10,000-note import (BM25 only) used one core: drafting and committing, then reading the
notes back and indexing them with Whoosh (pure Python, ~half the time). Here the importing
process sends each committed batch's note files (path, bytes) down a pipe to a worker that
validates them as a read from the work tree would and adds their documents to a Whoosh
segment of its own, in its own folder under the cache. At the end the index catch-up joins
that segment (:class:`Prebuilt`) when every document in it is the version HEAD and the work
tree hold for its path; otherwise it is thrown away and the notes are read from disk as
before. The worker never touches the index itself.

The worker cannot outlive the importing process: its input is the pipe (EOF ends it, with
nothing committed) and it asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG), so a kill -9 of the importer leaves no process behind. A folder left by
a worker killed with its parent is removed by the next import's start.

Run as ``python -I -m mdmem.search.index_worker FOLDER PARENT_PID``.
"""
from __future__ import annotations

import ctypes
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from queue import Queue
from typing import Any

from ..errors import NoteInvalid
from ..model.kinds import Contracts

PR_SET_PDEATHSIG = 1
RESULT_FILE = "indexed.json"  # the worker's list of (path, version) in docnum order
FINISH_SECONDS = 600  # a worker still flushing after this is killed (the import falls back)
# A worker with this many documents not yet written and nothing waiting in its pipe (it is
# ahead of the importer) writes them as a segment: the importer then waits at the end only
# for the last part's flush (a flush is ~1/3 of Whoosh's work: ~2 s for 10,000 notes).
SEGMENT_DOCS = 2500


@dataclass
class Prebuilt:
    """Finished segments (whoosh.codec.base.Segment, in ``folder``) holding one document
    for each (path, version) of ``docs``."""

    folder: Path
    segments: list[Any]
    docs: list[tuple[str, str]]


class IndexWorker:
    """The importing process's end: :meth:`send` committed notes, :meth:`finish` for the
    segment, :meth:`discard` always (it ends the worker and removes its folder)."""

    segment_docs = SEGMENT_DOCS

    def __init__(self, proc: subprocess.Popen, folder: Path):
        self.proc = proc
        self.folder = folder
        self.failed = False

    @classmethod
    def start(cls, base: Path, contracts: Contracts, max_bytes: int | None) -> IndexWorker | None:
        """A worker building in a new folder under ``base`` (the cache folder); None if it
        cannot be started (the import then indexes as before)."""
        if not sys.executable:
            return None  # embedded in something that is not a Python we could start
        parent = base / "bulk"
        _remove_orphans(parent)
        folder = parent / f"{os.getpid()}-{os.urandom(4).hex()}"
        try:
            folder.mkdir(parents=True)
            with open(folder / "stderr", "wb") as err:
                proc = subprocess.Popen([sys.executable, "-I", "-m", __name__, str(folder), str(os.getpid())],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
                                        close_fds=True)
        except OSError:
            shutil.rmtree(folder, ignore_errors=True)
            return None
        worker = cls(proc, folder)
        worker._put(("start", contracts, max_bytes, cls.segment_docs))
        return worker

    def _put(self, message: tuple) -> None:
        if self.failed:
            return
        try:
            assert self.proc.stdin is not None
            pickle.dump(message, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.failed = True  # the worker died: the catch-up reads the notes from disk

    def send(self, files: dict[str, bytes]) -> None:
        """Note files just committed (path -> bytes)."""
        if files:
            self._put(("notes", list(files.items())))

    def finish(self) -> Prebuilt | None:
        """The worker's finished segment, or None if it failed."""
        self._put(("finish",))
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            self.failed = True
        try:
            code = self.proc.wait(timeout=FINISH_SECONDS)
        except subprocess.TimeoutExpired:
            return None
        if self.failed or code != 0:
            return None
        try:
            docs = [(p, v) for p, v in json.loads((self.folder / RESULT_FILE).read_text())]
            from whoosh import index as windex

            with windex.open_dir(str(self.folder)).reader() as reader:
                segments = [leaf.segment() for leaf, _ in reader.leaf_readers()]
        except Exception:  # noqa: BLE001 -- anything amiss: the catch-up reads the notes from disk
            return None
        if sum(s.doc_count_all() for s in segments) != len(docs) or any(s.has_deletions() for s in segments):
            return None
        return Prebuilt(self.folder, segments, docs)

    def discard(self) -> None:
        """End the worker if it still runs (our own child, by its pid) and remove its folder."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


def _remove_orphans(parent: Path) -> None:
    """Folders of workers whose importer is gone (killed with it before cleaning up)."""
    if not parent.is_dir():
        return
    for folder in parent.iterdir():
        pid = folder.name.split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def spare_core(interval: float = 0.1) -> bool:
    """Whether about one core more than the importer needs sits idle now, so a worker runs
    beside the importer rather than taking turns with it. Measured at 10,000 notes with
    other processes busy (load 3.6-6, niced test suites included): the worker made the
    import slower (wall 18-39 s against 15-31 s without; its start, the pipe and the CPU
    both processes lose sharing cores add ~15% CPU), so it is used only with a core to
    spare. Counted from the kernel's idle time over ``interval`` (Linux /proc/stat; niced
    work counts as busy: beside niced suites the worker was no faster either); elsewhere
    never."""
    try:
        cpus = len(os.sched_getaffinity(0))
        if cpus < 2:
            return False
        before = _cpu_times()
        time.sleep(interval)
        after = _cpu_times()
    except (AttributeError, OSError, ValueError, IndexError):
        return False
    spent = [b - a for a, b in zip(before, after)]
    total = sum(spent)
    # user nice system idle iowait irq softirq steal: free = idle + iowait
    free = (spent[3] + spent[4]) / total * cpus if total else 0.0
    return free >= 1.5


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        fields = f.readline().split()
    if fields[0] != "cpu":
        raise ValueError("no cpu line")
    return [int(x) for x in fields[1:9]]


# --- the worker process ---------------------------------------------------------------
def _die_with_parent(parent_pid: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the pipe's EOF still ends the worker
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def _read_messages(stream, inbox: Queue) -> None:
    """Read the pipe ahead, so the importer never waits for the worker to take a batch."""
    try:
        while True:
            inbox.put(pickle.load(stream))
    except (EOFError, OSError, pickle.UnpicklingError):
        inbox.put(None)


def main(argv: list[str]) -> int:
    folder, parent_pid = Path(argv[1]), int(argv[2])
    _die_with_parent(parent_pid)
    from whoosh import index as windex

    from ..model.validate import validate_note
    from ..storage.queries import worktree_version
    from ..storage.worktree import StoredNote
    from . import fulltext
    from .bulkwriter import BulkWriter

    inbox: Queue = Queue()
    threading.Thread(target=_read_messages, args=(sys.stdin.buffer, inbox), daemon=True).start()
    first = inbox.get()
    if not first or first[0] != "start":
        return 1
    _, contracts, max_bytes, segment_docs = first
    ix = windex.create_in(str(folder), fulltext.make_schema())
    writer = BulkWriter(ix, limitmb=256)
    indexed: list[tuple[str, str | None]] = []
    pending = 0
    while True:
        if pending >= segment_docs and inbox.empty():
            writer.commit(merge=False)
            writer, pending = BulkWriter(ix, limitmb=256), 0
        message = inbox.get()
        if message is None:  # EOF before "finish": the importer is gone or gave up
            writer.cancel()
            return 1
        if message[0] == "finish":
            break
        for path, data in message[1]:
            # As NoteIndex reads a note from the work tree (storage.worktree.read_note).
            version = worktree_version(data)
            try:
                note = validate_note(path, data, contracts, max_bytes=max_bytes)
            except NoteInvalid:
                indexed.append((path, None))  # not indexable: the catch-up will not use this segment
                continue
            writer.add_document(**fulltext.note_doc(StoredNote(path, version, note)))
            indexed.append((path, version))
            pending += 1
    writer.commit(merge=False)
    if any(v is None for _, v in indexed):
        return 1
    tmp = folder / (RESULT_FILE + ".tmp")
    tmp.write_text(json.dumps(indexed))
    os.replace(tmp, folder / RESULT_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
