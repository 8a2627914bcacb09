"""`goldenenv team`: bad input in the stack file or on the command line is exit 2 naming its key, and the file is
left as it was; add, set and remove keep the file's comments and order; a running cluster gets the team applied, a
stopped one at its next up.

Each test works on a project of its own in tmp_path (Pulumi.yaml and a copy of the local stack), through the real
command line. The keys are literal anchors made with OpenSSH's ssh-keygen; the private keys are filler in the shapes
people paste (OpenSSH's armour, PEM's), never real keys.
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import jobs, project
from goldenenv.cli import app
from goldenenv.spec import ConfigError, Problem

REPO = Path(__file__).resolve().parents[2]
ANA = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGEhfSCwdLS+PsA85JJ0R3K4AKe7O95iEZi6nUCSmSpo ana@laptop"
BO = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0HOmTpAwnC3YWGawvrGG9I4E6gjDExUn7CmANLRChL bo@desk"
ANA_FINGERPRINT = "SHA256:1onvJ/vT0Mz4Uc2eaIrdtL/77yURMsgRG8dyxazY4TU"  # `ssh-keygen -lf` of ANA
_FILLER = base64.b64encode(b"openssh-key-v1\0" + bytes(range(256)) * 2).decode()
OPENSSH_PRIVATE = ("-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(_FILLER[i:i + 70] for i in range(0, 420, 70))
                   + "\n-----END OPENSSH PRIVATE KEY-----\n")
PEM_PRIVATE = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIObLW92AqkWunJXowVR2Z5/+yVPBaFHnEedDk5WJxk/BoAoGCCqGSM49\n" \
              "-----END EC PRIVATE KEY-----\n"

TEAM_YAML = f"""  # who shares the cluster
  goldenenv:team:
  - name: ana   # the lead
    uid: 2001
    sshPublicKey: {ANA}
    gpuHours: 100
  - name: bo
    uid: 2003
    sshPublicKey: {BO}
    share: 2   # part-time
"""
runner = CliRunner(env={"COLUMNS": "300"})


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    """Each test finds its own project; the working directory (which --cwd changes) comes back after it."""
    monkeypatch.chdir(os.getcwd())
    monkeypatch.setattr(project, "_current", None)


@pytest.fixture
def root(tmp_path) -> Path:
    """A project of one local stack whose file has a commented team of two."""
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "mine", "runtime": "python",
                                                          "stackConfigDir": "stacks"}))
    (tmp_path / "stacks").mkdir()
    shutil.copy(REPO / "stacks" / "Pulumi.local.yaml", tmp_path / "stacks" / "Pulumi.local.yaml")
    with (tmp_path / "stacks" / "Pulumi.local.yaml").open("a") as f:
        f.write(TEAM_YAML)
    return tmp_path


def stack(root: Path) -> Path:
    return root / "stacks" / "Pulumi.local.yaml"


def team_cli(root: Path, *args: str):
    return runner.invoke(app, ["--cwd", str(root), "team", *args])


def with_members(root: Path, *members: dict) -> None:
    """The stack file with this team instead (as YAML, written plainly)."""
    doc = yaml.safe_load(stack(root).read_text())
    doc["config"]["goldenenv:team"] = list(members)
    stack(root).write_text(yaml.safe_dump(doc, width=4096))


def refused(result, key: str) -> str:
    """The message at `key` of a command that exited 2 with no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line.strip() for line in result.output.splitlines() if line.strip().startswith(key + ": ")]
    assert lines, f"nothing at {key}:\n{result.output}"
    return lines[0].removeprefix(key + ": ")


def member(name: str = "cy", uid: object = 2005, key: str = ANA, **more) -> dict:
    return {"name": name, "uid": uid, "sshPublicKey": key, **more}


# ---------------------------------------------------------------- bad input in the stack file

