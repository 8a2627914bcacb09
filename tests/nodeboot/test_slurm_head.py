"""A stack's Slurm head boots for real beside its first node, on emulated hosts: slurmctld runs in the golden
container from the locked image, the node's slurmd registers with it and offers the catalog's GPUs, and the munge key
comes from the cloud's secret store (moto's Secrets Manager; Alibaba's KMS, signed and RAM-checked): written once by
the head, the same on both hosts, root's alone, and in no user data, output or program input."""

from __future__ import annotations

import base64
import json
import re

import pytest

import emulated_stack
import head_accounting
from emulated_host import head_resource, node_resource, user_data_of
from goldenenv import catalog, clouds, jobs, plan
from goldenenv.clouds.alicloud.head import KMS_API_VERSION, MUNGE_STAGE, PLACEHOLDER
from goldenenv.slurm import config as slurm_config

pytestmark = pytest.mark.node_boot

CLOUD_STACKS = emulated_stack.CLOUD_STACKS
DEEP = ["aws-p5-2node", "alicloud-ebmgn8v-2node"]
"""An AWS stack with FSx and an Alibaba one with CPFS and eRDMA: the head restarts, the store's own view."""
SLURMCTLD = ["/usr/local/bin/goldenenv-slurm", "head", "--db-dir", "/var/lib/goldenenv-db"]
"""MariaDB with its data in the bound folder, slurmdbd, then slurmctld (issue 41)."""
KEY_FILE = "/etc/goldenenv/munge/munge.key"
GPUS = {"p5.48xlarge": 8, "ecs.ebmgn8v.48xlarge": 8}
"""Literal anchors from the clouds' instance type tables (8 x H100; 8 x H20), against a wrong catalog row."""


def head_exec(stack, command: str) -> tuple[int, str]:
    """A Slurm command in the head's golden container (as root, where slurmctld runs)."""
    return stack.head.host.sh(f"docker exec goldenenv {command}")


def node_record(stack) -> dict[str, str]:
    """The node as slurmctld has it (`scontrol show node -o`), or {} while it has not registered."""
    rc, out = head_exec(stack, f"scontrol show node -o {stack.node.host.name}")
    if rc != 0:
        return {}
    return dict(re.findall(r"(\w+)=(\S*)", out))


def registered(stack) -> bool:
    found = node_record(stack)
    return found.get("State", "").split("+")[0] == "IDLE" and not {"DRAIN", "NOT_RESPONDING", "INVALID_REG"} & set(
        found.get("State", "").split("+")[1:])


def munge_key(booted) -> bytes:
    rc, out = booted.host.sh(f"base64 -w0 {KEY_FILE}")
    assert rc == 0, out
    return base64.b64decode(out)


