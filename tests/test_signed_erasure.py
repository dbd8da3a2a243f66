"""Signed memory survives an erasure.

With ``[trust] require_signed``, every note's latest commit needs a good signature. An erasure
rewrites history with git-filter-repo, which drops every signature: before this, one erasure
left every note written since the erased note's first version UNTRUSTED (gone from views and
startup) and rolled mdmem.toml back to its last version judged without signatures. The erasure's
receipt now lists the commits the rewrite made; the receipt's own commit is signed by the
eraser, and an eraser's signed receipt stands in for the signatures of the commits it lists.
The author rule is unchanged: a listed commit still counts only for roots its author may write.
"""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import T0, T1
from test_trust import PLANT, git, keygen, note_text, plain_commit

from mdmem import MemoryRepo
from mdmem.config import UserConfig
from mdmem.model.layout import ERASURE_LOG

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")
DANA = "dana@mdmem.invalid"


def signed_repo(tmp_path):
    """payments = alice, bob, dana; dana erases; every person's mdmem signs with their own key."""
    keys = {name: keygen(tmp_path, name) for name in ("alice", "bob", "dana")}
    repo = MemoryRepo.init(tmp_path / "m", teams={"payments": ["alice", "bob", "dana"]}, erasers=["dana"], now=T0,
                           as_user="dana", embedder="none")
    root = repo.root
    (root / "allowed_signers").write_text("".join(
        f"{name}@mdmem.invalid {' '.join((tmp_path / f'{name}_key.pub').read_text().split(' ')[:2])}\n"
        for name in keys))
    cfg = root / "mdmem.toml"
    cfg.write_text(cfg.read_text().replace("[trust]\n", "[trust]\nrequire_signed = true\n"))
    git(root, "add", "allowed_signers")
    git(root, "-c", f"user.email={DANA}", "commit", "-qam", "require signatures", "--no-verify")

    def as_(name):
        return MemoryRepo.open(root, embedder="none", user_config=UserConfig(signing_key=str(keys[name])))
    return root, keys, as_


def untrusted(repo) -> dict:
    return {f["path"]: f for f in repo.verify()["untrusted"]}


def test_an_erasure_keeps_signed_notes_and_config_trusted(tmp_path):
    root, keys, as_ = signed_repo(tmp_path)
    alice, bob, dana = as_("alice"), as_("bob"), as_("dana")
    alice.remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice", key="phone",
                   now=T0)
    team = bob.remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                        key="deploy.window", scope="team", team="payments", now=T0)
    # a config change after the erased note, signed by the admin: rewritten by the erasure too
    cfg = root / "mdmem.toml"
    cfg.write_text(cfg.read_text() + '\n[people.carol]\nemails = ["carol@example.org"]\n')
    git(root, "-c", f"user.email={DANA}", "-c", "gpg.format=ssh", "-c", f"user.signingkey={keys['dana']}",
        "commit", "-S", "-qam", "config, signed", "--no-verify")
    alice.remember("Alice likes tea", as_user="alice", kind="profile", subject="user:alice", key="drink",
                   new_key=True, now=T0)
    dana = as_("dana")
    assert untrusted(dana) == {}
    before = git(root, "rev-parse", "HEAD").stdout.strip()
    dana.forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    assert git(root, "rev-parse", "HEAD").stdout.strip() != before
    assert "SSH SIGNATURE" not in git(root, "cat-file", "commit", git(
        root, "log", "-1", "--format=%H", "--", team.path).stdout.strip()).stdout  # filter-repo dropped it
    receipt = json.loads((root / ERASURE_LOG).read_text().splitlines()[-1])
    assert receipt["attested_commits"]
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert untrusted(fresh) == {}
        assert "Billing deploys any weekday" in fresh.startup(as_user="bob", now=T1)
        assert fresh.config.trust.require_signed is True
        assert fresh.config.committer("carol@example.org") == "carol"  # the signed change still applies
    # after the erasure, an unsigned note commit is still flagged (the receipt covers only its own list)
    plain_commit(root, team.path, note_text(id=team.note_id, kind="fact", subject="service:billing",
                                            key="deploy.window", scope="team", team="payments", owner="bob",
                                            text="Billing deploys never"), name="bob", email="bob@mdmem.invalid")
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert untrusted(fresh)[team.path]["reason"] == "unsigned"


def forged_receipt(root, commits: list[str], n: int) -> dict:
    line = {"id": f"erasure-forged-{n}", "actor": "dana", "targets": {}, "attested_commits": commits}
    log = root / ERASURE_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps(line) + "\n")
    git(root, "add", ERASURE_LOG)
    return line


