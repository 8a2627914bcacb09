"""RULE: validate, run, submit, jobs, logs and cancel reach every cloud's hosts with that cloud's own login, and
reach the golden container as that login can.

On Google Cloud (OS Login) and Azure (Microsoft Entra ID) the login is the caller's own (a POSIX user such as
alice_example_com, a UPN such as alice@example.com), not the host image's `ubuntu` or `azureuser`, and that login is
outside the docker group: a plain `docker exec` is refused, `sudo -n docker exec` works with the role that grants
sudo (roles/compute.osAdminLogin; Virtual Machine Administrator Login). Each cloud declares its login
(Cloud.node_login); this holds every registered cloud, on every shipped stack and on the same stack with a key, to:
the hosts the commands log in to carry that login (the caller's, as the cloud's CLI prints it, where the login is
the caller's), and the remote command reaches the container through sudo unless the login is root.
The cloud CLIs are faked: the caller's name is what the test makes the login command print. The login the commands
are held to is the one the cloud's folder declares (node_login); KEY_USERS holds each declaration to the user its
host image's documentation names, so a new cloud is held to the commands' rule the day it is added and is asked for
its row there.
"""

from __future__ import annotations

import copy
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from typer.testing import CliRunner

import goldenenv.clouds  # noqa: F401  (registers the clouds)
from goldenenv import automation, jobs, lifecycle, remote, stackconfig
from goldenenv.cli import app
from goldenenv.cli.common import cloud_targets
from goldenenv.clouds import base
from goldenenv.images.lock import load as load_lock
from goldenenv.spec import ConfigError

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH8rV9z9OZ7M7JHMv7bwkXYRFdRigqwlobbewF3JKyFP ml@example"
CALLERS = {"gcp": "alice_example_com", "azure": "alice@example.com"}
"""What each cloud's own login looks like for alice@example.com: OS Login's POSIX user (the account's email with
`@` and `.` made `_`: Google's OS Login docs, `gcloud compute os-login describe-profile`), Entra ID's UPN."""
CALLER_COMMANDS = {"gcp": ("gcloud", "compute", "os-login", "describe-profile"), "azure": ("az", "account", "show")}
"""How the CLIs name the signed-in caller (anchors: gcloud's OS Login profile; `az account show`'s user.name)."""
KEY_USERS = {"aws": "ubuntu", "alicloud": "root", "gcp": "ubuntu", "azure": "azureuser", "tencent": "ubuntu", "huawei": "root"}
"""Literal anchors: the user that takes nodes.sshPublicKey: the Ubuntu AMI's default user, Alibaba's root, the
ssh-keys metadata's user goldenenv writes, Azure's administrator user."""
DOCKER_WITHOUT_SUDO = {"root"}
"""Logins that reach Docker without sudo: root. No host image in the catalog puts its login in the docker group."""
runner = CliRunner(env={"COLUMNS": "400"})


def cloud_of(path: Path) -> str:
    return stackconfig.read_stack_file(path)["goldenenv:cloud"]


PULUMI_CLOUDS = [name for name in base.names() if base.get(name).uses_pulumi]
SHIPPED = sorted((cloud_of(p), p.name.removeprefix("Pulumi.").removesuffix(".yaml"))
                 for p in STACKS.glob("Pulumi.*.yaml") if cloud_of(p) in PULUMI_CLOUDS)


def spec_of(stack: str, key: str | None = None):
    config = copy.deepcopy(stackconfig.read_stack_file(STACKS / f"Pulumi.{stack}.yaml"))
    if key:
        nodes = config["goldenenv:nodes"]
        for pool in nodes if isinstance(nodes, list) else [nodes]:
            pool["sshPublicKey"] = key
    values, unknown = stackconfig.namespaced(config)
    return stackconfig.load(stack, values, unknown)


def outputs_of(spec) -> dict:
    count = sum(pool.count for pool in spec.nodes)
    return {"nodePrivateIps": [f"10.42.0.{10 + i}" for i in range(count)],
            "instanceIds": [f"node-{i}" for i in range(count)], "headPrivateIp": "10.42.9.9",
            "launchEnv": {"MASTER_PORT": "29500", "NPROC_PER_NODE": "1"}}


