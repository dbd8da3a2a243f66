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
    # An agent's write: in its person's private root the person reviews it; in a team root a
    # teammate does, like any other write (else the agent approves itself).
    gate.check_approver("bob", "bob", gate.AGENT, self_approve=False, root="private/bob", readers=frozenset({"bob"}))
    with pytest.raises(Refused):
        gate.check_approver("bob", "bob", gate.AGENT, self_approve=False, root="team/payments",
                            readers=frozenset({"alice", "bob"}))
    gate.check_approver("alice", "bob", gate.AGENT, self_approve=False, root="team/payments",
                        readers=frozenset({"alice", "bob"}))
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
    # the error says what came: nothing at all, or an empty name
    for bad, got in ((None, "nobody was named"), ("", "got ''"), ("  ", "got '  '")):
        with pytest.raises(BadInput) as err:
            require_user(bad)
        assert str(err.value) == f"identity: every call names who is acting (--as USER or MDMEM_USER); {got}"
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


def test_judge_source_in_a_team_root_reads_agent_team_kinds_only():
    team = dict(root="team/payments")
    held = gate.judge_source("agent:claude", EPISODE, TRUSTED, **team)
    assert held.trusted is False
    assert held.reason == ("an agent's write (agent:claude) of a episode into team/payments waits for a person's "
                           "review ([trust] agent_team_kinds)")
    # agent_kinds (the private-memory list) does not open a team root
    assert gate.judge_source("agent:claude", EPISODE, TRUSTED, frozenset({"episode"}), **team).trusted is False
    ok = gate.judge_source("agent:claude", EPISODE, TRUSTED, agent_team_kinds=frozenset({"episode"}), **team)
    assert ok.trusted is True and ok.reason == "the agent may record episode notes in team scopes itself"
    assert gate.judge_source("agent:claude", FACT, TRUSTED, agent_team_kinds=frozenset({"episode"}), **team) \
        .trusted is False
    # a person's own private root keeps agent_kinds; agent_team_kinds does not reach it
    assert gate.judge_source("agent:claude", EPISODE, TRUSTED, root="private/bob").trusted is True
    assert gate.judge_source("agent:claude", FACT, TRUSTED, root="private/bob",
                             agent_team_kinds=frozenset({"fact"})).trusted is False
    # people and tools are judged by source patterns in any root
    assert gate.judge_source("user", FACT, TRUSTED, **team).trusted is True
    assert gate.judge_source("tool:x", FACT, TRUSTED, **team).trusted is False


def test_declared_users():
    access = Access({"payments": frozenset({"bob", "dana"})}, frozenset({"erin"}), frozenset({"ali"}))
    assert access.users == {"bob", "dana", "erin", "ali"}
    for user in ("bob", "dana", "erin", "ali"):
        assert access.check_user(user) == user
        access.readable_roots(user)
    with pytest.raises(BadInput) as err:
        access.check_user("mallory")
    assert str(err.value) == ("identity: mallory is not a user of this repo (known: ali, bob, dana, erin); users are "
                              "declared in mdmem.toml as [teams] members, [roles] erasers or a [people.mallory] "
                              "table; check --as / MDMEM_USER")
    many = Access({"t": frozenset(f"u{i:02d}" for i in range(14))})
    with pytest.raises(BadInput, match=r"\(known: u00, u01, .*, u11, \.\.\.\)"):
        many.check_user("zed")
    # every decision that takes a user asks first
    for call in (lambda: access.readable_roots("mallory"), lambda: access.may_read_root("mallory", "private/mallory"),
                 lambda: access.visible_root("mallory", "private/mallory/x/y/fact/k.md"),
                 lambda: access.check_write("mallory", "private/mallory"),
                 lambda: access.may_erase_root("mallory", "private/mallory"),
                 lambda: access.check_forget("mallory", ["private/mallory"]),
                 lambda: access.check_prove("mallory", subject=None, owner="mallory")):
        with pytest.raises(BadInput, match="mallory is not a user"):
            call()
    # a repo that declares nobody takes any name (a fresh single-user repo), but never an empty one
    open_repo = Access({})
    assert open_repo.check_user("zoe") == "zoe" and open_repo.readable_roots("zoe") == ["private/zoe"]
    with pytest.raises(BadInput, match="every call names who is acting"):
        open_repo.check_user("")


