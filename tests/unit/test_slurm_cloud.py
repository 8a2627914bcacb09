"""Slurm on every cloud stack (goldenenv:scheduler slurm, the default): the head, its security rules, the munge key's
secret and the nodes' slurmd, as the offline plan declares them; and `scheduler: none` keeps today's stack."""

from __future__ import annotations

import base64
import gzip
import copy
import json
import shlex

import pytest
import yaml

from goldenenv import catalog, clouds, costs, slurm, stackconfig
from goldenenv.catalog import health
from goldenenv.clouds.base import HostsBy
from goldenenv.nodeboot import MUNGE_KEY_FILE, SLURM_CONF
from goldenenv.plan import plan_config, stack_file

DIGEST = "sha256:" + "0123456789abcdef" * 4
ECR_REF = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/goldenenv/aws-h100@{DIGEST}"

INSTANCE = "aws:ec2/instance:Instance"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
SG = "aws:ec2/securityGroup:SecurityGroup"
IN_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SECRET = "aws:secretsmanager/secret:Secret"
KMS_KEY = "aws:kms/key:Key"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


def config(stack: str = "aws-p5-2node", **changes) -> dict:
    """A shipped stack with a pushed golden image (so the nodes and the head run their container)."""
    values = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    values["goldenenv:image"] = {**values["goldenenv:image"], "ref": ECR_REF}
    values.update(changes)
    return values


@pytest.fixture(scope="module")
def p5():
    return plan_config("aws-p5-2node", config())


@pytest.fixture(scope="module")
def g5():
    """No shared file system: slurmctld's state stays on the head's root volume."""
    return plan_config("aws-g5-dev", config("aws-g5-dev"))


def one(p, type_token, name_part: str = ""):
    found = [r for r in p.of_type(type_token) if name_part in r.name]
    assert len(found) == 1, f"expected one {type_token} named *{name_part}*, found {[r.name for r in found]}"
    return found[0]


def head(p):
    return one(p, INSTANCE, "-head")


def boot_files(user_data_b64: str) -> dict[str, str]:
    """The files as cloud-init writes them (a gz+b64 one decompressed)."""
    doc = yaml.safe_load(base64.b64decode(user_data_b64).decode())
    return {f["path"]: gzip.decompress(base64.b64decode(f["content"])).decode() if f.get("encoding") == "gz+b64"
            else f["content"] for f in doc["write_files"]}


def docker_run(files: dict[str, str]) -> list[str]:
    """The golden container's `docker run` words, as the container script runs them."""
    script = files["/usr/local/libexec/goldenenv/golden-image.sh"]
    line = script[script.index("exec docker run"):].replace("\\\n", " ")
    return shlex.split(line.splitlines()[0].replace('"${devices[@]}"', ""))


def after_image(run: list[str]) -> list[str]:
    return run[run.index("$image") + 1:]


