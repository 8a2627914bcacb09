"""Logging in to a cloud stack's nodes: the pool's SSH key as the cloud's key pair, and hosts by instance id.

The keys are literal anchors made with OpenSSH's ssh-keygen; their fingerprints are what `ssh-keygen -lf` printed
for them, so a wrong digest or encoding here would show. Stacks with keys are written here (tmp dirs, or config
dicts), never into the shipped stacks.
"""

from __future__ import annotations

import base64
import copy
import os
import shutil
import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from goldenenv import automation, clouds, lifecycle, project, remote, stackconfig
from goldenenv.cli import app
from goldenenv.clouds.aws.nodes import SSM_SSH_CONFIG
from goldenenv.guardrails import is_taggable
from goldenenv.plan import plan_config, stack_file
from goldenenv.spec import STACK_TAG_KEY, ConfigError

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH8rV9z9OZ7M7JHMv7bwkXYRFdRigqwlobbewF3JKyFP ml@example"
ECDSA_256 = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBClhEUEVjqmo5ZGWdBBgyImprm/1gFqy"
             "5gqc3ZWLrmaBIDeIqLRVh6jL3sN/BCbY6k2/KWXFhd6Ox2XAtgnQ6CU= ml@example")
ECDSA_384 = ("ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBNaLkUsdR+WAd8fxY02bbcYmaH0QK/x5"
             "BeaJhu7fZJJkRnYHmuCI8mh3jSQXTvlRg8k1k0lZUW2m9rC63Ty9Z10/CZ4A51eLMRo+RJZUh/Beb5ha90eWxe7TjjvzqPK7Uw== "
             "ml@example")
ECDSA_521 = ("ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBABPOBgh0kHvGyAipRLhp1hOz4WGIpkM"
             "kr3e3oFE4RUBe7FEGvcMhVWLqBeCK6+Oe+kI1Ylzx72KRN7Tje4K8/xVpAHJQj79AeGhwI86wEnS9n/hh2sK0WeHDTToMT1mGMp8Bsgky"
             "QEu6KXXk9JdQNlPR9hu9olL98q75Jv+jhoSi5MdkA== ml@example")
RSA_2048 = ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCeYLsPKkMRy/2KdVK4Q89Vff51u+EI7Oor2NhhqxFAOzuB30OUHoXDTteSXiMcuuoKYAOg"
            "3XtQCYJhxITwk5diPVRxgHsIdZ0M10VQsd+VU9RXDIXN9UspCcu9zw2txlTQHyfe+Nly4A1B0IVBp3R9ebG1h3whrlKEIUpHC7/X47Of6Fsp"
            "i+Dlywdmq3qVfHJ/e3tIF2AJnQKVXJdmUVycquCEl/F2EXQlNYd9hxF7OJQaqJ2m4r2ZZ/pFOmU1kPzCVd/YsG0iugjA4f6ZHD2UuCSd2IoU"
            "Ky8G0mNgXxJu3NFT2N86Uw2zhRpS40BaLyea4jJ+Y9Wbaj8geDGH7zKh ml@example")
RSA_1024 = ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQCbk+60HAYx43BxYQuFnwO4uzZEqgmK+P7Y7DgySyV7gwQ9lOHHsMsuvn0QdrjwT19iAbNC"
            "LJU8SRi5IL7D+M3sE0D7gKcZu9jPun3JG6eE3ldNzc0VOiof5k4/ej2ffqcuRW3Xl1Joz9WSp5fw7x24IIFzUKNf/mVygD3D/zIIeQ== "
            "ml@example")
FINGERPRINTS = {  # `ssh-keygen -lf` of each
    ED25519: "SHA256:hBY8HvmrZa1ogso4imuyi/Eku5atRz5iEoLHxzStaY0",
    ECDSA_256: "SHA256:u+jal/8TCjTNDm2jtNYHahU7leZWOweaONsINuLK7ak",
    ECDSA_384: "SHA256:ubNlfZ8c6UU21Mbqnhx3L18wpt1RSG/rtJVhM94pPLY",
    ECDSA_521: "SHA256:TFKrPyf7mPYQmgOTsVx7Da163UlvGLsknR9hCD9Q4u4",
    RSA_2048: "SHA256:9fZF72HpPJIT0gBQ+5c2QHIaaQYTY/6cTJlEMoNsJGs",
}
ED25519_BODY = ED25519.split()[1]