def stored_keys(stack) -> list[bytes]:
    """Every version of the stack's munge secret the cloud holds, as the deployer reads it back."""
    spec, apis = stack.spec, stack.apis
    if spec.cloud == "aws":
        arn = emulated_stack.script_values(stack.node.user_data, "munge-key-aws.sh")["secret"]
        client = apis.aws("secretsmanager", spec.region)
        versions = client.list_secret_version_ids(SecretId=arn)["Versions"]
        return [client.get_secret_value(SecretId=arn, VersionId=v["VersionId"])["SecretBinary"] for v in versions]
    values = emulated_stack.script_values(stack.node.user_data, "munge-key-alicloud.sh")
    status, listed = apis.alibaba(values["endpoint"], KMS_API_VERSION, "ListSecretVersionIds",
                                  SecretName=values["secret"], IncludeDeprecated="true")
    assert status == 200, listed
    keys = []
    for version in listed["VersionIds"]["VersionId"]:
        status, got = apis.alibaba(values["endpoint"], KMS_API_VERSION, "GetSecretValue",
                                   SecretName=values["secret"], VersionId=version["VersionId"])
        assert status == 200, got
        keys.append(base64.b64decode(got["SecretData"]) if got["SecretDataType"] == "binary"
                    else got["SecretData"].encode())
    return keys


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_head_runs_slurmctld_from_the_locked_image(stacks, golden_ref, client, stack):
    booted = stacks[stack]
    booted.head.up()
    head = booted.head.host
    assert set(head.units_state(booted.head.units).values()) == {"active"}, head.units_state(booted.head.units)
    golden = head.golden()
    assert golden.attrs["Config"]["Image"] == golden_ref, "the head runs the digest the nodes pull"
    assert golden.image.id == client.images.get(golden_ref).id
    assert golden.attrs["Config"]["Cmd"] == SLURMCTLD
    assert head.sh("hostname")[1].strip() == "head", "slurm.conf's SlurmctldHost"
    head.wait_for("slurmctld answering", lambda: head_exec(booted, "scontrol ping")[1].find("UP") >= 0, 60)
    rc, out = head_exec(booted, "ps -o user=,args= -C slurmctld")
    assert rc == 0 and out.split()[:2] == ["slurm", "slurmctld"], "slurmctld as slurm.conf's SlurmUser: " + out
    fs = booted.spec.storage.parallel_fs
    if fs.enabled:  # the queue's state lives on the shared file system: it outlives the head
        sources = {m["Destination"]: m["Source"] for m in golden.attrs["Mounts"]}
        assert sources["/var/spool/slurmctld"].startswith(booted.head.shares["sharedfs"] + "/"), sources


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_node_registers_with_the_head_offering_the_catalogs_gpus(stacks, stack_key, stack):
    booted = stacks[stack]
    booted.node.up()
    host = booted.head.host
    host.wait_for("the node registered, idle and responding", lambda: registered(booted), 120)
    found = node_record(booted)
    pool = booted.spec.nodes[0]
    gpus = catalog.instance_type(booted.spec.cloud, pool.instance_type).gpu_count
    assert gpus == GPUS.get(pool.instance_type, gpus)
    assert found["Gres"] == f"gpu:{gpus}", found
    assert pool.name in found["AvailableFeatures"].split(","), found
    assert found["NodeAddr"] == booted.node.host.address, found
    rc, out = head_exec(booted, "sinfo -h -N -o '%N %t %G'")
    assert rc == 0 and f"{booted.node.host.name} idle gpu:{gpus}" in out.splitlines(), out

    # the user's way in: the head from the stack outputs, over ssh with the stack's key, then Slurm's view
    cloud = clouds.get(booted.spec.cloud)
    address = cloud.head_host(booted.spec, booted.outputs, cloud.ssh_user)
    assert address == f"ssh://{cloud.ssh_user}@{booted.head.host.address}"
    head = jobs.cloud_head(booted.spec, address, str(stack_key["config"]), None, None, None, None)
    nodes, problems = jobs.scheduler_check(booted.spec, head)
    assert [n.name for n in nodes] == [booted.node.host.name]
    missing = sum(p.count for p in booted.spec.nodes) - 1  # the stack's other nodes are not booted here
    assert problems == ([f"{missing} of {missing + 1} nodes have not registered with slurmctld"] if missing else [])


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_munge_key_is_the_heads_on_both_hosts_root_only_and_in_no_user_data_output_or_input(stacks, stack):
    booted = stacks[stack]
    booted.node.up()
    key = munge_key(booted.head)
    assert len(key) == 1024
    assert munge_key(booted.node) == key, "one key: slurmd and slurmctld authenticate each other with it"
    for host in (booted.head.host, booted.node.host):
        assert host.sh(f"stat -c '%a %U %G' {KEY_FILE}")[1].split() == ["400", "root", "root"]
        assert host.sh(f"stat -c '%a' {KEY_FILE.rsplit('/', 1)[0]}")[1].strip() == "700"
    assert key in stored_keys(booted), "the key is the secret store's"

    forms = [key.hex(), base64.b64encode(key).decode(), base64.b64encode(key[:48]).decode()[:60]]
    inputs = json.dumps([r.props for r in booted.resources], default=str)
    outputs = json.dumps(booted.outputs, default=str)
    for form in forms:
        for where, text in (("the head's user data", booted.head.user_data),
                            ("the node's user data", booted.node.user_data),
                            ("the program's inputs", inputs), ("the stack outputs", outputs)):
            assert form not in text, f"the munge key is in {where}"
    for host in (booted.head.host, booted.node.host):
        _, logs = host.sh("journalctl -b --no-pager; cat /var/log/cloud-init-output.log")
        assert all(form not in logs for form in forms), f"the munge key is in {host.name}'s logs"
    assert key not in booted.node.user_data.encode() and key not in booted.head.user_data.encode()


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_the_head_runs_slurmdbd_with_the_password_it_made_from_the_secret_stores_key(stacks, stack):
    booted = stacks[stack]
    booted.head.up()
    stored = {f"the secret store's version {i}": base64.b64encode(k).decode() + "\n" + k.decode("latin-1")
              for i, k in enumerate(stored_keys(booted))}
    head_accounting.shows_accounting(booted.head, booted.spec, {
        "the head's user data": booted.head.user_data, "the node's user data": booted.node.user_data, **stored})