def walk(value):
    """Every key and leaf of a planned input."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)
    else:
        yield value


# ---------------------------------------------------------------- the head exists with slurm, not with none

@pytest.mark.parametrize("stack", ["aws-p5-2node", "aws-p4d-4node-spot", "aws-g5-dev"])
def test_every_aws_stack_gets_one_head_and_a_munge_secret_by_default(stack):
    p = plan_config(stack, config(stack))
    assert not p.failed, [f.message for f in p.findings if f.severity.value == "error"]
    assert head(p).parent_urn.endswith("goldenenv:aws:SlurmHead::" + f"{stack}-head")
    assert len(p.of_type(SECRET)) == 1
    assert p.outputs["headPrivateIp"] == head(p).outputs["privateIp"]
    assert p.outputs["headInstanceId"] == head(p).id


@pytest.mark.parametrize("stack", ["aws-p5-2node", "aws-g5-dev"])
def test_scheduler_none_has_no_head_no_secret_and_nodes_that_sleep(stack):
    p = plan_config(stack, config(stack, **{"goldenenv:scheduler": "none"}))
    assert [r for r in p.resources if "head" in r.name or "munge" in r.name] == []
    assert not any(k.startswith("head") for k in p.outputs)
    assert not any(line.name == "compute head" for line in p.lines)
    files = boot_files(one(p, LT).props["userData"])
    assert after_image(docker_run(files)) == ["sleep", "infinity"]
    assert "--user" not in docker_run(files)
    assert not any("munge" in path for path in files)


# ---------------------------------------------------------------- the head: on demand, CPU, private, IMDSv2, encrypted

def test_the_head_is_a_small_on_demand_cpu_instance_of_the_catalog(p5):
    node = head(p5).props
    assert node["instanceType"] == clouds.get("aws").head_instance_type == "m7i.large"
    assert catalog.head_type("aws", node["instanceType"]) is not None
    assert node["instanceType"] not in catalog.instance_types("aws"), "no GPU type"
    assert "instanceMarketOptions" not in node, "never spot"
    assert head(p5).delete_before_replace, "two controllers never share slurmctld's state"


def test_the_heads_type_is_the_stacks_when_it_names_one():
    p = plan_config("aws-p5-2node", config(**{"goldenenv:head": {"instanceType": "m7i.xlarge"}}))
    assert head(p).props["instanceType"] == "m7i.xlarge"


def test_the_head_is_private_requires_imdsv2_and_encrypts_its_root_volume(p5):
    node = head(p5).props
    private = next(r for r in p5.of_type("aws:ec2/subnet:Subnet") if r.name.endswith("-private"))
    assert node["subnetId"] == private.id and private.props["mapPublicIpOnLaunch"] is False
    assert node["associatePublicIpAddress"] is False
    assert node["metadataOptions"]["httpTokens"] == "required"
    assert node["rootBlockDevice"]["encrypted"] is True
    assert node["rootBlockDevice"]["volumeSize"] == max(pool.root_volume_gib for pool in p5.spec.nodes)
    assert node["tags"]["Name"] == "aws-p5-2node-head" and node["tags"]["goldenenv:stack"] == "aws-p5-2node"
    assert node["rootBlockDevice"]["tags"]["goldenenv:stack"] == "aws-p5-2node"


def test_the_head_boots_the_first_pools_host_image(p5):
    template = one(p5, LT)
    assert head(p5).props["ami"] == template.props["imageId"]


# ---------------------------------------------------------------- security groups

def test_slurmctld_and_srun_reach_the_head_from_the_node_group_only(p5):
    nodes, group = one(p5, SG, "-nodes"), one(p5, SG, "-head")
    assert not group.props.get("ingress"), "the head's rules are standalone: the node group names the head group"
    rules = [r for r in p5.of_type(IN_RULE) if r.props["securityGroupId"] == group.id]
    assert all(not r.props.get("cidrIpv4") and not r.props.get("cidrIpv6") for r in rules), "no address range"
    by_port = {(r.props["fromPort"], r.props["toPort"]): r.props["referencedSecurityGroupId"] for r in rules}
    assert by_port[(6817, 6817)] == nodes.id
    assert by_port[slurm.SRUN_PORTS] == nodes.id
    storage = one(p5, SG, "-storage")
    assert {ports for ports, source in by_port.items() if source == storage.id} == {(988, 988), (1018, 1023)}


def test_the_node_group_takes_slurmd_and_srun_from_the_head_group(p5):
    nodes, group = one(p5, SG, "-nodes"), one(p5, SG, "-head")
    from_head = {(rule["fromPort"], rule["toPort"]) for rule in nodes.props["ingress"]
                 if group.id in (rule.get("securityGroups") or [])}
    assert from_head == {(6818, 6818), slurm.SRUN_PORTS}


def test_the_file_servers_take_lustre_from_the_head_too(p5):
    storage, group = one(p5, SG, "-storage"), one(p5, SG, "-head")
    lustre = {(r.props["fromPort"], r.props["toPort"]) for r in p5.of_type(IN_RULE)
              if r.props["securityGroupId"] == storage.id and r.props.get("referencedSecurityGroupId") == group.id}
    assert lustre == {(988, 988), (1018, 1023)}


def test_endpoints_egress_reaches_secrets_manager():
    p = plan_config("aws-g5-dev", config("aws-g5-dev", **{"goldenenv:network": {"egress": "endpoints"}}))
    services = {r.props["serviceName"] for r in p.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")}
    assert "com.amazonaws.us-east-1.secretsmanager" in services


# ---------------------------------------------------------------- the nodes run slurmd, the head slurmctld

def test_a_p5_node_runs_slurmd_as_root_with_8_gpus_registering_with_the_head(p5):
    files = boot_files(one(p5, LT).props["userData"])
    run = docker_run(files)
    ip = p5.outputs["headPrivateIp"]
    # literal anchors: p5.48xlarge has 8 H100s, 32 EFA interfaces, 18 NVLinks per GPU on an NVSwitch board
    assert after_image(run) == [slurm.ENTRY, "node", "--conf-server", ip, "--health",
                                "fabric=efa,fabric_devices=32,gpus=8,nvlinks_per_gpu=18,nvswitch=yes",
                                "--gpus", "8", "--feature", "gpu"]
    assert run[run.index("--user") + 1] == "root"
    assert run[run.index("--add-host") + 1] == f"{slurm.HEAD_HOSTNAME}:{ip}"
    assert "--gpus" in run[:run.index("$image")]
    assert f"{MUNGE_KEY_FILE}:{slurm.MUNGE_KEY_MOUNT}:ro" in run


def test_a_g5_node_offers_its_one_gpu(g5):
    run = docker_run(boot_files(one(g5, LT).props["userData"]))
    assert after_image(run)[after_image(run).index("--gpus") + 1] == "1"


def test_the_head_runs_slurmctld_without_gpus_with_its_conf_key_and_state(p5):
    from goldenenv.slurm import config as slurm_config

    files = boot_files(head(p5).props["userDataBase64"])
    run = docker_run(files)
    assert after_image(run) == [slurm.ENTRY, "head", "--db-dir", slurm.DB_DIR], "MariaDB, slurmdbd, then slurmctld"
    assert "--gpus" not in run and run[run.index("--user") + 1] == "root"
    volumes = [run[i + 1] for i, word in enumerate(run) if word == "--volume"]
    assert f"{MUNGE_KEY_FILE}:{slurm.MUNGE_KEY_MOUNT}:ro" in volumes
    assert f"{slurm.CONF_MOUNT}:{slurm.CONF_MOUNT}:ro" in volumes
    assert f"/fsx/slurm/state:{slurm.STATE_DIR}" in volumes, "the queue outlives the head on the parallel FS"
    assert f"/fsx/slurm/db:{slurm.DB_DIR}" in volumes, "so does the accounting history, in a folder beside it"
    assert "/fsx:/fsx" in volumes, "job output lives on the shared file system"
    assert files[SLURM_CONF] == slurm_config.render_conf(p5.spec, clouds.get("aws").slurmd_timeout, slurm.STATE_DIR)
    assert yaml.safe_load(base64.b64decode(head(p5).props["userDataBase64"]))["hostname"] == slurm.HEAD_HOSTNAME
    assert "/usr/local/libexec/goldenenv/fsx-mount.sh" in files, "the head mounts the shared file system"
    assert "/fsx/jobs" in files["/usr/local/libexec/goldenenv/fsx-mount.sh"]
    assert "/fsx/slurm/db" in files["/usr/local/libexec/goldenenv/fsx-mount.sh"], "the mount makes the db folder"
    assert "GOLDENENV_JOBS=/fsx/jobs" in files["/etc/goldenenv/launch.env"], "where the history is exported to"


def test_without_a_shared_file_system_slurmctlds_state_is_on_the_heads_root_volume(g5):
    files = boot_files(head(g5).props["userDataBase64"])
    run = docker_run(files)
    assert "GOLDENENV_JOBS=/scratch/jobs" in files["/etc/goldenenv/launch.env"], "the jobs folder where places() has it"
    volumes = [run[i + 1] for i, word in enumerate(run) if word == "--volume"]
    assert f"/var/lib/goldenenv/slurm/state:{slurm.STATE_DIR}" in volumes
    assert f"/var/lib/goldenenv/slurm/db:{slurm.DB_DIR}" in volumes, "the history beside the queue, on the root volume"
    assert not any(v.startswith("/fsx") for v in volumes)


def test_the_munge_unit_comes_before_the_container_on_both_roles(p5):
    for user_data in (one(p5, LT).props["userData"], head(p5).props["userDataBase64"]):
        files = boot_files(user_data)
        container = files["/etc/systemd/system/goldenenv-container.service"]
        assert "goldenenv-munge.service" in container.split("After=")[1].splitlines()[0]
        script = files["/usr/local/libexec/goldenenv/golden-image.sh"]
        assert "/run/goldenenv/goldenenv-munge.ready" in script
    assert "put-secret-value" in boot_files(head(p5).props["userDataBase64"])[
        "/usr/local/libexec/goldenenv/munge-key-aws.sh"], "the head writes the key when there is none"
    assert "put-secret-value" not in boot_files(one(p5, LT).props["userData"])[
        "/usr/local/libexec/goldenenv/munge-key-aws.sh"], "a node only reads it"


# ---------------------------------------------------------------- the munge key: a secret with no value in the program

def test_the_munge_secret_is_encrypted_with_the_stacks_own_kms_key(p5):
    secret, key = one(p5, SECRET), one(p5, KMS_KEY, "-munge")
    assert secret.props["kmsKeyId"] == key.outputs["arn"]
    assert key.props["enableKeyRotation"] is True
    assert secret.props["tags"]["goldenenv:stack"] == "aws-p5-2node"


def test_no_key_material_in_any_planned_input_output_or_user_data(p5):
    assert not [r for r in p5.resources if "secretVersion" in r.type or "SecretVersion" in r.type]
    keys = {str(k).lower() for r in p5.resources for k in walk(dict(r.props))}
    assert not keys & {"secretstring", "secretbinary", "secretdata"}
    text = json.dumps(p5.outputs, default=str).lower()
    assert "munge.key" not in text and "secretbinary" not in text
    for user_data in (one(p5, LT).props["userData"], head(p5).props["userDataBase64"]):
        files = boot_files(user_data)
        assert MUNGE_KEY_FILE not in files, "the key file is fetched at boot, never delivered"
        script = files["/usr/local/libexec/goldenenv/munge-key-aws.sh"]
        assert "/dev/urandom" not in script or "fileb://" in script, "a new key goes to the API from a file"


def test_the_head_may_describe_write_and_read_the_secret_and_nodes_only_read_it(p5):
    secret, key = one(p5, SECRET), one(p5, KMS_KEY, "-munge")
    head_doc = json.loads(one(p5, ROLE_POLICY, "-head-munge-key").props["policy"])
    node_doc = json.loads(one(p5, ROLE_POLICY, "-gpu-munge-key").props["policy"])
    for doc, secret_actions, key_actions in (
        (head_doc, {"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"},
         {"kms:Decrypt", "kms:GenerateDataKey"}),
        (node_doc, {"secretsmanager:GetSecretValue"}, {"kms:Decrypt"}),
    ):
        on_secret, on_key = doc["Statement"]
        assert set(on_secret["Action"]) == secret_actions and on_secret["Resource"] == secret.outputs["arn"]
        assert set(on_key["Action"]) == key_actions and on_key["Resource"] == key.outputs["arn"]
        assert on_key["Condition"] == {"StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}}


# ---------------------------------------------------------------- reaching the head, the plan's price

@pytest.mark.parametrize("by, output", [(HostsBy.PRIVATE_IP, "headPrivateIp"), (HostsBy.INSTANCE_ID, "headInstanceId")])
def test_head_host_names_the_heads_ssh_target_like_the_nodes(p5, by, output):
    cloud = clouds.get("aws")
    assert cloud.head_host(p5.spec, p5.outputs, cloud.ssh_user, by) == f"ssh://ubuntu@{p5.outputs[output]}"
    assert cloud.head_host(p5.spec, {}, cloud.ssh_user, by) is None


def test_the_plan_prices_the_head_on_demand(p5):
    (line,) = [line for line in p5.lines if line.name == "compute head"]
    assert line.amount == pytest.approx(catalog.price("aws", "m7i.large", "us-east-1").usd_per_hour)


def test_a_pool_named_head_is_refused_with_the_scheduler():
    values = config()
    values["goldenenv:nodes"] = {**values["goldenenv:nodes"], "name": "head"}
    from goldenenv.spec import ConfigError

    with pytest.raises(ConfigError, match="Slurm head's name"):
        plan_config("aws-p5-2node", values)
    plan_config("aws-p5-2node", {**values, "goldenenv:scheduler": "none"})


# ---------------------------------------------------------------- the munge unit, run on stubs

def munge_script(tmp_path, monkeypatch, create: bool) -> tuple[str, object]:
    """The AWS munge script as a host renders it, writing its key and marker under the test's temp dir."""
    from goldenenv import nodeboot
    from goldenenv.clouds.aws.head import munge_key

    key_file = tmp_path / "etc" / "munge" / "munge.key"
    monkeypatch.setattr(nodeboot, "MUNGE_KEY_FILE", str(key_file))
    monkeypatch.setattr(nodeboot, "READY_DIR", str(tmp_path / "run"))
    unit = nodeboot.munge_unit(munge_key("arn:aws:secretsmanager:us-east-1:123456789012:secret:k", "us-east-1"),
                               create=create)
    return unit.script.content, key_file