@pytest.mark.parametrize("members, key, says", [
    ([member("ana"), member("ana", 2006)], "goldenenv:team[1].name", "already team[0]'s name"),
    ([member("ana"), member("bo", 2005)], "goldenenv:team[1].uid", "already team[0]'s uid"),
    ([member(uid=1999)], "goldenenv:team[0].uid", "from 2,000 to 59,999"),
    ([member(uid=60000)], "goldenenv:team[0].uid", "from 2,000 to 59,999"),
    ([member(uid="x")], "goldenenv:team[0].uid", "from 2,000 to 59,999"),
    ([member(key="hello world")], "goldenenv:team[0].sshPublicKey", "not an OpenSSH public key"),
    ([member(key=ANA.split()[0] + " AAAA")], "goldenenv:team[0].sshPublicKey", "copy the whole line"),
    ([member(gpuHours="ten")], "goldenenv:team[0].gpuHours", "'ten' is not a number"),
    ([member(gpuHours=True)], "goldenenv:team[0].gpuHours", "not a number"),
    ([member(gpuHours=0)], "goldenenv:team[0].gpuHours", "more than 0"),
    ([member(gpuHours=float("inf"))], "goldenenv:team[0].gpuHours", "not inf or nan"),
    ([member(share=0)], "goldenenv:team[0].share", "from 1 to 10,000"),
    ([member(share=2.5)], "goldenenv:team[0].share", "whole number"),
    ([member("Ana")], "goldenenv:team[0].name", "lower-case letters"),
    ([member("1ana")], "goldenenv:team[0].name", "starting with a letter or _"),
    ([member("a" * 33)], "goldenenv:team[0].name", "at most 32 characters"),
    ([member("ana;rm")], "goldenenv:team[0].name", "lower-case letters"),
    ([member(colour="red")], "goldenenv:team[0].colour", "unknown key"),
    ([{"name": "cy", "sshPublicKey": ANA}], "goldenenv:team[0].uid", "required"),
    ([1], "goldenenv:team[0]", "must be a mapping with name, uid, sshPublicKey, gpuHours, share; got 1"),
])
def test_bad_members_are_exit_2_naming_the_key(root, members, key, says):
    with_members(root, *members)
    assert says in refused(team_cli(root, "list"), key)


@pytest.mark.parametrize("name", ["root", "daemon", "bin", "sys", "nobody", "munge", "slurm", "mysql", "_apt",
                                  "users", "sudo"])
def test_a_name_the_image_already_has_is_refused(root, name):
    assert "already has; pick another name" in refused(team_cli_with(root, member(name)), "goldenenv:team[0].name")


def test_the_images_own_user_is_refused_naming_the_lock(root):
    lock = yaml.safe_load((REPO / "images" / "cpu-dev" / "lock.yaml").read_text())
    assert lock.get("user", "trainer") == "trainer", "the local stack's lock has another user: change this test"
    says = refused(team_cli_with(root, member("trainer")), "goldenenv:team[0].name")
    assert "golden image's own user" in says and "images/cpu-dev/lock.yaml" in says


def team_cli_with(root: Path, *members: dict):
    with_members(root, *members)
    return team_cli(root, "list")


@pytest.mark.parametrize("private", [OPENSSH_PRIVATE, PEM_PRIVATE], ids=["openssh", "pem"])
def test_a_private_key_is_refused_without_being_printed(root, private):
    says = refused(team_cli_with(root, member(key=private)), "goldenenv:team[0].sshPublicKey")
    assert "private key" in says and ".pub" in says
    output = team_cli(root, "list").output
    assert not any(line in output for line in private.splitlines()[1:-1])


@pytest.mark.parametrize("team, written", [(False, "false"), ("ana", "'ana'"), ({"name": "ana"}, "a mapping")])
def test_a_team_that_is_no_list_says_what_it_holds(root, team, written):
    doc = yaml.safe_load(stack(root).read_text())
    doc["config"]["goldenenv:team"] = team
    stack(root).write_text(yaml.safe_dump(doc, width=4096))
    assert refused(team_cli(root, "list"), "goldenenv:team") == (
        f"must be a list of members, each a mapping with name, uid, sshPublicKey, gpuHours, share; got {written}")
    before = stack(root).read_bytes()
    assert refused(team_cli(root, "add", "cy", "--key", ANA, "--no-apply"), "goldenenv:team")
    assert stack(root).read_bytes() == before, "a team that is no list is reported, never overwritten"


def test_a_team_needs_the_slurm_scheduler(root):
    doc = yaml.safe_load(stack(root).read_text())
    doc["config"]["goldenenv:scheduler"] = "none"
    stack(root).write_text(yaml.safe_dump(doc, width=4096))
    assert "goldenenv:scheduler: slurm" in refused(team_cli(root, "list"), "goldenenv:team")


# ---------------------------------------------------------------- list

def test_list_shows_each_members_limit_share_and_key(root):
    result = team_cli(root, "list")
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
            for line in result.output.splitlines() if line.startswith("│")}
    assert rows == {"ana": ["2001", "1", "100", "ssh-ed25519 ana@laptop"],
                    "bo": ["2003", "2", "no limit", "ssh-ed25519 bo@desk"]}
    assert "cluster-wide: no limit" in result.output


