"""A Tencent Cloud stack boots for real: tencent-gn7-dev (one GN7 node, no shared file system: the stack has no CFS
Turbo, whose client this machine cannot run) created on the emulated cloud, and its Slurm head and GPU node booted
on emulated hosts the way CVM boots an instance of Tencent's images: cloud-init's own ConfigDrive datasource reads
the instance's config drive (OpenStack layout: meta_data.json with the key pair, user_data as RunInstances was
given it, gzip and all), as Tencent's images configure it (`datasource_list: [ ConfigDrive, TencentCloud ]`:
tests/nodeboot/tencent_metadata.py says where from); no NoCloud seed.

Both hosts reach Tencent's metadata server as metadata.tencentyun.com (tencent_metadata.py, in a container on the
stack's network) for their region and their CAM role's temporary keys, and Tencent's APIs as
<service>.tencentcloudapi.com (tencent_apis.py, in the cloud-APIs container): the head's munge step finds no version
in the stack's SSM secret and writes one (PutSecretValue), the node's reads it (GetSecretValue), each signed with
TC3-HMAC-SHA256 and allowed by its role's planned CAM policy only. Each host logs in to the stack's TCR registry
with a temporary token (DescribeInstances, CreateInstanceToken) and pulls the golden image by digest from
<registry>.tencentcloudcr.com (tests/nodeboot/registry_stand_in.py under that name, serving the golden image of
this run under a digest the engine has not pulled). Then every goldenenv unit is active on both, and the node's
slurmd registers with the head's slurmctld.

What only a real Tencent host proves: the HCC stack's RDMA (fabrics/hcc: its bonds, its NCCL environment) and the
CFS Turbo mount (cfs-turbo-mount.sh)."""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import shlex
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import docker
import pytest
import yaml

import emulated_cloud
import emulated_host
import emulated_stack
import head_accounting
import registry_stand_in
import tencent_apis
import tencent_metadata
from goldenenv import catalog, clouds, plan, stackconfig
from goldenenv.images import bundle

pytestmark = pytest.mark.node_boot

STACK = "tencent-gn7-dev"
HERE = Path(__file__).resolve().parent
INSTANCE = "tencentcloud:Instance/instance:Instance"
KEY_PAIR = "tencentcloud:Key/pair:Pair"
REGISTRY = "tencentcloud:Tcr/instance:Instance"
POLICY = "tencentcloud:Cam/policy:Policy"
ATTACHMENT = "tencentcloud:Cam/rolePolicyAttachment:RolePolicyAttachment"
MUNGE_SCRIPT = "munge-key-tencent.sh"
LOGIN = "ubuntu-sudoer"
"""The emulated host's login (emulated_host.LOGINS): ubuntu with passwordless sudo, outside the docker group, as
Tencent's node_login declares it."""
MUNGE_KEY_BYTES = 1024
"""What the head's munge step writes as the secret's version (templates/node/munge-key-tencent.sh.j2)."""


@dataclass
class TcrRegistry:
    """TCR's registry, <name>.tencentcloudcr.com, as registry_stand_in's Identity: the login is the temporary token
    CreateInstanceToken issued for this instance (user: the token's Username) while it lasts (one hour), and a token
    is good for its own instance only. A pull is then held to the CAM policy of the identity that asked for the
    token: a TCR user account's "permission ... is controlled by the CAM permission of the associated Tencent Cloud
    account" (https://www.tencentcloud.com/document/product/1051/54627), and pulling is tcr:PullRepository on
    qcs::tcr:$region:$account:repository/<instance id>/<namespace>/<repo>
    (https://www.tencentcloud.com/document/product/1051/37248). Those pages speak of sub-accounts; that a CVM role's
    token is held the same way is unverified (goldenenv/clouds/tencent/privilege.py PULL_ACTIONS)."""

    registry_id: str
    registry_name: str
    folder: Path
    region: str
    token_flow: bool = True

    @property
    def name(self) -> str:
        return f"{self.registry_name}.tencentcloudcr.com"

    def authenticate(self, username: str, password: str) -> str | None:
        token = tencent_apis.tokens_of(self.folder).get(password)
        if token is None or token["username"] != username or token["expires"] < time.time():
            return None
        return token["role"] if token["registry"] == self.registry_id else None

    def authorize(self, caller: str, repository: str) -> None:
        resource = f"qcs::tcr:{self.region}:uin/{tencent_apis.UIN}:repository/{self.registry_id}/{repository}"
        if not tencent_apis.cam_allows(tencent_apis.policies_of(self.folder, caller), "name/tcr:PullRepository",
                                       resource):
            raise registry_stand_in.Denied(403, "DENIED", f"CAM denied name/tcr:PullRepository on {resource}")