AWS_STUB = """
case "$2" in
  describe-secret) [ -e "$STORE" ] && echo 1 || echo 0 ;;
  put-secret-value)
    for a in "$@"; do case "$a" in fileb://*) cp "${a#fileb://}" "$STORE" ;; esac; done ;;
  get-secret-value) [ -e "$STORE" ] || { echo "ResourceNotFoundException" >&2; exit 254; }; base64 -w0 "$STORE" ;;
esac
"""


def run_munge(tmp_path, script: str, stub: str = AWS_STUB):
    import subprocess

    path = tmp_path / "munge.sh"
    path.write_text(script)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "aws").write_text(f'#!/bin/bash\necho "aws $*" >> "$STUB_LOG"\n{stub}\n')
    (bin_dir / "aws").chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "STORE": str(tmp_path / "store")}
    result = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)
    return result, log.read_text().splitlines()


def test_the_head_writes_a_key_once_and_every_host_reads_it_to_a_root_only_file(tmp_path, monkeypatch):
    script, key_file = munge_script(tmp_path, monkeypatch, create=True)
    result, calls = run_munge(tmp_path, script)
    assert result.returncode == 0, result.stderr
    assert [c.split()[2] for c in calls] == ["describe-secret", "put-secret-value", "get-secret-value"]
    assert key_file.stat().st_size == 1024 and oct(key_file.stat().st_mode & 0o777) == "0o400"
    assert key_file.read_bytes() == (tmp_path / "store").read_bytes()
    assert (tmp_path / "run" / "goldenenv-munge.ready").exists()
    key = key_file.read_bytes()
    assert base64.b64encode(key).decode() not in result.stdout + result.stderr, "the key is never logged"

    # the next boot (or a new head) finds the key and keeps it
    result, calls = run_munge(tmp_path, script)
    assert result.returncode == 0 and "put-secret-value" not in " ".join(calls[3:])
    assert key_file.read_bytes() == key