# The shapes of private keys as people paste them: OpenSSH's armour (its base64 begins with `openssh-key-v1`), the
# older PEM armour, and the OpenSSH body alone. Made of filler, not real keys; long enough (> 1024 characters) that
# a generic "too long" message quoting the start of the value would print them.
_FILLER = base64.b64encode(b"openssh-key-v1\0" + bytes(range(256)) * 8).decode()
OPENSSH_PRIVATE = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
                   + "\n".join(_FILLER[i:i + 70] for i in range(0, len(_FILLER), 70))
                   + "\n-----END OPENSSH PRIVATE KEY-----\n")
PEM_PRIVATE = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAnmC7DypDEcv9inVSuEPPVX3+dbvhCOzqK9jYYasRQDs7gd9D\n" \
              "-----END RSA PRIVATE KEY-----\n"
BODY_ONLY = _FILLER[:400]

LT = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_KEY_PAIR = "aws:ec2/keyPair:KeyPair"
ALI_KEY_PAIR = "alicloud:ecs/ecsKeyPair:EcsKeyPair"
ALI_INSTANCE = "alicloud:ecs/instance:Instance"
RESOURCE_GROUP = "alicloud:resourcemanager/resourceGroup:ResourceGroup"
runner = CliRunner(env={"COLUMNS": "400"})


def config(stack: str, key: str | None = None, **pool) -> dict:
    values = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    nodes = values["goldenenv:nodes"]
    nodes.update(pool)
    if key is not None:
        nodes["sshPublicKey"] = key
    return values


def load(stack: str, key) -> object:
    values, _ = stackconfig.namespaced(config(stack, key))
    return stackconfig.load("keys", values)


def refusal(stack: str, key) -> str:
    with pytest.raises(ConfigError) as caught:
        clouds.validate(load(stack, key))
    problems = caught.value.problems
    assert [p.key for p in problems] == ["goldenenv:nodes.sshPublicKey"], [str(p) for p in problems]
    return problems[0].message


def notes(result) -> list[str]:
    return [f.message for f in result.findings if f.rule == "plan-note"]


# ---------------------------------------------------------------- the key as the stack file gives it

@pytest.mark.parametrize("key", list(FINGERPRINTS), ids=lambda k: k.split()[0])
def test_each_accepted_key_type_loads_with_the_fingerprint_ssh_keygen_prints(key):
    pool = load("aws-p5-2node", "  " + key.replace(" ", "   ") + "\n").nodes[0]
    assert pool.ssh_public_key == key, "stored as one single-spaced line"
    assert pool.ssh_key.fingerprint == FINGERPRINTS[key]
    assert pool.ssh_key.type == key.split()[0] and pool.ssh_key.comment == "ml@example"


def test_a_key_without_a_comment_loads():
    assert load("aws-p5-2node", " ".join(ED25519.split()[:2])).nodes[0].ssh_key.comment == ""


@pytest.mark.parametrize("private", [OPENSSH_PRIVATE, PEM_PRIVATE, BODY_ONLY], ids=["openssh", "pem", "body"])
def test_a_private_key_is_refused_as_one_and_never_echoed(private):
    with pytest.raises(ConfigError) as caught:
        load("aws-p5-2node", private)
    (problem,) = caught.value.problems
    assert problem.key == "goldenenv:nodes.sshPublicKey"
    assert "private key" in problem.message and ".pub" in problem.message and "exposed" in problem.message
    text = str(caught.value)
    assert "BEGIN" not in text
    assert not any(private[i:i + 12] in text for i in range(0, len(private) - 12)), "no part of the key is echoed"


@pytest.mark.parametrize(("key", "says"), [
    (ED25519 + "\n" + RSA_2048, "one line"),
    ('from="10.0.0.0/8",no-pty ' + ED25519, "options"),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAPFjFDG5QYd0WG5PZNaN+4iSK2k+283UlaCMYryE0gQl ml@example", "DSA"),
    ("ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQtdjAxQG9wZW5zc2guY29t", "certificate"),
    ("sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t", "security-key"),
    (RSA_1024, "1024 bits"),
    ("ssh-ed25519", "no key after"),
    ("ssh-ed25519 not!base64 me", "not base64"),
    (ED25519.replace(ED25519_BODY, ED25519_BODY[:-12]), "truncated"),
    ("ssh-ed25519 " + RSA_2048.split()[1], "not a ssh-ed25519 key"),
    ("---- BEGIN SSH2 PUBLIC KEY ----\nAAAAC3NzaC1lZDI1NTE5\n---- END SSH2 PUBLIC KEY ----", "ssh-keygen -i"),
    ("AAAAC3NzaC1lZDI1NTE5AAAAIH8rV9z9OZ7M7JHMv7bwkXYRFdRigqwlobbewF3JKyFP", "accepted type"),
    (ED25519.replace("ml@example", "ml@example; $(id)"), "comment"),
    ("", "empty"),
])
def test_what_is_not_one_openssh_public_key_is_refused_saying_what_to_write(key, says):
    with pytest.raises(ConfigError) as caught:
        load("aws-p5-2node", key)
    (problem,) = caught.value.problems
    assert problem.key == "goldenenv:nodes.sshPublicKey" and says in problem.message, problem.message
    if len(key) > 20:
        assert key.split()[-1][-16:] not in problem.message, "the value is not echoed"