def expected_user(cloud: str, spec, pool) -> str:
    """The login the cloud declares for the pool (None: the Slurm head): its user, else the caller's own name as the
    faked CLI prints it."""
    login = base.get(cloud).node_login(spec, pool)
    return login.user if login.user is not None else CALLERS.get(cloud, "alice")


def logs_in_as_caller(cloud: str, spec) -> bool:
    """Whether some host of the stack is logged in to as the caller (OS Login, Entra ID), as the cloud declares."""
    return any(base.get(cloud).node_login(spec, pool).user is None for pool in [*spec.nodes, None])


def own_login_stack() -> str:
    """A shipped stack whose users log in as themselves."""
    return next(s for c, s in SHIPPED if logs_in_as_caller(c, spec_of(s)))


class FakeShell:
    """subprocess.run as the commands see it: the cloud CLI prints the caller's name; ssh is recorded and refused
    (exit 255), which ends each command right after its first remote step."""

    def __init__(self, cloud: str):
        self.cloud, self.ssh, self.asked = cloud, [], []

    def __call__(self, argv, *args, **kwargs):
        argv = list(argv)
        text = kwargs.get("text") or kwargs.get("universal_newlines")
        if argv[0] == "ssh":
            self.ssh.append(argv)
            return subprocess.CompletedProcess(argv, 255, "" if text else b"", "stopped by the test" if text
                                               else b"stopped by the test")
        self.asked.append(tuple(argv))
        return subprocess.CompletedProcess(argv, 0, CALLERS.get(self.cloud, "alice") + "\n", "")


@pytest.fixture
def shell(monkeypatch):
    def make(cloud: str, spec) -> FakeShell:
        fake = FakeShell(cloud)
        monkeypatch.setattr(subprocess, "run", fake)
        monkeypatch.setattr(automation, "outputs", lambda s: outputs_of(spec))
        return fake
    return make


def reaches(prefix: str, user: str, spec) -> None:
    """The remote command enters the golden container as the image's user, through sudo unless the login is root."""
    words = prefix.split()
    docker = words[2:] if words[:2] == ["sudo", "-n"] else words
    assert docker[:2] == ["docker", "exec"] and "goldenenv" in docker, prefix
    assert f"--user {load_lock(spec.image.lock).user}" in prefix, prefix
    if user not in DOCKER_WITHOUT_SUDO:
        assert words[:2] == ["sudo", "-n"], f"{user} is outside the docker group: {prefix!r} would be refused"


def logged_in_as(host: str) -> str:
    return remote.Host.parse(host).user


@pytest.mark.parametrize("cloud", PULUMI_CLOUDS)
def test_every_cloud_says_how_its_users_log_in(cloud):
    assert any(c == cloud for c, _ in SHIPPED), f"{cloud} ships no stack to hold to the rule"
    spec = spec_of(next(s for c, s in SHIPPED if c == cloud))
    for pool in [*spec.nodes, None]:
        login = base.get(cloud).node_login(spec, pool)
        assert login.how and (login.user or login.caller), f"{cloud}: a login is a user or the caller's own name"
        if login.user is None and cloud in CALLER_COMMANDS:
            assert login.caller[:len(CALLER_COMMANDS[cloud])] == CALLER_COMMANDS[cloud]


@pytest.mark.parametrize("cloud", PULUMI_CLOUDS)
def test_each_clouds_key_user_is_the_one_its_host_images_document(cloud):
    if cloud not in KEY_USERS:
        pytest.fail(f"add {cloud}'s row to KEY_USERS in tests/unit/test_contract_node_access.py: the user its host "
                    "image gives nodes.sshPublicKey, as the cloud's page on logging in to its instances names it",
                    pytrace=False)
    spec = spec_of(next(s for c, s in SHIPPED if c == cloud), ED25519)
    assert {base.get(cloud).node_login(spec, pool).user for pool in [*spec.nodes, None]} == {KEY_USERS[cloud]}