def test_a_node_waits_for_the_heads_key_and_never_writes_one(tmp_path, monkeypatch):
    script, key_file = munge_script(tmp_path, monkeypatch, create=False)
    result, calls = run_munge(tmp_path, script)
    assert result.returncode == 1 and "the head writes it on its first boot" in result.stdout
    assert not key_file.exists() and not (tmp_path / "run" / "goldenenv-munge.ready").exists()
    assert all("put-secret-value" not in c and "describe-secret" not in c for c in calls)
    (tmp_path / "store").write_bytes(bytes(range(256)) * 4)
    result, _ = run_munge(tmp_path, script)
    assert result.returncode == 0 and key_file.read_bytes() == bytes(range(256)) * 4


def test_an_api_error_on_the_head_is_retried_never_read_as_no_key(tmp_path, monkeypatch):
    script, key_file = munge_script(tmp_path, monkeypatch, create=True)
    result, calls = run_munge(tmp_path, script, stub='echo "AccessDenied" >&2; exit 255')
    assert result.returncode == 1 and "trying again" in result.stdout
    assert [c.split()[2] for c in calls] == ["describe-secret"] and not key_file.exists()


# ---------------------------------------------------------------- Alibaba Cloud

ALI = "alicloud-ebmgn8v-2node"
ALI_INSTANCE = "alicloud:ecs/instance:Instance"
ALI_SG = "alicloud:ecs/securityGroup:SecurityGroup"
ALI_RULE = "alicloud:ecs/securityGroupRule:SecurityGroupRule"
ALI_SECRET = "alicloud:kms/secret:Secret"
ALI_POLICY = "alicloud:ram/policy:Policy"
ACR_REF = f"registry-vpc.cn-wulanchabu.aliyuncs.com/goldenenv/alicloud-h100@{DIGEST}"