def test_list_json(root):
    import json

    result = team_cli(root, "list", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert listed["clusterGpuMinutes"] is None
    assert listed["members"][0] == {"name": "ana", "uid": 2001, "share": 1, "gpuHours": 100, "keyType": "ssh-ed25519",
                                    "keyComment": "ana@laptop", "keyFingerprint": ANA_FINGERPRINT}
    assert listed["members"][1]["gpuHours"] is None


# ---------------------------------------------------------------- edits keep the file

def test_add_set_remove_keep_the_files_comments_and_order(root, tmp_path):
    key_file = tmp_path / "cy.pub"
    key_file.write_text(ANA.replace("ana@laptop", "cy@home") + "\n")
    added = team_cli(root, "add", "cy", "--key", str(key_file), "--gpu-hours", "12.5", "--share", "4", "--no-apply")
    assert added.exit_code == 0, added.output
    assert "added cy (uid 2002)" in added.output, "the lowest free uid from 2001"
    changed = team_cli(root, "set", "ana", "--gpu-hours", "none", "--share", "3", "--no-apply")
    assert changed.exit_code == 0, changed.output
    removed = team_cli(root, "remove", "bo", "--no-apply")
    assert removed.exit_code == 0, removed.output
    text = stack(root).read_text()
    for comment in ("# The embedded default", "# who shares the cluster", "# the lead"):
        assert comment in text
    assert "part-time" not in text, "bo's line went with bo"
    config = yaml.safe_load(text)["config"]
    assert list(config)[:2] == ["goldenenv:cloud", "goldenenv:region"]
    assert config["goldenenv:team"] == [
        {"name": "ana", "uid": 2001, "sshPublicKey": ANA, "share": 3},
        {"name": "cy", "uid": 2002, "sshPublicKey": ANA.replace("ana@laptop", "cy@home"), "gpuHours": 12.5,
         "share": 4}]
    assert [line for line in text.splitlines() if "name: ana" in line] == ["  - name: ana   # the lead"]


def test_the_first_member_makes_the_key(root):
    with_members(root)
    doc = yaml.safe_load(stack(root).read_text())
    del doc["config"]["goldenenv:team"]
    stack(root).write_text(yaml.safe_dump(doc, width=4096))
    result = team_cli(root, "add", "ana", "--key", ANA, "--no-apply")
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(stack(root).read_text())["config"]["goldenenv:team"] == [
        {"name": "ana", "uid": 2001, "sshPublicKey": ANA}]


@pytest.mark.parametrize("args, key, says", [
    (["add", "cy", "--key", ANA, "--uid", "5"], "--uid", "from 2,000 to 59,999"),
    (["add", "cy", "--key", ANA, "--uid", "2001"], "--uid", "already team[0]'s uid"),
    (["add", "cy", "--key", ANA, "--gpu-hours", "ten"], "--gpu-hours", "'ten' is not a number"),
    (["add", "cy", "--key", ANA, "--share", "0"], "--share", "from 1 to 10,000"),
    (["add", "Cy", "--key", ANA], "NAME", "lower-case letters"),
    (["add", "root", "--key", ANA], "NAME", "already has"),
    (["add", "cy", "--key", "ssh-ed25519 AAAA"], "--key", "copy the whole line"),
    (["add", "cy", "--key", PEM_PRIVATE], "--key", "private key"),
    (["set", "bo", "--share", "10001"], "--share", "from 1 to 10,000"),
    (["set", "bo", "--gpu-hours", "-3"], "--gpu-hours", "more than 0"),
])
def test_a_bad_edit_is_exit_2_naming_the_flag_and_leaves_the_file_as_it_was(root, args, key, says):
    before = stack(root).read_bytes()
    assert says in refused(team_cli(root, *args, "--no-apply"), key)
    assert stack(root).read_bytes() == before
    assert [p.name for p in stack(root).parent.iterdir()] == ["Pulumi.local.yaml"], "no draft left behind"


@pytest.mark.parametrize("args, says", [
    (["add", "ana", "--key", ANA], "already in local's team"),
    (["remove", "cy"], "not in local's team (the team: ana, bo)"),
    (["set", "cy", "--share", "2"], "not in local's team"),
    (["set", "ana"], "nothing to set"),
    (["add", "cy", "--key", "no-such.pub"], "no such file, and not a public key line"),
    (["add", "cy", "--key", ANA, "--head", "ssh://me@10.0.0.1"], "--head: for cloud stacks"),
    (["remove", "bo", "--ssh-user", "me"], "--ssh-user: for cloud stacks"),
])
def test_edits_that_make_no_sense_are_exit_2(root, args, says):
    before = stack(root).read_bytes()
    result = team_cli(root, *args, "--no-apply")
    assert result.exit_code == 2 and says in result.output, result.output
    assert stack(root).read_bytes() == before


# ---------------------------------------------------------------- applying

class AppliedHead(jobs.Head):
    """A head whose goldenenv-team loop applies every team file at once."""

    def __init__(self):
        self.files: dict[str, bytes] = {}

    def run(self, argv):
        if argv[0] == "cat":
            return (0, self.files[argv[1]].decode()) if argv[1] in self.files else (1, "No such file")
        return 0, ""

    def write(self, path, data):
        import hashlib

        self.files[path] = data
        self.files[path.replace("team.tsv", "team.applied")] = f"{hashlib.sha256(data).hexdigest()}\tok\tdone\n".encode()


def test_an_edit_is_applied_to_the_running_cluster(root, monkeypatch):
    head = AppliedHead()
    monkeypatch.setattr(jobs, "local_head", lambda spec: (head, None))
    result = team_cli(root, "set", "bo", "--gpu-hours", "40")
    assert result.exit_code == 0, result.output
    assert "applied on local's head: done; running jobs go on" in result.output
    assert f"member\tbo\t2003\t2\t2400\t{BO}\n" in head.files["/data/jobs/.goldenenv/team.tsv"].decode()


def test_a_stack_that_is_not_up_takes_the_team_at_its_next_up(root, monkeypatch):
    def not_up(spec):
        raise ConfigError([Problem(f"stack {spec.stack}", "the head container is not running: goldenenv up first")])

    monkeypatch.setattr(jobs, "local_head", not_up)
    result = team_cli(root, "remove", "bo")
    assert result.exit_code == 0, result.output
    assert "local is not up: the team applies at the next goldenenv up" in result.output
    assert [m["name"] for m in yaml.safe_load(stack(root).read_text())["config"]["goldenenv:team"]] == ["ana"]


def test_a_head_that_fails_to_apply_is_exit_1_with_the_file_saved(root, monkeypatch):
    class Failing(AppliedHead):
        def write(self, path, data):
            raise jobs.HeadError(f"could not write {path} on the head")

    monkeypatch.setattr(jobs, "local_head", lambda spec: (Failing(), None))
    result = team_cli(root, "set", "bo", "--share", "5")
    assert result.exit_code == 1, result.output
    assert "the stack file is saved" in result.output and "goldenenv team apply -s local" in result.output
    assert yaml.safe_load(stack(root).read_text())["config"]["goldenenv:team"][1]["share"] == 5


def test_a_cloud_stack_is_applied_through_its_head_over_ssh_as_jobs_reach_it(root, monkeypatch):
    shutil.copy(REPO / "stacks" / "Pulumi.aws-p5-2node.yaml", root / "stacks" / "Pulumi.aws-p5-2node.yaml")
    head, asked = AppliedHead(), []

    def cloud_head(spec, host, ssh_config, identity, ssh_user, hosts_by, exec_prefix):
        asked.append((host, ssh_config))
        return head

    monkeypatch.setattr(jobs, "cloud_head", cloud_head)
    result = team_cli(root, "add", "ana", "-s", "aws-p5-2node", "--key", ANA, "--gpu-hours", "100",
                      "--head", "ssh://me@10.42.0.5", "--ssh-config", "ssh.cfg")
    assert result.exit_code == 0, result.output
    assert asked == [("ssh://me@10.42.0.5", "ssh.cfg")]
    assert head.files["/fsx/jobs/.goldenenv/team.tsv"].decode() == (
        f"member\tana\t2001\t1\t6000\t{ANA}\ncluster\t348837\tgres/gpu\n")


def test_a_cloud_head_that_cannot_be_read_is_exit_1_with_the_file_saved(root, monkeypatch):
    from goldenenv import automation

    shutil.copy(REPO / "stacks" / "Pulumi.aws-p5-2node.yaml", root / "stacks" / "Pulumi.aws-p5-2node.yaml")

    def no_cli(*args):
        raise automation.LifecycleError("the Pulumi CLI is not installed")

    monkeypatch.setattr(jobs, "cloud_head", no_cli)
    result = team_cli(root, "add", "ana", "-s", "aws-p5-2node", "--key", ANA)
    assert result.exit_code == 1, result.output
    assert "the stack file is saved" in result.output and "the Pulumi CLI is not installed" in result.output
    assert "Traceback" not in result.output
    saved = yaml.safe_load((root / "stacks" / "Pulumi.aws-p5-2node.yaml").read_text())["config"]["goldenenv:team"]
    assert [m["name"] for m in saved] == ["ana"]