def test_a_key_that_is_no_text_is_refused_at_its_key():
    with pytest.raises(ConfigError) as caught:
        load("aws-p5-2node", ["ssh-ed25519", ED25519_BODY])
    assert [p.key for p in caught.value.problems] == ["goldenenv:nodes.sshPublicKey"]


def test_each_cloud_refuses_the_key_types_it_does_not_import():
    said = refusal("aws-p5-2node", ECDSA_256)
    assert "EC2" in said and "ssh-ed25519, ssh-rsa" in said
    said = refusal("alicloud-ebmgn8v-2node", ED25519)
    assert "Alibaba ECS" in said and "ssh-rsa" in said and "ssh-ed25519," not in said
    clouds.validate(load("aws-p5-2node", ED25519))
    clouds.validate(load("alicloud-ebmgn8v-2node", ECDSA_256))


# ---------------------------------------------------------------- AWS: one key pair per pool, on its template

def test_aws_pools_each_get_their_tagged_key_pair_on_their_launch_template():
    values = config("aws-p5-2node")
    gpu = values["goldenenv:nodes"]
    values["goldenenv:nodes"] = [{**gpu, "sshPublicKey": ED25519},
                                 {**gpu, "name": "spare", "count": 1, "sshPublicKey": RSA_2048}]
    result = plan_config("keys", values)
    assert not result.failed, [f.message for f in result.findings if f.severity.value == "error"]
    pairs = {r.parent_urn.rsplit("::", 1)[-1]: r for r in result.of_type(AWS_KEY_PAIR)}
    templates = {r.parent_urn.rsplit("::", 1)[-1]: r for r in result.of_type(LT)}
    # the Slurm head takes the first pool's key, as a key pair of its own
    assert pairs.pop("keys-head").props["publicKey"] == ED25519
    assert sorted(pairs) == sorted(templates) == ["keys-gpu", "keys-spare"]
    for pool, key in (("keys-gpu", ED25519), ("keys-spare", RSA_2048)):
        pair = pairs[pool]
        assert pair.props["publicKey"] == key
        assert templates[pool].props["keyName"] == pair.props["keyName"]
        assert pair.props["tags"][STACK_TAG_KEY] == "keys" and pair.props["tags"]["project"] == "llm-pretrain"
        assert is_taggable(pair.type)
    assert pairs["keys-gpu"].props["keyName"] != pairs["keys-spare"].props["keyName"]
    said = [n for n in notes(result) if "ssh logins as ubuntu" in n]
    assert len(said) == 1 and FINGERPRINTS[ED25519] in said[0] and FINGERPRINTS[RSA_2048] in said[0]
    assert "--hosts-by instance-id" in said[0] and "AWS-StartSSHSession" in said[0]
    assert not any(ED25519_BODY in n for n in notes(result)), "plan names the key by its fingerprint only"


def _pool_key_name(result) -> str:
    (pair,) = [r for r in result.of_type(AWS_KEY_PAIR) if r.name.endswith("-gpu-key")]
    return pair.props["keyName"]


def test_a_new_key_is_a_new_key_pair_name_so_nodes_see_their_template_move():
    first = _pool_key_name(plan_config("keys", config("aws-p5-2node", ED25519)))
    again = _pool_key_name(plan_config("keys", config("aws-p5-2node", ED25519)))
    other = _pool_key_name(plan_config("keys", config("aws-p5-2node", RSA_2048)))
    assert first == again != other
    assert first.startswith("goldenenv-llm-pretrain-keys-gpu-")


def test_aws_without_a_key_has_no_key_pair_and_plan_says_to_use_ssm():
    result = plan_config("nokey", config("aws-g5-dev"))
    assert result.of_type(AWS_KEY_PAIR) == []
    assert all("keyName" not in t.props for t in result.of_type(LT))
    (said,) = [n for n in notes(result) if "sshPublicKey" in n]
    assert "no SSH key" in said and "aws ssm start-session" in said and "ssmConnect" in said


# ---------------------------------------------------------------- Alibaba: the key pair in the stack's group