@pytest.mark.parametrize("stack", DEEP)
def test_the_head_writes_the_key_once_and_a_restart_keeps_it_and_the_node(stacks, stack):
    booted = stacks[stack]
    booted.node.up()
    booted.head.host.wait_for("the node registered", lambda: registered(booted), 120)
    key, stored = munge_key(booted.head), stored_keys(booted)
    assert stored.count(key) == 1, "the head wrote the key once"
    password = head_accounting.shows_accounting(booted.head, booted.spec, {})

    since = booted.head.host.sh("date +%s")[1].strip()
    booted.head.host.restart()
    booted.head.up()
    assert munge_key(booted.head) == key
    assert stored_keys(booted) == stored, "a second boot of the head writes no new key"
    _, journal = booted.head.host.sh(f"journalctl --since @{since} -u goldenenv-munge --no-pager")
    assert "munge key from" in journal and "writing a new one" not in journal, journal
    # slurmctld's state and the key outlived the head's restart: the node is known and still answers
    booted.head.host.wait_for("the node responding to the restarted head", lambda: registered(booted), 120)
    # the database outlived it too, opened with the password the head makes again from the same key
    cluster = slurm_config.cluster_name(booted.spec.stack)
    booted.head.host.wait_for("slurmdbd answering after the restart",
                              lambda: cluster in head_accounting.clusters(booted.head), 180)
    assert head_accounting.conf_value(booted.head, "StoragePass") == password, "the same key, the same password"


@pytest.mark.parametrize("stack", ["aws-p5-2node"])
def test_the_aws_munge_secret_is_encrypted_with_the_stacks_key(stacks, stack):
    """As far as moto goes: the secret names the stack's own KMS key (Secrets Manager's default key otherwise)."""
    booted = stacks[stack]
    booted.node.up()
    secret = next(r for r in booted.resources if r.type == "aws:secretsmanager/secret:Secret")
    key = next(r for r in booted.resources if r.type == "aws:kms/key:Key" and "munge" in r.name)
    arn = emulated_stack.script_values(booted.node.user_data, "munge-key-aws.sh")["secret"]
    described = booted.apis.aws("secretsmanager", booted.spec.region).describe_secret(SecretId=arn)
    kms = booted.apis.aws("kms", booted.spec.region).describe_key(KeyId=described["KmsKeyId"])["KeyMetadata"]
    assert described["KmsKeyId"] == secret.props["kmsKeyId"] == kms["Arn"]
    assert kms["KeyId"] == key.id and kms["Description"] == key.props["description"]
    assert len(described["VersionIdsToStages"]) == 1, "one version: the head's"


@pytest.mark.parametrize("stack", ["alicloud-ebmgn8v-2node"])
def test_an_alibaba_node_may_read_the_munge_key_but_never_write_it(stacks, stack):
    """The node's RAM role, as the plan declares it, checked by KMS on the node's own signed calls."""
    booted = stacks[stack]
    booted.node.up()
    values = emulated_stack.script_values(booted.node.user_data, "munge-key-alicloud.sh")
    call = lambda action, credentials, **p: booted.apis.alibaba(  # noqa: E731
        values["endpoint"], KMS_API_VERSION, action, credentials, SecretName=values["secret"], **p)
    status, got = call("GetSecretValue", booted.node.credentials, VersionStage=MUNGE_STAGE)
    assert status == 200 and base64.b64decode(got["SecretData"]) == munge_key(booted.node)
    status, refused = call("PutSecretValue", booted.node.credentials, VersionId="node-try", SecretData="eA==",
                           SecretDataType="binary", VersionStages=json.dumps([MUNGE_STAGE]))
    assert (status, refused["Code"]) == (403, "Forbidden.RAM")
    status, current = call("GetSecretValue", booted.head.credentials)
    assert status == 200 and current["SecretData"] == PLACEHOLDER, "the key is never the secret's current version"


@pytest.mark.parametrize("stack", DEEP)
def test_the_booted_user_data_is_the_plans_with_only_the_clouds_answers_in_it(stacks, stack):
    """What the hosts boot is what `goldenenv plan` renders, but for the values only the cloud computes."""
    booted = stacks[stack]
    resources, outputs = plan.run_program(stack, booted.config)
    planned_node = user_data_of(node_resource(resources, booted.spec.cloud))
    planned_head = user_data_of(head_resource(resources, booted.spec.cloud))
    answers = {outputs["headPrivateIp"]: booted.outputs["headPrivateIp"]}
    if booted.spec.cloud == "aws":
        planned = emulated_stack.script_values(planned_node, "munge-key-aws.sh")["secret"]
        answers[planned] = emulated_stack.script_values(booted.node.user_data, "munge-key-aws.sh")["secret"]
    for before, after in answers.items():
        planned_node, planned_head = planned_node.replace(before, after), planned_head.replace(before, after)
    assert planned_node == booted.node.user_data
    assert planned_head == booted.head.user_data
