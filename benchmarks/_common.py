"""Shared helpers for the benchmark scripts: scenario data, tables, bulk repos."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("MDMEM_SHARED", HERE.parent.parent / "shared")) / "benchmarks"
console = Console()


def scenario(name: str) -> dict:
    path = SHARED / name
    if not path.exists():
        raise SystemExit(f"{path}: missing. The scenario benchmarks read their data from ../shared/benchmarks "
                         "beside this checkout, or from $MDMEM_SHARED/benchmarks; put the scenario JSON files there.")
    return json.loads(path.read_text())


def table(title: str, columns: list[str], rows: list[list], *, as_json: bool = False) -> None:
    if as_json:
        print(json.dumps({"title": title, "columns": columns, "rows": rows}))
        return
    t = Table(title=title)
    for c in columns:
        t.add_column(c)
    for r in rows:
        t.add_row(*[str(x) for x in r])
    console.print(t)


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = max(0, min(len(values) - 1, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


def median(values):
    return statistics.median(values)


def bulk_notes(repo, n: int, *, team: str = "payments", owner: str = "bob", subjects: int | None = None,
               texts=None, now=None) -> None:
    """Lay down ``n`` notes in one batch commit (an import), spread over subjects so no
    folder holds thousands of files."""
    from mdmem.model.clock import resolve_now
    from mdmem.model.layout import keyed_path
    from mdmem.model.note import Note
    from ulid import ULID

    when = resolve_now(now)
    subjects = subjects or max(1, n // 50)
    for i in range(n):
        subject = f"service:svc{i % subjects}"
        key = f"k{i}"
        text = texts(i) if texts else f"Note {i} about service {i % subjects}: value {i * 7919 % 10007}"
        note = Note(id=str(ULID()), kind="fact", subject=subject, key=key, scope="team", team=team, owner=owner,
                    source="user", valid_from=when, text=text)
        path = repo.root / keyed_path(f"team/{team}", subject, "fact", key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(note.dumps())
    subprocess.run(["git", "-C", str(repo.root), "add", "-A"], check=True)
    # Committed as the owner (a permitted writer of the team), as mdmem's own commits are:
    # verify trusts a note only when its latest commit is a writer's.
    subprocess.run(["git", "-C", str(repo.root), "-c", f"user.name={owner}", "-c", f"user.email={owner}@mdmem.invalid",
                    "commit", "-q", "--no-verify", "-m",
                    f"import {n} notes\n\nMemory-Op: import\nMemory-Actor: {owner}\nMemory-Source: system:import"],
                   check=True)


def wants_json() -> bool:
    return "--json" in sys.argv


def remember_as_writer(repo, text, **kw):
    """A careful writer: a new key refused by the gate is a genuinely new fact in these
    scenarios (same-key writes are the updates), and a held write is approved by a person."""
    from mdmem import Refused

    try:
        result = repo.remember(text, **kw)
    except Refused as exc:
        if not exc.existing_keys:
            raise
        result = repo.remember(text, new_key=True, **kw)
    if result.status == "held":
        # These scenarios have one person, who reviews their own held writes ([review] self_approve).
        repo.config.self_approve = True
        result = repo.approve(result.review_id, as_user=kw["as_user"], new_key=True, now=kw.get("now"))
    return result


def embedder_modes() -> list[str]:
    """Embedders to report: the default and BM25 only; Ollama when MDMEM_OLLAMA_URL is set."""
    modes = ["minilm", "none"]
    if os.environ.get("MDMEM_OLLAMA_URL"):
        modes.append("ollama")
    return modes


def use_embedder(repo, mode: str) -> None:
    from mdmem.config import EmbedderConfig, UserConfig

    repo.config.embedder = EmbedderConfig(backend=mode)
    repo.user_config = UserConfig(embedder_url=os.environ.get("MDMEM_OLLAMA_URL"))
    os.environ.pop("MDMEM_EMBEDDER", None)
    repo.close()
    repo._index = None
    repo._recall = None