def ali_config(stack: str = ALI, **changes) -> dict:
    values = copy.deepcopy(stackconfig.read_stack_file(stack_file(stack)))
    values["goldenenv:image"] = {**values["goldenenv:image"], "ref": ACR_REF}
    values.update(changes)
    return values


@pytest.fixture(scope="module")
def ali():
    return plan_config(ALI, ali_config())


def ali_head(p):
    return one(p, ALI_INSTANCE, "-head")


def ali_node(p):
    return one(p, ALI_INSTANCE, "-gpu-0")


@pytest.mark.parametrize("stack", [ALI, "alicloud-gn7i-dev"])
def test_every_alibaba_stack_gets_one_head_and_a_munge_secret_and_none_gets_neither(stack):
    p = plan_config(stack, ali_config(stack))
    assert not p.failed, [f.message for f in p.findings if f.severity.value == "error"]
    assert ali_head(p).parent_urn.endswith(f"goldenenv:alicloud:SlurmHead::{stack}-head")
    assert len(p.of_type(ALI_SECRET)) == 1
    assert p.outputs["headPrivateIp"] == ali_head(p).outputs["privateIp"]
    none = plan_config(stack, ali_config(stack, **{"goldenenv:scheduler": "none"}))
    assert [r for r in none.resources if "head" in r.name or "munge" in r.name] == []
    assert not any(k.startswith("head") for k in none.outputs)
    assert after_image(docker_run(boot_files(ali_node(none).props["userData"]))) == ["sleep", "infinity"]