def test_only_an_erasers_signed_receipt_attests(tmp_path):
    """bob commits a plant under alice's address (unsigned: he has no key of hers), then a
    receipt line listing it -- as himself, and as dana's address unsigned, and as dana's address
    signed with his own key. None stands in for alice's signature."""
    root, keys, as_ = signed_repo(tmp_path)
    plain_commit(root, PLANT, note_text(), name="alice", email="alice@mdmem.invalid")
    plant = git(root, "rev-parse", "HEAD").stdout.strip()
    for n, (email, key) in enumerate((("bob@mdmem.invalid", keys["bob"]), (DANA, None), (DANA, keys["bob"]))):
        forged_receipt(root, [plant], n)
        sign = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-S"] if key else ["commit"]
        git(root, "-c", f"user.email={email}", *sign, "-qm", "receipt", "--no-verify")
        with MemoryRepo.open(root, embedder="none") as fresh:
            flags = untrusted(fresh)
            assert flags[PLANT]["reason"] == "unsigned", (email, flags)
            assert "evil@example.com" not in fresh.startup(as_user="alice", now=T1)
    # dana's own signed receipt listing it does attest the signature -- and the author rule still
    # holds: the plant is alice's address in alice's root, so this is dana vouching for it, which
    # only an eraser can do (the same power the erasure's rewrite gives her).
    forged_receipt(root, [plant], 3)
    git(root, "-c", f"user.email={DANA}", "-c", "gpg.format=ssh", "-c", f"user.signingkey={keys['dana']}",
        "commit", "-S", "-qm", "receipt", "--no-verify")
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert PLANT not in untrusted(fresh)


def test_two_erasures_a_fresh_clone_and_an_erased_persons_team_note(tmp_path):
    """A second erasure rewrites the first one's receipt commit too (its signature is dropped):
    the commits the first receipt attested stay trusted through the second receipt. alice's team
    note, pseudonymised by her erasure, is trusted (voucher + attestation); a fresh clone agrees."""
    root, keys, as_ = signed_repo(tmp_path)
    alice, bob = as_("alice"), as_("bob")
    alice.remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice", key="phone",
                   now=T0)
    alices = alice.remember("Refunds need two approvals", as_user="alice", kind="fact", subject="service:billing",
                            key="refunds", scope="team", team="payments", now=T0)
    bob.remember("Billing deploys any weekday", as_user="bob", kind="fact", subject="service:billing",
                 key="deploy.window", scope="team", team="payments", new_key=True, now=T0)
    bob.remember("Bob's locker code 4711", as_user="bob", kind="profile", subject="user:bob", key="locker", now=T0)
    bob.remember("Billing freezes in December", as_user="bob", kind="fact", subject="service:billing",
                 key="freeze", scope="team", team="payments", new_key=True, now=T0)
    as_("dana").forget(as_user="dana", owner="alice", subject="user:alice", now=T1)
    as_("dana").forget(as_user="dana", subject="user:bob", now=T1)
    with MemoryRepo.open(root, embedder="none") as fresh:
        assert untrusted(fresh) == {}
        startup = fresh.startup(as_user="bob", now=T1)
        assert "Billing deploys any weekday" in startup and "Refunds need two approvals" in startup
        assert "Billing freezes in December" in startup
    author = git(root, "log", "-1", "--format=%ae", "--", alices.path).stdout.strip()
    assert author.startswith("erased-")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    with MemoryRepo.open(clone, embedder="none") as fresh:
        assert untrusted(fresh) == {}
        assert "Billing deploys any weekday" in fresh.startup(as_user="bob", now=T1)


def test_an_erasure_without_a_signing_key_is_refused_under_require_signed(tmp_path):
    """Its receipt could not attest the rewritten commits: every note written since the erased
    one would turn untrusted. Refused before anything is rewritten, naming the setting."""
    from mdmem.errors import BadInput

    root, keys, as_ = signed_repo(tmp_path)
    as_("alice").remember("Alice secret phone 555-0199", as_user="alice", kind="profile", subject="user:alice",
                          key="phone", now=T0)
    head = git(root, "rev-parse", "HEAD").stdout.strip()
    with MemoryRepo.open(root, embedder="none") as unsigned:
        with pytest.raises(BadInput, match="signing"):
            unsigned.forget(as_user="dana", subject="user:alice", now=T1)
        assert unsigned.forget(as_user="dana", subject="user:alice", dry_run=True, now=T1)  # a plan still works
    assert git(root, "rev-parse", "HEAD").stdout.strip() == head