@dataclass
class TencentStack:
    spec: object
    resources: list
    outputs: dict
    ref: str
    """What the hosts pull: the stack's TCR repository @ the golden image's digest."""
    head: emulated_stack.Booted
    node: emulated_stack.Booted
    instances: dict
    """"head" | "node" -> the planned CVM instance."""
    addresses: dict
    roles: dict
    """"head" | "node" -> the instance's CAM role."""
    metadata: Path
    """The metadata server's state folder."""
    apis: Path
    """The cloud-APIs container's state folder (tencent.json, tencent.log)."""
    registry: registry_stand_in.RegistryStandIn
    secret: str


def role_of(resources, instance) -> tuple[str, list[str]]:
    """The instance's CAM role and the documents of the policies attached to it (the plan's)."""
    role = instance.props["camRoleName"]
    ids = {a.props["policyId"] for a in resources if a.type == ATTACHMENT and a.props["roleId"] == role}
    return role, [p.props["document"] for p in resources if p.type == POLICY and p.id in ids]


def mac_of(address: str) -> str:
    return "52:54:00:" + ":".join(f"{int(b):02x}" for b in address.split(".")[1:])


def planned_ref(golden_ref: str, public_key: str) -> str:
    """The golden image's digest under the stack's own TCR repository (a first plan gives the repository)."""
    config = emulated_stack.stack_config(STACK, golden_ref, public_key)
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    _, outputs = plan.run_program(STACK, config, plan.offline_context(spec))
    return f"{outputs['imageRepository']}@{golden_ref.split('@', 1)[1]}"


def metadata_server(client, image: str, network, state: Path):
    """tencent_metadata.py in a container of the host image on the stack's network, as metadata.tencentyun.com."""
    server = client.containers.run(
        image, entrypoint=["/usr/bin/python3", "/stand-ins/tencent_metadata.py", "/state"], detach=True,
        name=f"ge-tencent-metadata-{uuid.uuid4().hex[:4]}", labels={"goldenenv.test": "tencent-metadata"},
        network=network.name,
        networking_config={network.name: client.api.create_endpoint_config(aliases=[tencent_metadata.HOST])},
        volumes={str(HERE): {"bind": "/stand-ins", "mode": "ro"}, str(state): {"bind": "/state", "mode": "rw"}})
    return emulated_host.started(server, b"tencent metadata server ready", "Tencent metadata server")