def test_alibaba_key_pair_sits_in_the_resource_group_tagged_and_every_node_takes_it():
    result = plan_config("keys", config("alicloud-ebmgn8v-2node", RSA_2048))
    pairs = {r.name: r for r in result.of_type(ALI_KEY_PAIR)}
    head = pairs.pop("keys-head-key")  # the Slurm head takes the pool's key, as a key pair of its own
    assert head.props["publicKey"] == RSA_2048
    assert head.props["keyPairName"] == next(r for r in result.of_type(ALI_INSTANCE)
                                             if r.name == "keys-head").props["keyName"]
    (pair,) = pairs.values()
    group = next(r for r in result.of_type(RESOURCE_GROUP) if not r.retain_on_delete)
    assert pair.props["publicKey"] == RSA_2048
    assert pair.props["resourceGroupId"] == group.id
    assert pair.props["tags"][STACK_TAG_KEY] == "keys" and is_taggable(pair.type)
    nodes = [r for r in result.of_type(ALI_INSTANCE) if r.name != "keys-head"]
    assert len(nodes) == 2 and {n.props["keyName"] for n in nodes} == {pair.props["keyPairName"]}
    assert not [f for f in result.findings if f.rule == "untagged-resource"]
    (said,) = [n for n in notes(result) if "ssh logins as root" in n]
    assert FINGERPRINTS[RSA_2048] in said


def test_alibaba_without_a_key_names_cloud_assistant():
    result = plan_config("nokey", config("alicloud-ebmgn8v-2node"))
    assert result.of_type(ALI_KEY_PAIR) == []
    assert all("keyName" not in n.props for n in result.of_type(ALI_INSTANCE))
    (said,) = [n for n in notes(result) if "sshPublicKey" in n]
    assert "Cloud Assistant" in said


# ---------------------------------------------------------------- validate and run: hosts by instance id

OUTPUTS = {"nodePrivateIps": ["10.42.0.10", "10.42.0.11"],
           "instanceIds": ["i-0123456789abcdef0", "i-0fedcba9876543210"],
           "launchEnv": {"MASTER_PORT": "29500", "NPROC_PER_NODE": "8"}}


def test_node_hosts_is_where_the_addressing_is_decided():
    spec = load("aws-p5-2node", None)
    aws = clouds.get("aws")
    assert aws.node_hosts(spec, OUTPUTS, "ubuntu") == ["ssh://ubuntu@10.42.0.10", "ssh://ubuntu@10.42.0.11"]
    assert aws.node_hosts(spec, OUTPUTS, "ubuntu", clouds.base.HostsBy.INSTANCE_ID) == [
        "ssh://ubuntu@i-0123456789abcdef0", "ssh://ubuntu@i-0fedcba9876543210"]
    assert clouds.get("alicloud").node_hosts(spec, OUTPUTS, "root", "instance-id")[0] == "ssh://root@i-0123456789abcdef0"


@pytest.fixture
def cloud_outputs(monkeypatch):
    monkeypatch.setattr(automation, "outputs", lambda spec: copy.deepcopy(OUTPUTS))


def test_validate_by_instance_id_logs_in_to_each_node_by_its_id(cloud_outputs, monkeypatch):
    seen = {}

    def validate_hosts(lock, targets, exec_prefix, ssh_config, *args, **kwargs):
        seen.update(targets=targets, ssh_config=ssh_config)
        raise automation.LifecycleError("stop here")

    monkeypatch.setattr(lifecycle, "validate_hosts", validate_hosts)
    result = runner.invoke(app, ["validate", "-s", "aws-p5-2node", "--hosts-by", "instance-id",
                                 "--ssh-config", "/tmp/ssm-config"])
    assert result.exit_code == 1 and "stop here" in result.output
    assert seen == {"targets": ["ssh://ubuntu@i-0123456789abcdef0", "ssh://ubuntu@i-0fedcba9876543210"],
                    "ssh_config": "/tmp/ssm-config"}


def test_run_by_instance_id_logs_in_by_id_and_meets_at_the_private_addresses(cloud_outputs, monkeypatch):
    seen = {}

    def run_job(hosts, command, launch, addresses, *args, **kwargs):
        seen.update(hosts=hosts, master=launch.master_addr, addresses=addresses, command=command)
        raise remote.RemoteError("stop here")

    monkeypatch.setattr(remote, "run_job", run_job)
    result = runner.invoke(app, ["run", "-s", "aws-p5-2node", "--hosts-by", "instance-id", "--", "hostname"])
    assert result.exit_code == 1 and "stop here" in result.output
    assert seen == {"hosts": ["ssh://ubuntu@i-0123456789abcdef0", "ssh://ubuntu@i-0fedcba9876543210"],
                    "master": "10.42.0.10", "addresses": ["10.42.0.10", "10.42.0.11"], "command": ["hostname"]}


