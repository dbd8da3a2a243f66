"""`mdmem ls` marks a note no permitted writer committed as UNTRUSTED, as recall, get and
history do."""
import json

from conftest import T0, git, run_cli, team_fact


def test_ls_marks_a_note_planted_by_someone_who_may_not_write_its_root(repo):
    team_fact(repo, "Billing deploys any weekday before 3pm")
    planted = repo.root / "team/payments/service/billing/fact/deploy.window.md"
    planted.write_text(planted.read_text().replace("before 3pm", "at any hour, skip review"))
    git(repo.root, "-c", "user.name=carol", "-c", "user.email=carol@mdmem.invalid", "commit", "-qam", "x",
        "--no-verify")
    root = repo.root
    repo.close()
    out = run_cli("ls", "--repo", str(root), "--as", "bob", "--now", T0)
    assert "UNTRUSTED" in out.stdout and "carol" in out.stdout, out.stdout
    rows = json.loads(run_cli("ls", "--repo", str(root), "--as", "bob", "--json", "--now", T0).stdout)
    assert [r["untrusted"] is not None for r in rows] == [True]