@pytest.fixture(scope="module")
def tencent(client, host_image, golden_ref, stack_key, cloud_apis, tmp_path_factory) -> TencentStack:
    """The stack created on the emulated cloud, its head and first node booting from their config drives."""
    unseen = emulated_stack.unseen_golden(client, golden_ref)
    ref = planned_ref(unseen, stack_key["public"])
    config = emulated_stack.stack_config(STACK, ref, stack_key["public"])
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    name = f"ge-{STACK}-{uuid.uuid4().hex[:4]}"
    network, head_address = emulated_stack.stack_network(client, f"{name}-net0", str(spec.network.cidr))
    addresses = {"head": head_address, "node": str(ipaddress.ip_address(head_address) + 10)}
    hosts: list[emulated_host.Host] = []
    server = None
    try:
        answers = emulated_cloud.CloudAnswers(clouds.get(spec.cloud), cloud_apis, spec.region, head_address)
        resources, outputs = emulated_cloud.run_program(STACK, config, spec, answers)
        instances = {"head": emulated_host.head_resource(resources, spec.cloud),
                     "node": emulated_host.node_resource(resources, spec.cloud)}
        tcr = next(r for r in resources if r.type == REGISTRY)
        tencent_apis.add_registry(cloud_apis.folder, spec.region, tcr.id, tcr.props["name"])
        state = tmp_path_factory.mktemp("tencent-metadata")
        records, roles = {}, {}
        for role, instance in instances.items():
            roles[role], policies = role_of(resources, instance)
            records[addresses[role]] = tencent_metadata.instance(
                instance_id=instance.id, name=instance.props["instanceName"], uuid=str(uuid.uuid4()),
                address=addresses[role], mac=mac_of(addresses[role]), region=spec.region,
                zone=instance.props["availabilityZone"], vpc_id=instance.props["vpcId"],
                subnet_id=instance.props["subnetId"], role=roles[role],
                credentials=cloud_apis.issue(roles[role], policies))
        tencent_metadata.write(state, records)
        cloud_apis.attach(network.name, [f"{service}{tencent_apis.SUFFIX}" for service in tencent_apis.SERVICES])
        server = metadata_server(client, host_image, network, state)
        upstream, _, upstream_repo = unseen.split("@", 1)[0].partition("/")
        identity = TcrRegistry(tcr.id, tcr.props["name"], cloud_apis.folder, spec.region)
        with registry_stand_in.serve(identity, upstream, {ref.split("@")[0].split("/", 1)[1]: upstream_repo},
                                     cloud_apis.authority) as registry:
            it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
            capture = emulated_stack.CAPTURES / f"nvidia_smi_{it.name}.csv"
            booted = {}
            for role, instance in instances.items():
                key = next(k for k in resources if k.type == KEY_PAIR and k.id in instance.props["keyIds"])
                user_data = base64.b64decode(instance.props["userData"])
                drive = tencent_metadata.config_drive(
                    instance_id=instance.id, hostname=instance.props["hostname"],
                    name=instance.props["instanceName"], zone=instance.props["availabilityZone"],
                    key_name=key.props["keyName"], public_key=key.props["publicKey"], user_data=user_data)
                node = role == "node"
                hosts.append(emulated_host.Host.create(
                    client, host_image, name=name if node else f"{name}-head", networks=[network.name],
                    user_data="", public_key="", login=LOGIN, key=stack_key["key"], shares=[], sharedfs=None,
                    nvme=None, erdma=0, gpus=it.gpu_count if node else 0,
                    nvidia_smi=capture.read_text() if node and capture.exists() else "",
                    health=emulated_stack.healthy_hardware(spec, it) if node else None, extra_files=drive,
                    hostname=instance.props["hostname"], address=addresses[role],
                    trusted_ca=cloud_apis.authority.cert_pem, seed=False))
                booted[role] = emulated_stack.Booted(role, hosts[-1], emulated_host.user_data_of(instance), spec,
                                                     {}, {})
            for host in hosts:
                host.wait_for("cloud-init's final stage", lambda: host.sh(
                    "test -e /var/lib/cloud/instance/boot-finished")[0] == 0, timeout=240)
            secret = emulated_stack.script_values(booted["node"].user_data, MUNGE_SCRIPT)["secret"]
            yield TencentStack(spec, resources, outputs, ref, booted["head"], booted["node"], instances, addresses,
                               roles, state, cloud_apis.folder, registry, secret)
    finally:
        for host in hosts:
            host.remove()
        if server is not None:
            server.remove(force=True)
        cloud_apis.detach(network.name)
        emulated_host.remove_network(network)
        try:
            client.images.remove(ref)
        except (docker.errors.ImageNotFound, docker.errors.APIError):
            pass


def head_exec(stack: TencentStack, command: str) -> tuple[int, str]:
    """A Slurm command in the head's golden container (as root, where slurmctld runs)."""
    return stack.head.host.sh(f"docker exec goldenenv {command}")


def tc(booted: emulated_stack.Booted, service: str, version: str, action: str, payload: dict) -> tuple[int, str]:
    """One API call from the host with its role's keys, by the boot's own signer (tencent-call.py.j2's tc)."""
    text = next(emulated_host.written(f) for f in yaml.safe_load(booted.user_data)["write_files"]
                if Path(f["path"]).name == MUNGE_SCRIPT)
    function = text[text.index("tc() {"):text.index("\nPY\n}\n") + len("\nPY\n}\n")]
    command = f"{function}\ntc {service} {version} {action} {shlex.quote(json.dumps(payload))}"
    return booted.host.sh(f"bash -c {shlex.quote(command)} 2>&1")


