"""policy/gate.py and policy/access.py as plain functions: each rule's decision and the words of
each refusal (what was wrong and what would be right). Written against mutmut's survivors."""
import pytest

from mdmem.errors import BadInput, Conflict, NotFound, Refused
from mdmem.model.kinds import Contracts
from mdmem.policy import gate
from mdmem.policy.access import Access, not_visible, require_user

FACT, EPISODE = Contracts().resolve("fact"), Contracts().resolve("episode")
TRUSTED = ("user", "human:*", "system:*")


def test_agent_sources():
    assert gate.is_agent_source("agent") and gate.is_agent_source("agent:claude")
    assert not gate.is_agent_source("agentx") and not gate.is_agent_source("user")


def test_judge_source_decides_by_kind_for_agents_and_by_pattern_for_others():
    held = gate.judge_source("agent:claude", FACT, TRUSTED)
    assert held.trusted is False and held.reason.endswith("waits for a person's review ([trust] agent_kinds)")
    assert "agent:claude" in held.reason
    assert gate.judge_source("agent:claude", EPISODE, TRUSTED).trusted is True
    assert "episode" in gate.judge_source("agent:claude", EPISODE, TRUSTED).reason
    # agent_kinds replaces the contracts' default both ways
    assert gate.judge_source("agent:claude", EPISODE, TRUSTED, frozenset({"fact"})).trusted is False
    assert gate.judge_source("agent:claude", FACT, TRUSTED, frozenset({"fact"})).trusted is True
    # a pattern never trusts an agent
    assert gate.judge_source("agent:claude", FACT, ("agent:*", "*")).trusted is False
    ok = gate.judge_source("human:dana", FACT, TRUSTED)
    assert ok.trusted is True and "human:dana" in ok.reason
    no = gate.judge_source("tool:grafana", FACT, TRUSTED)
    assert no.trusted is False and "[trust] sources" in no.reason and "tool:grafana" in no.reason


def test_key_reuse():
    gate.check_key_reuse("new", ["a"], new_key=True, what="w")
    gate.check_key_reuse("a", ["a", "b"], new_key=False, what="w")
    gate.check_key_reuse("x", [], new_key=False, what="w")
    with pytest.raises(Refused) as err:
        gate.check_key_reuse("x", ["b", "a"], new_key=False, what="service:billing fact")
    assert err.value.existing_keys == ["a", "b"]
    assert "service:billing fact" in str(err.value) and "'x'" in str(err.value)
    assert err.value.reason.startswith("key: service:billing fact already has live keys")
    assert err.value.reason.endswith("say so (new_key=True / --new-key).")


def test_clean_append_only_and_expected_version():
    gate.check_clean("p.md", None, "v1")
    gate.check_clean("p.md", "v1", "v1")
    with pytest.raises(Conflict, match=r"^p\.md: has uncommitted edits in the work tree; commit or discard"):
        gate.check_clean("p.md", "v2", "v1")
    gate.check_append_only("p.md", EPISODE, False)
    gate.check_append_only("p.md", FACT, True)
    with pytest.raises(Refused, match=r"^p\.md: episodes are append-only.*write a new episode instead$"):
        gate.check_append_only("p.md", EPISODE, True)
    gate.check_expected_version("p.md", None, "v1")
    gate.check_expected_version("p.md", "v1", "v1")
    with pytest.raises(Conflict) as err:
        gate.check_expected_version("p.md", "v1", None)
    assert str(err.value) == "p.md: changed since version v1 (now absent); read it again and retry"
    with pytest.raises(Conflict, match=r"\(now v2\)"):
        gate.check_expected_version("p.md", "v1", "v2")


def test_derivation():
    access = Access({"payments": frozenset({"bob", "dana"}), "search": frozenset({"carol"})})
    gate.check_derivation(access, "team/payments", {"a"}, {"a": "team/payments"})
    with pytest.raises(Refused) as err:
        gate.check_derivation(access, "team/payments", {"b", "a"}, {})
    assert str(err.value) == "derived_from: no live note with id a, b"
    with pytest.raises(Refused) as err:
        gate.check_derivation(access, "team/payments", {"a", "b"}, {"a": "private/bob", "b": "team/search"})
    assert "private/bob, team/search; derive per scope" in str(err.value)