def test_the_alibaba_head_is_pay_as_you_go_cpu_private_with_tokens_and_an_encrypted_disk(ali):
    node = ali_head(ali).props
    assert node["instanceType"] == clouds.get("alicloud").head_instance_type == "ecs.g7.large"
    assert catalog.head_type("alicloud", node["instanceType"]) is not None
    assert node["instanceChargeType"] == "PostPaid" and "spotStrategy" not in node, "never spot"
    assert node["internetMaxBandwidthOut"] == 0
    assert node["httpTokens"] == "required" and node["systemDiskEncrypted"] is True
    assert node["vswitchId"] == ali_node(ali).props["vswitchId"]
    assert node["imageId"] == ali_node(ali).props["imageId"]
    assert node["tags"]["goldenenv:stack"] == ALI and node["volumeTags"]["goldenenv:stack"] == ALI
    assert ali_head(ali).delete_before_replace and ali_head(ali).ignore_changes == ("userData",)


def test_alibaba_slurm_ports_open_between_the_two_groups_only(ali):
    nodes, group = one(ali, ALI_SG, "-nodes-sg"), one(ali, ALI_SG, "-head-sg")
    assert ali_head(ali).props["securityGroups"] == [group.id]
    rules = {(r.props["securityGroupId"], r.props["portRange"]): r.props for r in ali.of_type(ALI_RULE)}
    assert rules[(group.id, "6817/6817")]["sourceSecurityGroupId"] == nodes.id
    assert rules[(group.id, "60001/63000")]["sourceSecurityGroupId"] == nodes.id
    assert rules[(nodes.id, "6818/6818")]["sourceSecurityGroupId"] == group.id
    assert rules[(nodes.id, "60001/63000")]["sourceSecurityGroupId"] == group.id
    assert not [r for (sg, _), r in rules.items() if sg == group.id and (r.get("cidrIp") or r.get("ipv6CidrIp"))]


def test_an_ebmgn8v_node_runs_slurmd_with_its_8_gpus_and_the_head_slurmctld(ali):
    ip = ali.outputs["headPrivateIp"]
    node = docker_run(boot_files(ali_node(ali).props["userData"]))
    # literal anchor: ecs.ebmgn8v.48xlarge has 8 GPUs; the health expectations come from the catalog
    expect = health.pool_expectations("alicloud", "ecs.ebmgn8v.48xlarge", True)
    words = ",".join(f"{k}={'yes' if v is True else 'no' if v is False else v}" for k, v in sorted(expect.items()))
    assert after_image(node) == [slurm.ENTRY, "node", "--conf-server", ip, "--health", words,
                                 "--gpus", "8", "--feature", "gpu"]
    assert node[node.index("--user") + 1] == "root"
    files = boot_files(ali_head(ali).props["userData"])
    head_run = docker_run(files)
    assert after_image(head_run) == [slurm.ENTRY, "head", "--db-dir", slurm.DB_DIR] and "--gpus" not in head_run
    volumes = [head_run[i + 1] for i, word in enumerate(head_run) if word == "--volume"]
    assert f"/fsx/slurm/state:{slurm.STATE_DIR}" in volumes and "/fsx:/fsx" in volumes
    assert f"/fsx/slurm/db:{slurm.DB_DIR}" in volumes
    assert "/usr/local/libexec/goldenenv/cpfs-mount.sh" in files and SLURM_CONF in files