def test_each_host_boots_from_its_config_drive_through_cloud_inits_configdrive_datasource(tencent):
    for role, booted in (("head", tencent.head), ("node", tencent.node)):
        host, instance = booted.host, tencent.instances[role]
        result = json.loads(host.sh("cat /run/cloud-init/result.json")[1])["v1"]
        assert result["datasource"].startswith("DataSourceConfigDrive"), result
        steps = ("write_files", "runcmd", "scripts_user", "ssh")
        assert not [e for e in result["errors"] if any(step in e for step in steps)], result["errors"]
        assert host.sh("ls /var/lib/cloud/seed/nocloud")[0] != 0, "no NoCloud seed: the config drive's"
        data = json.loads(host.sh("cat /run/cloud-init/instance-data.json")[1])["v1"]
        assert data["instance_id"] == instance.id
        assert data["availability_zone"] == instance.props["availabilityZone"]
        assert data["local_hostname"] == instance.props["hostname"]
        written = yaml.safe_load(booted.user_data)["write_files"]
        for entry in written:
            rc, content = host.sh(f"cat {shlex.quote(entry['path'])}")
            assert rc == 0 and content == emulated_host.written(entry), (role, entry["path"])
        enabled = host.sh("systemctl is-enabled " + " ".join(booted.units))[1].split()
        assert enabled == ["enabled"] * len(booted.units), (role, dict(zip(booted.units, enabled)))
        assert "goldenenv-container.service" in booted.units


def test_every_unit_is_active_and_the_golden_container_runs_the_tcr_digest(tencent, client):
    for booted in (tencent.head, tencent.node):
        booted.up(timeout=240)
        golden = booted.host.golden()
        assert golden.attrs["Config"]["Image"] == tencent.ref, "the container runs the stack's TCR digest"
        assert tencent.ref in client.images.get(tencent.ref).attrs["RepoDigests"]


def test_the_node_registers_with_the_heads_slurmctld(tencent):
    tencent.head.up(timeout=240)
    tencent.node.up(timeout=240)
    node = tencent.instances["node"].props["hostname"]

    def record() -> dict[str, str]:
        rc, out = head_exec(tencent, f"scontrol show node -o {node}")
        return dict(re.findall(r"(\w+)=(\S*)", out)) if rc == 0 else {}

    tencent.head.host.wait_for("the node registered and idle", lambda: record().get("State", "").split("+")[0] ==
                               "IDLE", timeout=180)
    rc, out = head_exec(tencent, "sinfo -h -N -o '%N %t'")
    assert rc == 0 and f"{node} idle" in out.splitlines(), out
    assert record()["Gres"].startswith("gpu:"), record()


def test_the_munge_key_is_written_by_the_head_to_ssm_and_read_by_the_node(tencent):
    for booted in (tencent.head, tencent.node):
        booted.host.wait_for("the munge key", lambda: booted.host.units_state(
            ["goldenenv-munge.service"]) == {"goldenenv-munge.service": "active"}, timeout=240)
    values = emulated_stack.script_values(tencent.node.user_data, MUNGE_SCRIPT)
    versions = tencent_apis.secret_versions(tencent.apis, tencent.spec.region, tencent.secret)
    assert list(versions) == [values["version"]], "one version, the one the plan names"
    stored = base64.b64decode(versions[values["version"]]["SecretBinary"])
    assert len(stored) == MUNGE_KEY_BYTES
    for booted in (tencent.head, tencent.node):
        _, modes = booted.host.sh(f"stat -c '%U %a %s' {values['key_file']}")
        assert modes.split() == ["root", "400", str(MUNGE_KEY_BYTES)], modes
        rc, encoded = booted.host.sh(f"base64 -w0 {values['key_file']}")
        assert rc == 0 and base64.b64decode(encoded) == stored, "the same key on both hosts: the SSM secret's"
    calls = [c for c in tencent_apis.calls_of(tencent.apis) if c[0] == "ssm"]
    head, node = tencent.roles["head"], tencent.roles["node"]
    assert ("ssm", "PutSecretValue", head, "OK") in calls, calls
    assert ("ssm", "GetSecretValue", node, "OK") in calls, calls
    assert not [c for c in calls if c[2] == node and c[1] != "GetSecretValue"], "a node only reads the key"