@pytest.mark.parametrize("command", ["validate", "run"])
def test_hosts_and_hosts_by_together_or_an_unknown_way_are_bad_input(command, cloud_outputs):
    tail = ["--", "hostname"] if command == "run" else []
    both = runner.invoke(app, [command, "-s", "aws-p5-2node", "--hosts", "ssh://ubuntu@10.0.0.5",
                               "--hosts-by", "instance-id", *tail])
    assert both.exit_code == 2 and "give one" in both.output
    unknown = runner.invoke(app, [command, "-s", "aws-p5-2node", "--hosts-by", "public-ip", *tail])
    assert unknown.exit_code == 2 and "public-ip" in unknown.output


def test_by_instance_id_without_ids_in_the_outputs_says_so(monkeypatch):
    monkeypatch.setattr(automation, "outputs", lambda spec: {"nodePrivateIps": ["10.42.0.10"]})
    result = runner.invoke(app, ["validate", "-s", "aws-p5-2node", "--hosts-by", "instance-id"])
    assert result.exit_code == 1 and "instanceIds" in result.output and "goldenenv up first" in result.output


def test_hosts_by_on_the_local_stack_is_bad_input():
    for command in (["validate", "-s", "local", "--hosts-by", "instance-id"],
                    ["run", "-s", "local", "--hosts-by", "instance-id", "--", "hostname"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2 and "for cloud stacks" in result.output


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh client")
def test_the_ssm_ssh_config_plan_gives_sends_instance_id_hosts_through_session_manager(tmp_path):
    """OpenSSH itself resolves the hosts validate and run give (`ssh -G` prints the config it would use; it leaves
    the ProxyCommand's %h and %p for ssh to fill in when it connects)."""
    path = tmp_path / "ssh_config"
    path.write_text(f"{SSM_SSH_CONFIG[0]}\n  {SSM_SSH_CONFIG[1]}\n")

    def resolved(host: str) -> dict[str, str]:
        argv = remote.Ssh(str(path)).argv(host, "true")
        done = subprocess.run(["ssh", "-G", *argv[1:-1]], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)

    by_id = resolved("ssh://ubuntu@i-0123456789abcdef0")
    assert by_id["user"] == "ubuntu" and by_id["hostname"] == "i-0123456789abcdef0"
    assert by_id["proxycommand"] == ("aws ssm start-session --target %h --document-name AWS-StartSSHSession "
                                     "--parameters portNumber=%p")
    assert "proxycommand" not in resolved("ssh://ubuntu@10.42.0.10"), "private addresses go direct"


# ---------------------------------------------------------------- a stack file of the user's own

@pytest.fixture
def own_stack(tmp_path, monkeypatch):
    """A project in tmp with one AWS stack whose nodes get `key`; the CLI's project and cwd come back after."""
    monkeypatch.chdir(os.getcwd())
    monkeypatch.setattr(project, "_current", None)
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "mine", "runtime": "python",
                                                          "stackConfigDir": "stacks"}))
    (tmp_path / "stacks").mkdir()

    def write(key) -> list[str]:
        values = config("aws-g5-dev", key)
        (tmp_path / "stacks" / "Pulumi.mine.yaml").write_text(yaml.safe_dump({"config": values}))
        return ["--cwd", str(tmp_path), "plan", "-s", "mine"]

    return write


def test_plan_of_a_stack_with_a_key_shows_its_fingerprint_not_the_key(own_stack):
    result = runner.invoke(app, own_stack(ED25519))
    assert result.exit_code == 0, result.output
    assert FINGERPRINTS[ED25519] in result.output and ED25519_BODY not in result.output


def test_plan_of_a_stack_holding_a_private_key_refuses_it_without_printing_it(own_stack):
    result = runner.invoke(app, own_stack(OPENSSH_PRIVATE))
    assert result.exit_code == 2
    assert "sshPublicKey" in result.output and "private key" in result.output
    assert "BEGIN" not in result.output and _FILLER[40:60] not in result.output


def test_the_local_cloud_refuses_a_key_it_would_not_use(tmp_path):
    """A key on the local stack would be silently ignored: it is bad input, named by its key."""
    doc = yaml.safe_load(stack_file("local").read_text())
    doc["config"]["goldenenv:nodes"]["sshPublicKey"] = ED25519
    (tmp_path / "Pulumi.local.yaml").write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["plan", "-s", "local", "--stacks-dir", str(tmp_path)])
    assert result.exit_code == 2 and "goldenenv:nodes.sshPublicKey" in result.output, result.output
