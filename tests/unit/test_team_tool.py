"""goldenenv-team, the image's side of the team (goldenenv/slurm/team.py): what it asks of sacctmgr for a team file.
A stand-in sacctmgr answers as Slurm 22.05's does and records every change (the real one runs in the e2e tests on
the local stack); a malformed file is refused naming its line."""

from __future__ import annotations

import subprocess

import pytest

from goldenenv.slurm import team as tool

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAJylII5SYp7jiSZy/hJe+CKj5SpQQsUda/ox067abwO ada@laptop"


class Sacctmgr:
    """Slurm's associations in memory: clusters, accounts, and (account, user) → settings."""

    def __init__(self, users: dict[str, dict] | None = None, busy: set[str] = frozenset()):
        self.clusters, self.accounts = {"stack"}, {"team"}
        self.users = users or {}
        self.busy = busy
        self.changes: list[str] = []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess:
        words = argv[4:]  # after sacctmgr --immediate --noheader --parsable2
        verb, what = words[0], words[1]
        out, rc, err = "", 0, ""
        if verb == "show" and what == "cluster":
            out = "\n".join(self.clusters) + "\n"
        elif verb == "show" and what == "account":
            out = "\n".join(self.accounts) + "\n"
        elif verb == "show" and what == "association":
            out = "\n" + "\n".join(self.users) + "\n"
        elif verb == "add" and what == "user":
            self.users[words[2]] = {}
            self.changes.append(" ".join(words))
        elif verb == "modify" and what == "user":
            name = next(w.split("=", 1)[1] for w in words if w.startswith("name="))
            self.users[name].update(w.split("=", 1) for w in words[words.index("set") + 1:])
        elif verb == "modify" and what == "account":
            self.changes.append(" ".join(words))
        elif verb == "delete" and what == "user":
            name = next(w.split("=", 1)[1] for w in words if w.startswith("name="))
            if name in self.busy:
                rc, err = 1, " Error with request: Job(s) active, cancel job(s) before remove"
            else:
                del self.users[name]
                self.changes.append(" ".join(words))
        return subprocess.CompletedProcess(argv, rc, out, err)


@pytest.fixture
def slurm(monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=stack\n")
    real_open = open
    monkeypatch.setattr(tool, "open", lambda path, *a, **k: real_open(conf if path == "/etc/slurm/slurm.conf"
                                                                       else path, *a, **k), raising=False)

    def install(fake: Sacctmgr) -> Sacctmgr:
        monkeypatch.setattr(tool, "run", fake)
        return fake
    return install


def test_members_get_their_share_and_gpu_minutes_and_the_account_the_budgets(slurm):
    fake = slurm(Sacctmgr())
    team = tool.parse(f"member\tada\t2001\t2\t30\t{KEY}\nmember\tbob\t2002\t1\t-\t{KEY}\ncluster\t900\tgres/npu\n")
    tool.apply_accounts(team, "trainer")
    assert fake.users == {"ada": {"fairshare": "2", "GrpTRESMins": "gres/npu=30"},
                          "bob": {"fairshare": "1", "GrpTRESMins": "gres/npu=-1"},
                          "trainer": {"fairshare": "1", "GrpTRESMins": "gres/npu=-1"}}
    assert "modify account where name=team cluster=stack set GrpTRESMins=gres/npu=900" in fake.changes


def test_a_member_gone_from_the_file_loses_the_association_unless_their_jobs_still_run(slurm):
    fake = slurm(Sacctmgr({"ada": {}, "bob": {}, "cy": {}, "trainer": {}}, busy={"cy"}))
    said = tool.apply_accounts(tool.parse(f"member\tada\t2001\t1\t-\t{KEY}\ncluster\t-\tgres/gpu\n"), "trainer")
    assert set(fake.users) == {"ada", "cy", "trainer"}, "bob removed; cy kept while Slurm refuses (jobs running)"
    assert any(s.startswith("cy not removed yet") for s in said)


def test_a_head_with_no_team_file_yet_associates_its_user_and_keeps_a_restored_historys_members(slurm):
    fake = slurm(Sacctmgr({"ada": {"GrpTRESMins": "gres/gpu=60"}}))
    assert tool._bare("trainer")
    assert set(fake.users) == {"ada", "trainer"} and fake.users["ada"]["GrpTRESMins"] == "gres/gpu=60"


@pytest.mark.parametrize("line", ["member\tada\t2001\t1\t-", "member\tAda\t2001\t1\t-\tk", "member\tada\tx\t1\t-\tk",
                                  "cluster\t-\tgpu", "owner\tada"])
def test_a_malformed_line_is_refused_by_its_number(line):
    with pytest.raises(ValueError, match="line 2 is not a team record"):
        tool.parse(f"cluster\t-\tgres/gpu\n{line}\n")