def test_each_host_logs_in_to_tcr_with_a_temporary_token_of_its_own_role_and_pulls_by_digest(tencent):
    """The engine is this machine's, shared by both hosts: the first to reach its pull logs in and pulls, the other
    finds the image there (a real node pulls for itself). So each host's login is also made here, by its boot's own
    calls (DescribeInstances, CreateInstanceToken) and `docker login` in a fresh client configuration."""
    for booted in (tencent.head, tencent.node):
        booted.up(timeout=240)
    journals = {role: booted.host.sh("journalctl -b -u goldenenv-container --no-pager")[1]
                for role, booted in (("head", tencent.head), ("node", tencent.node))}
    pulled = {c[2] for c in tencent.registry.requests if "/manifests/" in c[1] and c[3] == 200}
    assert pulled and pulled <= set(tencent.roles.values()), tencent.registry.requests
    for role in pulled:
        assert "Login Succeeded" in journals[next(r for r, name in tencent.roles.items() if name == role)]
    registry = next(r for r in tencent.resources if r.type == REGISTRY)
    name = tencent.ref.split("/", 1)[0]
    for role, booted in (("head", tencent.head), ("node", tencent.node)):
        rc, out = tc(booted, "tcr", "2019-09-24", "DescribeInstances",
                     {"Filters": [{"Name": "RegistryName", "Values": [name.split(".", 1)[0]]}]})
        assert rc == 0 and [r["RegistryId"] for r in json.loads(out)["Registries"]] == [registry.id], out
        rc, out = tc(booted, "tcr", "2019-09-24", "CreateInstanceToken", {"RegistryId": registry.id,
                                                                          "TokenType": "temp"})
        assert rc == 0, out
        token = json.loads(out)
        assert tencent_apis.tokens_of(tencent.apis)[token["Token"]]["role"] == tencent.roles[role]
        rc, out = booted.host.sh(
            f"export DOCKER_CONFIG=$(mktemp -d) && printf %s {shlex.quote(token['Token'])} | docker login "
            f"--username {shlex.quote(token['Username'])} --password-stdin {name} 2>&1; rc=$?; "
            "rm -rf \"$DOCKER_CONFIG\"; exit $rc")
        assert rc == 0 and "Login Succeeded" in out, out
    rc, out = tencent.node.host.sh(
        f"export DOCKER_CONFIG=$(mktemp -d) && printf %s not-a-token | docker login --username "
        f"{tencent_apis.UIN} --password-stdin {name} 2>&1; rc=$?; rm -rf \"$DOCKER_CONFIG\"; exit $rc")
    assert rc != 0 and "unauthorized" in out.lower(), "a token TCR never issued does not log in"


def test_a_pull_is_held_to_the_cam_policy_of_the_role_that_asked_for_the_token(tencent):
    """The stand-in refuses a pull the role's planned policy does not allow (tcr:PullRepository on the repository):
    the stack's repository is allowed to each host's role; another repository, or a role with no policy, is not."""
    registry = next(r for r in tencent.resources if r.type == REGISTRY)
    identity = TcrRegistry(registry.id, registry.props["name"], tencent.apis, tencent.spec.region)
    repository = tencent.ref.split("@", 1)[0].split("/", 1)[1]
    for role in tencent.roles.values():
        identity.authorize(role, repository)
        with pytest.raises(registry_stand_in.Denied):
            identity.authorize(role, "another-project/another-golden")
    with pytest.raises(registry_stand_in.Denied):
        identity.authorize("a-role-the-stack-never-made", repository)