def test_approver():
    gate.check_approver("dana", "bob", gate.HUMAN, self_approve=False)
    gate.check_approver("bob", "bob", gate.AGENT, self_approve=False)  # an agent's write: its person reviews
    gate.check_approver("bob", "bob", gate.HUMAN, self_approve=True)
    with pytest.raises(Refused) as err:
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False)
    assert "bob wrote this held change" in str(err.value) and "[review] self_approve = true" in str(err.value)
    with pytest.raises(Refused):
        gate.check_approver("bob", "", gate.HUMAN, self_approve=False)  # no known writer: not approvable


def test_identity_messages():
    for bad in (None, "", "  "):
        with pytest.raises(BadInput) as err:
            require_user(bad)
        assert str(err.value).startswith("identity: every call names who is acting (--as USER or MDMEM_USER)")
    with pytest.raises(BadInput, match=r"^user: "):
        require_user("a b")
    assert require_user("alice") == "alice"
    assert str(not_visible("p.md", "bob")) == "p.md: no such note visible to bob"


def test_access_rules():
    access = Access({"payments": frozenset({"bob", "dana"}), "search": frozenset({"carol"})},
                    frozenset({"dana"}))
    assert access.readable_roots("bob") == ["private/bob", "team/payments"]
    assert access.writers_of_root("private/alice") == {"alice"}
    assert access.writers_of_root("team/payments") == {"bob", "dana"}
    assert access.writers_of_root("team/nope") == frozenset() and access.writers_of_root("other/x") == frozenset()
    assert access.writers_of_root("private/") == frozenset()
    assert access.readers_of_root("private/alice") == {"alice"}
    assert access.readers_of_root("team/payments") == {"bob", "dana"}
    assert access.readers_of_root("team/nope") == frozenset()
    assert access.visible_root("bob", "team/payments/service/x/fact/k.md") == "team/payments"
    for probe in ("team/search/service/x/fact/k.md", "team/payments/../search/service/x/fact/k.md",
                  "/team/payments/service/x/fact/k.md", "team/payments//x/fact/k.md", "", "team\\payments"):
        with pytest.raises(NotFound, match="no such note visible to bob"):
            access.visible_root("bob", probe)
    with pytest.raises(NotFound) as err:
        access.visible_root("bob", "../x")
    assert str(err.value) == "../x: no such note visible to bob"
    long = "team/" + "a" * 300
    with pytest.raises(NotFound) as err:
        access.visible_root("bob", long)
    assert str(err.value) == long[:200] + ": no such note visible to bob"  # echoed, but bounded
    access.check_write("bob", "team/payments")
    access.check_write("bob", "private/bob")
    with pytest.raises(Refused, match="only alice writes there"):
        access.check_write("bob", "private/alice")
    with pytest.raises(Refused, match="not a member of team search"):
        access.check_write("bob", "team/search")
    with pytest.raises(Refused) as err:
        access.check_write("bob", "team/nope")
    assert str(err.value) == "team: no team 'nope' in mdmem.toml; known teams: payments, search"
    with pytest.raises(Refused) as err:
        Access({}).check_write("bob", "team/nope")
    assert str(err.value).endswith("known teams: none")
    access.check_forget("bob", ["private/bob"])
    access.check_forget("dana", ["private/alice", "team/search"])
    with pytest.raises(Refused) as err:
        access.check_forget("bob", ["private/bob", "team/payments", "private/alice"])
    assert str(err.value) == ("forget: bob may erase only their own private notes (it would change team/payments); "
                              "anything else needs the eraser role in mdmem.toml ([roles] erasers = [...])")
    with pytest.raises(Refused) as err:
        access.check_forget("bob", ["private/alice"])  # nothing readable to name: no parentheses
    assert str(err.value).startswith("forget: bob may erase only their own private notes; anything else")
    access.check_prove("dana", subject=None, owner="alice")
    access.check_prove("bob", subject=None, owner="bob")
    access.check_prove("bob", subject="user:bob", owner=None)
    with pytest.raises(Refused, match="own data only"):
        access.check_prove("bob", subject="user:alice", owner=None)
    assert access.derived_scope_ok("private/bob", ["team/payments"])
    assert not access.derived_scope_ok("team/payments", ["private/bob"])