def test_the_alibaba_munge_secret_holds_a_placeholder_and_the_key_is_a_staged_version(ali):
    from goldenenv.clouds.alicloud.head import MUNGE_STAGE, PLACEHOLDER

    secret = one(ali, ALI_SECRET)
    data = secret.props["secretData"]  # the provider marks it secret: {<secret signature>: ..., "value": ...}
    assert (data["value"] if isinstance(data, dict) else data) == PLACEHOLDER
    assert secret.props["forceDeleteWithoutRecovery"] is True
    for instance in (ali_head(ali), ali_node(ali)):
        files = boot_files(instance.props["userData"])
        script = files["/usr/local/libexec/goldenenv/munge-key-alicloud.sh"]
        assert f"stage={MUNGE_STAGE}" in script and f"secret={secret.props['secretName']}" in script
        assert MUNGE_KEY_FILE not in files
    text = json.dumps(ali.outputs, default=str)
    assert "munge.key" not in text


def test_the_alibaba_head_may_list_write_and_read_the_secret_and_nodes_only_read_it(ali):
    secret = one(ali, ALI_SECRET).props["secretName"]
    arn = f"acs:kms:cn-wulanchabu:*:secret/{secret}"
    head_doc = json.loads(one(ali, ALI_POLICY, "-head-access").props["policyDocument"])
    node_doc = json.loads(one(ali, ALI_POLICY, "-gpu-access").props["policyDocument"])
    kms_head = [s for s in head_doc["Statement"] if any(a.startswith("kms:") for a in s["Action"])]
    kms_node = [s for s in node_doc["Statement"] if any(a.startswith("kms:") for a in s["Action"])]
    assert [(set(s["Action"]), s["Resource"]) for s in kms_head] == [
        ({"kms:GetSecretValue", "kms:ListSecretVersionIds", "kms:PutSecretValue"}, [arn])]
    assert [(s["Action"], s["Resource"]) for s in kms_node] == [(["kms:GetSecretValue"], [arn])]
    assert not [s for s in head_doc["Statement"] if any(a.startswith("oss:") for a in s["Action"])]


def test_alibaba_head_host_and_plan_notes(ali):
    cloud = clouds.get("alicloud")
    assert cloud.head_host(ali.spec, ali.outputs, "root") == f"ssh://root@{ali.outputs['headPrivateIp']}"
    notes = [f.message for f in ali.findings if f.rule == "plan-note"]
    assert any("KMS 3.0" in n for n in notes)
    head = next(line for line in ali.lines if line.name == costs.HEAD_LINE)   # priced, and marked unverified
    assert head.amount == catalog.price("alicloud", "ecs.g7.large", "cn-hangzhou").usd_per_hour and not head.verified