def test_access_of_a_config():
    from mdmem.config import Config
    cfg = Config.parse(b'[teams]\npayments = ["bob"]\n[roles]\nerasers = ["dana"]\n[people.ali]\n')
    access = Access.of(cfg)
    assert access.teams == {"payments": {"bob"}} and access.erasers == {"dana"} and access.people == {"ali"}


def test_init_config_declares_the_creator_and_private_only_people():
    from mdmem.config import Config, render_config
    cfg = Config.parse(render_config({"payments": ["bob"]}, ["dana"], people=["mdmem", "ali", "bob"]).encode())
    assert set(cfg.people) == {"mdmem", "ali"}  # bob is declared by his team already
    solo = Config.parse(render_config({}, [], people=["zoe"]).encode())
    assert solo.people == {}  # nobody else declared: the creator alone needs no entry
    with_people = Config.parse(render_config({}, [], people=["zoe", "ali"]).encode())
    assert set(with_people.people) == {"zoe", "ali"}


def test_declared_users_list_is_cut_after_twelve_names():
    twelve = Access({"t": frozenset(f"u{i:02d}" for i in range(12))})
    with pytest.raises(BadInput) as err:
        twelve.check_user("zed")
    assert "(known: u00, u01, u02, u03, u04, u05, u06, u07, u08, u09, u10, u11); users" in str(err.value)
    thirteen = Access({"t": frozenset(f"u{i:02d}" for i in range(13))})
    with pytest.raises(BadInput) as err:
        thirteen.check_user("zed")
    assert "(known: u00, u01, u02, u03, u04, u05, u06, u07, u08, u09, u10, u11, ...); users" in str(err.value)


def test_erasure_and_proof_permissions_and_words():
    access = Access({"payments": frozenset({"bob", "dana"}), "search": frozenset({"carol"}),
                     "ops": frozenset({"bob"})}, frozenset({"dana"}))
    assert access.may_erase_root("dana", "team/search") and access.may_erase_root("dana", "private/bob")
    assert access.may_erase_root("bob", "private/bob")
    assert not access.may_erase_root("bob", "team/payments") and not access.may_erase_root("bob", "private/alice")
    with pytest.raises(Refused) as err:
        access.check_forget("bob", ["team/payments", "team/ops", "team/search"])
    assert str(err.value).startswith("forget: bob may erase only their own private notes "
                                     "(it would change team/ops, team/payments); anything else")
    with pytest.raises(Refused) as err:
        access.check_prove("bob", subject=None, owner="alice")
    assert str(err.value) == ("prove-gone: bob may prove erasure of their own data only (--owner bob); anything "
                              "else needs the eraser role in mdmem.toml")
    with pytest.raises(NotFound) as err:
        access.visible_root("bob", "team/search/service/x/fact/k.md")  # well-formed, not his: echoed as given
    assert str(err.value) == "team/search/service/x/fact/k.md: no such note visible to bob"


def test_approver_rules_by_root_and_the_words_of_the_refusal():
    readers = frozenset({"alice", "bob", "dana"})
    # the owner approves holds into their own private root; nobody else's private root
    gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False, root="private/bob", readers=frozenset({"bob"}))
    with pytest.raises(Refused):
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False, root="private/alice")
    with pytest.raises(Refused) as err:  # a team root: a second reader approves
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False, root="team/payments", readers=readers)
    assert str(err.value) == ("review: bob wrote this held change and may not approve it; another reader of "
                              "team/payments approves it: mdmem review approve <id> --as alice (or dana)")
    with pytest.raises(Refused) as err:
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False, root="team/payments",
                            readers=frozenset({"bob", "alice"}))
    assert str(err.value).endswith("approves it: mdmem review approve <id> --as alice")
    with pytest.raises(Refused) as err:
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False, root="team/payments",
                            readers=readers | {"erin"})
    assert str(err.value).endswith("--as alice (or dana, erin)")
    with pytest.raises(Refused) as err:
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False, root="team/solo",
                            readers=frozenset({"bob"}))
    assert "; nobody else can read team/solo: add a second member to it (a single-user" in str(err.value)
    with pytest.raises(Refused) as err:  # no root given: nothing to name
        gate.check_approver("bob", "bob", gate.HUMAN, self_approve=False)
    assert "; nobody else can read : add a second member" in str(err.value)