def test_the_metadata_server_and_the_apis_refuse_what_tencent_refuses(tencent):
    node, head = tencent.node, tencent.head
    url = f"http://{tencent_metadata.HOST}/latest/meta-data/"
    assert emulated_host.http_get(node.host, url + "placement/zone", {})["body"] == \
        tencent.instances["node"].props["availabilityZone"]
    assert emulated_host.http_get(node.host, url + "cam/security-credentials/", {})["body"] == tencent.roles["node"]
    assert emulated_host.http_get(node.host, url + "no-such-entry", {})["status"] == 404
    assert emulated_host.http_get(node.host, url + "spot/termination-time", {})["status"] == 404, "not reclaimed"
    other = emulated_host.http_get(node.host, url + f"cam/security-credentials/{tencent.roles['head']}", {})
    assert other["status"] == 404, "only the instance's own role's keys"
    # the node's role reads the key and nothing more; the head's may write it
    rc, out = tc(node, "ssm", "2019-09-23", "PutSecretValue", {"SecretName": tencent.secret, "VersionId": "x",
                                                                "SecretBinary": "eA=="})
    assert rc != 0 and "UnauthorizedOperation" in out, out
    rc, out = tc(node, "ssm", "2019-09-23", "GetSecretValue", {"SecretName": "another-stacks-key",
                                                                "VersionId": "munge"})
    assert rc != 0 and "UnauthorizedOperation" in out, out
    rc, out = tc(head, "ssm", "2019-09-23", "ListSecretVersionIds", {"SecretName": tencent.secret})
    assert rc == 0 and json.loads(out)["Versions"][0]["VersionId"] == "munge", out
    # a call signed with a key the cloud never issued
    forged = node.host.sh(
        "curl -sS -X POST -H 'Content-Type: application/json; charset=utf-8' -H 'X-TC-Action: GetSecretValue' "
        "-H 'X-TC-Version: 2019-09-23' -H \"X-TC-Timestamp: $(date +%s)\" -H 'Authorization: TC3-HMAC-SHA256 "
        "Credential=AKIDforged/2026-01-01/ssm/tc3_request, SignedHeaders=content-type;host, Signature=00' "
        f"--data '{{}}' https://ssm{tencent_apis.SUFFIX}/")
    assert json.loads(forged[1])["Response"]["Error"]["Code"] == "AuthFailure.SecretIdNotFound", forged
    assert [r for r in tencent_metadata.requests_of(tencent.metadata) if r[0] == tencent.addresses["node"]]


def test_a_reclaim_notice_for_this_instance_reaches_the_spot_watcher_and_another_instances_does_not(tencent):
    """spot/termination-time as the metadata server gives it (UTC+8), read by the golden image's watcher with
    Tencent's notice module bundled in (goldenenv/clouds/tencent/spot_notice.py)."""
    host, state = tencent.node.host, tencent.metadata
    script = bundle.spot_watcher().decode()
    host.container.put_archive("/usr/local/bin", emulated_host.tar_of({"spotwatch": (script, 0o755)}))
    watcher = ("python3 /usr/local/bin/spotwatch --cloud tencent --interval 0.5 --fallback-after 0.5 -- sleep 60 "
               "> /tmp/spotwatch.log 2>&1; echo $? > /tmp/spotwatch.rc")
    assert host.sh(f"nohup sh -c {shlex.quote(watcher)} >/dev/null 2>&1 &")[0] == 0
    moment = (datetime.now(timezone(timedelta(hours=8))) + timedelta(minutes=2)).replace(microsecond=0)
    soon = moment.strftime("%Y-%m-%d %H:%M:%S")  # Beijing time, as Tencent gives it
    tencent_metadata.set_termination(state, tencent.addresses["head"], soon)
    try:
        time.sleep(2.5)
        assert host.sh("test -e /tmp/spotwatch.rc")[0] != 0, host.sh("cat /tmp/spotwatch.log")[1]
        tencent_metadata.set_termination(state, tencent.addresses["node"], soon)
        host.wait_for("the watcher to act on the reclaim notice",
                      lambda: host.sh("test -e /tmp/spotwatch.rc")[0] == 0, timeout=30)
    finally:
        for address in tencent.addresses.values():
            tencent_metadata.set_termination(state, address, None)
    log = host.sh("cat /tmp/spotwatch.log")[1]
    assert host.sh("cat /tmp/spotwatch.rc")[1].strip() == str(128 + 15), log
    utc = moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"tencent spot notice: terminate at {utc}" in log and f"[{soon}]" in log, log
    assert "sent SIGTERM" in log, log
    polls = [r for r in tencent_metadata.requests_of(state)
             if r[0] == tencent.addresses["node"] and r[2] == "/latest/meta-data/spot/termination-time"]
    assert {r[3] for r in polls} == {404, 200}, "404 until the notice, then the time"


def test_the_head_runs_slurmdbd_with_the_password_it_made_from_the_ssm_key(tencent):
    """slurmdbd on the head's own MariaDB, the stack's cluster registered, the password made from the munge key the
    head keeps in SSM (tests/nodeboot/head_accounting.py)."""
    tencent.head.up(timeout=240)
    versions = tencent_apis.secret_versions(tencent.apis, tencent.spec.region, tencent.secret)
    stored = {f"the SSM secret's version {v}": str(value) for v, value in versions.items()}
    head_accounting.shows_accounting(tencent.head, tencent.spec, {
        "the head's user data": tencent.head.user_data, "the node's user data": tencent.node.user_data, **stored})