FAKE_ALIBABA = r'''
import base64, hashlib, hmac, io, json, os, urllib.parse, urllib.request

STATE = os.environ["KMS_STATE"]


class Answer(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def signed(params):
    """Check the RPC v1 signature the way Alibaba does: HMAC-SHA1 over POST&%2F&<canonical query>."""
    def enc(v):
        return urllib.parse.quote(str(v), safe="~")
    given = params.pop("Signature")
    canonical = "&".join(enc(k) + "=" + enc(params[k]) for k in sorted(params))
    digest = hmac.new(b"sts-secret&", ("POST&%2F&" + enc(canonical)).encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode() == given


def fake(request, *args, **kwargs):
    url = request.full_url if hasattr(request, "full_url") else request
    if url.startswith("http://100.100.100.200/latest"):
        path = url.removeprefix("http://100.100.100.200/latest")
        answers = {"/api/token": "session-token", "/meta-data/ram/security-credentials/": "head-role",
                   "/meta-data/ram/security-credentials/head-role": json.dumps(
                       {"AccessKeyId": "STS.id", "AccessKeySecret": "sts-secret", "SecurityToken": "tok"})}
        return Answer(answers[path].encode())
    assert request.get_method() == "POST" and "?" not in url, "parameters travel in the body"
    params = dict(urllib.parse.parse_qsl(request.data.decode()))
    assert signed(params), "bad signature"
    state = json.load(open(STATE)) if os.path.exists(STATE) else {"versions": []}
    with open(STATE + ".calls", "a") as log:
        log.write(params["Action"] + "\n")
    if params["Action"] == "ListSecretVersionIds":
        body = {"VersionIds": {"VersionId": [{"VersionId": v["id"], "VersionStages": {"VersionStage": v["stages"]}}
                                             for v in state["versions"]]}}
    elif params["Action"] == "PutSecretValue":
        state["versions"].append({"id": params["VersionId"], "stages": json.loads(params["VersionStages"]),
                                  "data": params["SecretData"], "type": params["SecretDataType"]})
        json.dump(state, open(STATE, "w"))
        body = {}
    else:
        found = [v for v in state["versions"] if params["VersionStage"] in v["stages"]]
        if not found:
            raise urllib.error.HTTPError(url, 404, "Forbidden.ResourceNotFound", {}, None)
        body = {"SecretData": found[-1]["data"], "SecretDataType": found[-1]["type"]}
    return Answer(json.dumps(body).encode())


urllib.request.OpenerDirector.open = lambda self, request, *a, **k: fake(request)
urllib.request.urlopen = fake
'''


def ali_munge(tmp_path, monkeypatch, create: bool):
    import subprocess
    import sys

    from goldenenv import nodeboot
    from goldenenv.clouds.alicloud.head import munge_key

    key_file = tmp_path / "etc" / "munge.key"
    monkeypatch.setattr(nodeboot, "MUNGE_KEY_FILE", str(key_file))
    monkeypatch.setattr(nodeboot, "READY_DIR", str(tmp_path / "run"))
    script = nodeboot.munge_unit(munge_key("goldenenv-p-s-munge", "cn-wulanchabu"), create=create).script.content
    (tmp_path / "fake.py").write_text(FAKE_ALIBABA)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # python3 on the host, with the metadata server and KMS answered in process
    (bin_dir / "python3").write_text(f'#!/bin/bash\n[ "$1" = - ] && shift\nsource=$(cat)\n'
                                     f'exec {sys.executable} -c "$(cat {tmp_path / "fake.py"}; echo; echo "$source")" '
                                     f'"$@"\n')
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "munge.sh").write_text(script)

    def run():
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KMS_STATE": str(tmp_path / "kms.json")}
        return subprocess.run(["bash", str(tmp_path / "munge.sh")], env=env, capture_output=True, text=True,
                              timeout=60)

    return run, key_file


def test_the_alibaba_head_writes_a_staged_binary_key_once_and_nodes_read_it(tmp_path, monkeypatch):
    (tmp_path / "node").mkdir()
    node, node_key = ali_munge(tmp_path / "node", monkeypatch, create=False)
    result = node()
    assert result.returncode == 1 and "the head writes it on its first boot" in result.stdout
    assert not node_key.exists()

    (tmp_path / "head").mkdir()
    head_run, head_key = ali_munge(tmp_path / "head", monkeypatch, create=True)
    result = head_run()
    assert result.returncode == 0, result.stdout + result.stderr
    state = json.loads((tmp_path / "head" / "kms.json").read_text())
    (version,) = state["versions"]
    assert version["stages"] == ["goldenenv-munge"] and version["type"] == "binary", "never ACSCurrent"
    assert head_key.stat().st_size == 1024 and oct(head_key.stat().st_mode & 0o777) == "0o400"
    assert base64.b64decode(version["data"]) == head_key.read_bytes()
    assert version["data"] not in result.stdout + result.stderr, "the key is never logged"
    assert (tmp_path / "head" / "kms.json.calls").read_text().split() == [
        "ListSecretVersionIds", "PutSecretValue", "GetSecretValue"]

    result = head_run()  # the next boot keeps the key
    assert result.returncode == 0 and len(json.loads((tmp_path / "head" / "kms.json").read_text())["versions"]) == 1

    (tmp_path / "node" / "kms.json").write_text((tmp_path / "head" / "kms.json").read_text())
    result = node()
    assert result.returncode == 0 and node_key.read_bytes() == head_key.read_bytes()