def test_agent_ttl_cap_and_its_words():
    import datetime as dt
    working = Contracts().resolve("working")  # default_ttl 1h
    gate.check_agent_ttl(None, working, None)
    gate.check_agent_ttl(dt.timedelta(hours=1), working, None)
    with pytest.raises(BadInput) as err:
        gate.check_agent_ttl(dt.timedelta(hours=1, seconds=1), working, None)
    assert str(err.value) == ("ttl: an agent may keep a working note for at most 1h, not 3601s (the kind's "
                              "default_ttl, or [trust] agent_max_ttl in mdmem.toml)")
    gate.check_agent_ttl(dt.timedelta(days=2), working, dt.timedelta(days=2))
    with pytest.raises(BadInput, match="at most 2d, not 3d "):
        gate.check_agent_ttl(dt.timedelta(days=3), working, dt.timedelta(days=2))
    with pytest.raises(BadInput, match="at most 90m, not 2h "):
        gate.check_agent_ttl(dt.timedelta(hours=2), working, dt.timedelta(minutes=90))
    gate.check_agent_ttl(dt.timedelta(days=999), FACT, None)  # no default ttl, no cap: not capped
    with pytest.raises(BadInput, match="at most 1d, not 1000d "):
        gate.check_agent_ttl(dt.timedelta(days=1000), FACT, dt.timedelta(days=1))


def test_a_held_write_whose_note_changed_since_needs_override():
    """gate.check_unchanged_since_hold (review approve): unchanged, or --override, goes on; else
    Conflict naming the path, both days and what to do (mutmut: no unit test reached it)."""
    path = "team/payments/service/billing/fact/refund.fee.md"
    gate.check_unchanged_since_hold(path, "2026-10-01T09:00:00Z", None, override=False)
    gate.check_unchanged_since_hold(path, "2026-10-01T09:00:00Z", "2026-10-15T09:00:00Z", override=True)
    with pytest.raises(Conflict) as exc:
        gate.check_unchanged_since_hold(path, "2026-10-01T09:00:00Z", "2026-10-15T09:00:00Z", override=False)
    assert str(exc.value) == (f"{path}: changed since this write was held (held on 2026-10-01, now 2026-10-15); "
                              f"read it (mdmem show {path}), then reject the held write or approve it with "
                              "--override to supersede the newer version")
    with pytest.raises(Conflict, match=r"\(held on no note, now 2026-10-15\)"):
        gate.check_unchanged_since_hold(path, None, "2026-10-15T09:00:00Z", override=False)


def test_a_claimed_identity_must_be_true():
    """human:<x> only as x, system:<job> only over mdmem's own channel: both are trusted
    sources, so a false claim would skip review. Every other source is only
    judged by the gate (mutmut: no test of policy/gate reached this rule)."""
    for source, user, channel in (("human:alice", "alice", gate.HUMAN), ("user", "alice", gate.HUMAN),
                                  ("tool:grafana", "alice", gate.AGENT), ("system:consolidate", "mdmem", gate.SYSTEM),
                                  ("humans:bob", "alice", gate.HUMAN), ("agent:human:bob", "alice", gate.AGENT)):
        gate.check_claimed_identity(source, user, channel)
    with pytest.raises(Refused) as err:
        gate.check_claimed_identity("human:dana", "bob", gate.HUMAN)
    assert str(err.value) == "source: human:dana names another person; bob writes as user or human:bob"
    with pytest.raises(Refused, match="^source: human:bob names another person"):
        gate.check_claimed_identity("human:bob", "alice", gate.SYSTEM)  # no channel makes it true
    for channel in (gate.HUMAN, gate.AGENT):
        with pytest.raises(Refused) as err:
            gate.check_claimed_identity("system:consolidate", "bob", channel)
        assert str(err.value) == ("source: system:consolidate is for mdmem's own jobs (consolidate, sync, sweep); "
                                  "a person writes as user or human:bob, a tool's output as tool:<name>")