@pytest.mark.parametrize(("cloud", "stack"), SHIPPED)
def test_validate_and_run_log_in_as_the_clouds_login_and_reach_the_container(cloud, stack, shell, monkeypatch):
    spec = lifecycle.load_spec(stack)
    fake = shell(cloud, spec)
    users = [expected_user(cloud, spec, pool) for pool in spec.nodes for _ in range(pool.count)]
    seen = {}

    def validate_hosts(lock, targets, exec_prefix, *args, **kwargs):
        seen["validate"] = (targets, exec_prefix)
        raise automation.LifecycleError("stopped by the test")

    def run_job(hosts, command, launch, addresses, on_line, ssh, exec_prefix, *args, **kwargs):
        seen["run"] = (hosts, exec_prefix)
        raise remote.RemoteError("stopped by the test")

    monkeypatch.setattr(lifecycle, "validate_hosts", validate_hosts)
    monkeypatch.setattr(remote, "run_job", run_job)
    for command in (["validate", "-s", stack], ["run", "-s", stack, "--", "hostname"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1 and "stopped by the test" in result.output, result.output
    for name, (hosts, prefix) in seen.items():
        assert [logged_in_as(h) for h in hosts] == users, f"{name} on {stack}"
        assert all(h.startswith(f"ssh://{urllib.parse.quote(u, safe='')}@") for h, u in zip(hosts, users))
        reaches(prefix, users[0], spec)
    if logs_in_as_caller(cloud, spec):
        assert fake.asked, f"{cloud}: the caller's own login was never asked of the cloud's CLI"


@pytest.mark.parametrize(("cloud", "stack"), SHIPPED)
def test_the_queue_commands_reach_the_head_as_the_clouds_login(cloud, stack, shell):
    spec = lifecycle.load_spec(stack)
    if spec.scheduler != "slurm":
        pytest.skip(f"{stack} runs no Slurm head")
    fake = shell(cloud, spec)
    user = expected_user(cloud, spec, None)
    for command in (["submit", "-s", stack, "--nodes", "1", "--", "python", "t.py"], ["jobs", "-s", stack],
                    ["logs", "7", "-s", stack], ["cancel", "7", "-s", stack]):
        before = len(fake.ssh)
        result = runner.invoke(app, command)
        assert result.exit_code == 1, (command, result.output)
        assert len(fake.ssh) == before + 1, f"{command[0]} made no ssh call: {result.output}"
        argv = fake.ssh[-1]
        assert argv[-2] == f"{user}@10.42.9.9", f"{command[0]} on {stack} logs in as {argv[-2]}"
        reaches(argv[-1], user, spec)


@pytest.mark.parametrize(("cloud", "stack"), SHIPPED)
def test_with_a_key_every_host_takes_the_keys_user(cloud, stack, shell):
    spec = spec_of(stack, ED25519)
    fake = shell(cloud, spec)
    targets, _ = cloud_targets(spec, None, None, None)
    users = {expected_user(cloud, spec, pool) for pool in spec.nodes}
    assert len(users) == 1 and {logged_in_as(t) for t in targets} == users
    reaches(jobs.container_exec(spec), next(iter(users)), spec)
    if spec.scheduler == "slurm":
        head = jobs.cloud_head(spec, None, None, None, None, base.HostsBy.PRIVATE_IP, None)
        assert logged_in_as(head.host) == expected_user(cloud, spec, None)
        reaches(head.exec_prefix, logged_in_as(head.host), spec)
    assert not fake.asked, "a key's user needs no look-up of the caller"


def test_ssh_user_overrides_the_clouds_login(shell):
    stack = own_login_stack()
    spec = lifecycle.load_spec(stack)
    fake = shell(spec.cloud, spec)
    targets, _ = cloud_targets(spec, None, None, "bob")
    assert {logged_in_as(t) for t in targets} == {"bob"} and not fake.asked


def test_a_caller_the_cloud_cli_cannot_name_is_bad_input_naming_ssh_user(monkeypatch):
    stack = own_login_stack()
    spec = lifecycle.load_spec(stack)
    monkeypatch.setattr(automation, "outputs", lambda s: outputs_of(spec))

    def missing(argv, *args, **kwargs):
        raise FileNotFoundError(argv[0])

    monkeypatch.setattr(subprocess, "run", missing)
    with pytest.raises(ConfigError) as caught:
        cloud_targets(spec, None, None, None)
    assert caught.value.problems[0].key == "--ssh-user" and "not on PATH" in caught.value.problems[0].message
    result = runner.invoke(app, ["validate", "-s", stack])
    assert result.exit_code == 1 and "--ssh-user" in result.output and result.exception.__class__ is SystemExit
