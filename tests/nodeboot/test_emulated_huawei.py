"""A Huawei Cloud stack boots for real: huawei-snt9b-2node's Slurm head (an ECS) and first node (a ModelArts Lite
Server, Snt9B: 8 Ascend NPUs) created on the emulated cloud and booted on emulated hosts the way Huawei boots its
images: cloud-init's own OpenStack datasource reads the instance's meta_data.json (its key pair among them) and
user data over HTTP from the metadata service at 169.254.169.254 (tests/nodeboot/huawei_metadata.py, in a container
on the stack's network that holds that address; each host routes it there, as the VPC does). HTTP metadata rather
than a config drive because that is what Huawei's ECS and bare-metal servers serve and their images read
(docs/research/huawei.md §7: /openstack/latest/..., the chassis asset tag HUAWEICLOUD that cloud-init's OpenStack
detection accepts on x86; on the Lite Server's arm64 it accepts any host) and the emulated hosts can reach a server
holding the address; no NoCloud seed, no config drive.

The stack boots as it ships, Slurm queue included: its lock (ascend-910b, CANN 9.1.0 on Ubuntu 24.04) has Slurm
23.11, new enough for self-registering nodes, and its head is a Kunpeng ECS (kc1.large.2) that can run the arm64
image. The hosts here run the shared stand-in golden image of the other boot tests (conftest.golden_ref: an Ascend
image is arm64 and needs CANN's base, which only Huawei and quay.io serve), so this proves the boot and Slurm's NPU
GRES on the shipped stack's user data, not the Ascend image's own Slurm.

The boot scripts call Huawei's APIs as <service>.<region>.myhuaweicloud.com (tests/nodeboot/huawei_apis.py, in the
cloud-APIs container) with the agency's temporary keys the metadata service hands out (/openstack/latest/
securitykey), each call signed SDK-HMAC-SHA256 and allowed by the agency's planned IAM policy only: the head's munge
step finds the stack's CSMS secret holding the plan's placeholder and writes a version (CreateSecretVersion), the
node's reads it (ShowSecretVersion). Each host logs in to SWR with a temporary login (CreateSecret) and pulls the
golden image by digest from swr.<region>.myhuaweicloud.com (tests/nodeboot/registry_stand_in.py under that name,
serving this run's golden image under a digest the engine has not pulled). The Lite Server's agency is the plan's
(set after creation, unverified for a Lite Server: goldenenv/clouds/huawei/liteservers.py).

The node's hardware is stood in by tests/nodeboot/ascend_host.py: /dev/davinci0..7 and the management devices, the
driver's version.info, npu-smi and hccn_tool (the hccn fabric's boot check: each NPU's RoCE port UP); the SFS Turbo
share both hosts mount over NFS is a folder of this machine (stand_ins.py's `mount -t nfs`). Then every goldenenv
unit is active on both, the golden container has the NPUs' devices, npu-smi and the driver's files, and the node
registers in the head's Slurm IDLE with Gres=npu:8.

What only a real Huawei host proves: the NPUs themselves, HCCL over RoCE, SFS Turbo, the Lite Server's agency, and
the IAM action names (goldenenv/clouds/huawei/privilege.py marks them unverified)."""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest
import yaml

import ascend_host
import emulated_cloud
import emulated_host
import emulated_stack
import head_accounting
import huawei_apis
import huawei_metadata
import registry_stand_in
from goldenenv import accelerators, catalog, clouds, plan, stackconfig
from goldenenv.images.lock import load

pytestmark = pytest.mark.node_boot

STACK = "huawei-snt9b-2node"
UNNAMED_DRIVER = "23.0.6"
"""The NPU driver of the stand-in hardware when the lock names none (ascend-910b: no table pairs CANN 9.1.0 with a
driver): the one the catalog's Lite Server image carries, by its published name
(HCE2.0-Arm-64bit-for-Snt9B-BareMetal-with-23.0.6-..., goldenenv/clouds/huawei/catalog/host_images.csv hce2-snt9b)."""
HERE = Path(__file__).resolve().parent
INSTANCE = "huaweicloud:Ecs/instance:Instance"
LITE_SERVER = "pulumi-python:dynamic/huawei:DevServer"
KEY_PAIR = "huaweicloud:Ecs/keypair:Keypair"
AGENCY = "huaweicloud:Iam/agency:Agency"
POLICY = "huaweicloud:Iam/role:Role"
SECRET = "huaweicloud:Dew/secret:Secret"
ORGANIZATION = "huaweicloud:Swr/organization:Organization"
MUNGE_SCRIPT = "munge-key-huawei.sh"
MUNGE_KEY_BYTES = 1024
"""What the head's munge step writes as the secret's version (templates/node/munge-key-huawei.sh.j2)."""
PROJECT_ID = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
"""The emulated project's id (meta_data.json project_id: what the boot scripts put in CSMS paths)."""


@dataclass
class SwrRegistry:
    """SWR's registry, swr.<region>.myhuaweicloud.com, as registry_stand_in's Identity: the login is a temporary
    login CreateSecret issued (user <region>@<AK>) while it lasts, for this registry only. A pull is then held to
    the agency that asked for the login: its planned policy must grant the login (swr::createLoginSecret) and the
    repository must be in the stack's organization. How SWR authorizes an agency's temporary login (organization
    permissions or IAM's SWR roles) is unverified (goldenenv/clouds/huawei/privilege.py PULL_ACTIONS)."""

    region: str
    organization: str
    folder: Path
    token_flow: bool = True

    @property
    def name(self) -> str:
        return f"swr.{self.region}{huawei_apis.SUFFIX}"

    def authenticate(self, username: str, password: str) -> str | None:
        login = huawei_apis.logins_of(self.folder).get(password)
        if login is None or login["username"] != username or login["expires"] < time.time():
            return None
        return login["agency"] if login["registry"] == self.name else None

    def authorize(self, caller: str, repository: str) -> None:
        granted = huawei_apis.iam_allows(huawei_apis.policies_of(self.folder, caller), "swr::createLoginSecret", "*")
        if not granted or repository.split("/", 1)[0] != self.organization:
            raise registry_stand_in.Denied(403, "DENIED", f"{caller} may not pull {repository}")


@dataclass
class HuaweiStack:
    spec: object
    resources: list
    ref: str
    """What the hosts pull: the stack's SWR repository @ the golden image's digest."""
    head: emulated_stack.Booted
    node: emulated_stack.Booted
    instances: dict
    """"head" | "node" -> the planned instance."""
    addresses: dict
    agencies: dict
    """"head" | "node" -> the instance's agency."""
    metadata: Path
    apis: Path
    registry: registry_stand_in.RegistryStandIn
    secret: str
    npus: int
    """The node's NPUs (0: a GPU node)."""


def policies_of(resources, agency_name: str) -> list[str]:
    """The policy documents of the custom policies the plan gives the agency (its project roles)."""
    agency = next(a for a in resources if a.type == AGENCY and a.props["name"] == agency_name)
    roles = {r for grant in agency.props["projectRoles"] for r in grant["roles"]}
    return [p.props["policy"] for p in resources if p.type == POLICY and p.props["name"] in roles]


def hostname_of(instance) -> str:
    """An ECS instance's hostname; a Lite Server's: its name (CreateDevServer takes no hostname; that the server's
    hostname is its name is unverified)."""
    return instance.props.get("hostname") or instance.props["name"]


def zone_of(instance) -> str:
    return instance.props.get("availabilityZone") or instance.props["zone"]


def keys_of(resources, instance) -> dict[str, str]:
    """meta_data.json's public_keys: the instance's key pair, as the plan made it."""
    pair = instance.props.get("keyPair")
    return {k.props["name"]: k.props["publicKey"] for k in resources if k.type == KEY_PAIR and k.props["name"] == pair}


def planned_ref(golden_ref: str, public_key: str) -> str:
    """The golden image's digest under the stack's own SWR repository (a first plan gives the repository)."""
    config = emulated_stack.stack_config(STACK, golden_ref, public_key)
    spec = stackconfig.load(STACK, *stackconfig.namespaced(config))
    _, outputs = plan.run_program(STACK, config, plan.offline_context(spec))
    return f"{outputs['imageRepository']}@{golden_ref.split('@', 1)[1]}"


def metadata_server(client, image: str, network, state: Path):
    """huawei_metadata.py in a container of the host image on the stack's network, holding 169.254.169.254: the
    container and its address on the network (where the hosts route the metadata address)."""
    server = client.containers.run(
        image, entrypoint=["/bin/sh", "-c", f"ip addr add {huawei_metadata.ADDRESS}/32 dev eth0 && "
                                            "exec python3 /stand-ins/huawei_metadata.py /state"],
        detach=True, name=f"ge-huawei-metadata-{uuid.uuid4().hex[:4]}", network=network.name, cap_add=["NET_ADMIN"],
        labels={"goldenenv.test": "huawei-metadata"},
        volumes={str(HERE): {"bind": "/stand-ins", "mode": "ro"}, str(state): {"bind": "/state", "mode": "rw"}})
    emulated_host.started(server, b"huawei metadata server ready", "Huawei metadata server")
    server.reload()
    return server, server.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]


def npus_of(spec, it) -> tuple[int, str | None]:
    """The node's NPUs and its NPU driver (the lock's, else the Lite Server image's), or (0, None) for a GPU node."""
    lock = load(spec.image.lock)
    if getattr(accelerators.of_lock(lock), "name", None) != "ascend":
        return 0, None
    return it.gpu_count, lock.ascend.driver or UNNAMED_DRIVER


@pytest.fixture(scope="module")
def huawei(client, host_image, golden_ref, stack_key, cloud_apis, tmp_path_factory) -> HuaweiStack:
    """The stack created on the emulated cloud, its head and first node booting from the metadata service."""
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
        resources, _ = emulated_cloud.run_program(STACK, config, spec, answers)
        head = emulated_host.head_resource(resources, spec.cloud)
        instances = {"head": head, "node": next(r for r in resources if r.type in (INSTANCE, LITE_SERVER)
                                                 and r is not head)}
        secret = next(r for r in resources if r.type == SECRET)
        huawei_apis.add_secret(cloud_apis.folder, spec.region, secret.props["name"], secret.props["secretText"])
        organization = next(r for r in resources if r.type == ORGANIZATION).props["name"]
        state = tmp_path_factory.mktemp("huawei-metadata")
        records, agencies = {}, {}
        for role, instance in instances.items():
            agencies[role] = instance.props["agencyName"]
            records[addresses[role]] = huawei_metadata.instance(
                uuid=instance.id, name=instance.props["name"], hostname=hostname_of(instance),
                zone=zone_of(instance), region=spec.region, project_id=PROJECT_ID,
                flavor=instance.props.get("flavorId") or instance.props["flavor"], address=addresses[role],
                public_keys=keys_of(resources, instance),
                user_data=instance.props["userData"].encode(), agency=agencies[role],
                credentials=cloud_apis.issue(agencies[role], policies_of(resources, agencies[role])))
        huawei_metadata.write(state, records)
        cloud_apis.attach(network.name, [f"{service}.{spec.region}{huawei_apis.SUFFIX}"
                                         for service in ("kms", "swr-api")])
        server, server_address = metadata_server(client, host_image, network, state)
        upstream, _, upstream_repo = unseen.split("@", 1)[0].partition("/")
        identity = SwrRegistry(spec.region, organization, cloud_apis.folder)
        with registry_stand_in.serve(identity, upstream, {ref.split("@")[0].split("/", 1)[1]: upstream_repo},
                                     cloud_apis.authority) as registry:
            it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
            npus, driver = npus_of(spec, it)
            capture = emulated_stack.CAPTURES / f"nvidia_smi_{it.name}.csv"
            booted = {}
            sharedfs = tmp_path_factory.mktemp("sfs-turbo")  # the SFS Turbo share both hosts mount over NFS
            for role, instance in instances.items():
                node = role == "node"
                extra = huawei_metadata.host_files(server_address=server_address)
                if node and npus:
                    extra.update(ascend_host.files(npus=npus, driver=driver))
                gpus = it.gpu_count if node and not npus else 0
                hosts.append(emulated_host.Host.create(
                    client, host_image, name=name if node else f"{name}-head", networks=[network.name],
                    user_data="", public_key="", login=clouds.get(spec.cloud).ssh_user, key=stack_key["key"],
                    shares=[str(sharedfs)], sharedfs=str(sharedfs), nvme=None, erdma=0, gpus=gpus,
                    nvidia_smi=capture.read_text() if gpus and capture.exists() else "",
                    health=emulated_stack.healthy_hardware(spec, it) if gpus else None, extra_files=extra,
                    hostname=hostname_of(instance), address=addresses[role],
                    trusted_ca=cloud_apis.authority.cert_pem, seed=False))
                booted[role] = emulated_stack.Booted(role, hosts[-1], instance.props["userData"], spec, {}, {})
            for host in hosts:
                host.wait_for("cloud-init's final stage", lambda: host.sh(
                    "test -e /var/lib/cloud/instance/boot-finished")[0] == 0, timeout=240)
            yield HuaweiStack(spec, resources, ref, booted["head"], booted["node"], instances, addresses, agencies,
                              state, cloud_apis.folder, registry, secret.props["name"], npus)
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


def head_exec(stack: HuaweiStack, command: str) -> tuple[int, str]:
    """A Slurm command in the head's golden container (as root, where slurmctld runs)."""
    return stack.head.host.sh(f"docker exec goldenenv {command}")


def hw(booted: emulated_stack.Booted, method: str, service: str, path: str, body: str = "") -> tuple[int, str]:
    """One API call from the host with its agency's keys, by the boot's own signer (huawei-call.py.j2's hw)."""
    text = next(emulated_host.written(f) for f in yaml.safe_load(booted.user_data)["write_files"]
                if Path(f["path"]).name == MUNGE_SCRIPT)
    function = text[text.index("hw() {"):text.index("\nPY\n}\n") + len("\nPY\n}\n")]
    call = " ".join(shlex.quote(a) for a in (method, service, path, *([body] if body else [])))
    return booted.host.sh(f"bash -c {shlex.quote(function + chr(10) + 'hw ' + call)} 2>&1")


def test_each_host_boots_through_cloud_inits_openstack_datasource_from_the_metadata_service(huawei):
    for role, booted in (("head", huawei.head), ("node", huawei.node)):
        host, instance = booted.host, huawei.instances[role]
        result = json.loads(host.sh("cat /run/cloud-init/result.json")[1])["v1"]
        assert result["datasource"].startswith("DataSourceOpenStack"), result
        steps = ("write_files", "runcmd", "scripts_user", "ssh")
        assert not [e for e in result["errors"] if any(step in e for step in steps)], result["errors"]
        assert host.sh("ls /var/lib/cloud/seed/nocloud /var/lib/cloud/seed/config_drive")[0] != 0, "no seed"
        data = json.loads(host.sh("cat /run/cloud-init/instance-data.json")[1])["v1"]
        assert data["instance_id"] == instance.id
        assert data["availability_zone"] == zone_of(instance)
        assert data["local_hostname"] == hostname_of(instance)
        for entry in yaml.safe_load(booted.user_data)["write_files"]:
            rc, content = host.sh(f"cat {shlex.quote(entry['path'])}")
            assert rc == 0 and content == emulated_host.written(entry), (role, entry["path"])
        enabled = host.sh("systemctl is-enabled " + " ".join(booted.units))[1].split()
        assert enabled == ["enabled"] * len(booted.units), (role, dict(zip(booted.units, enabled)))
        read = {r[2] for r in huawei_metadata.requests_of(huawei.metadata)
                if r[0] == huawei.addresses[role] and r[3] == 200}
        assert "/openstack" in read, read
        for leaf in ("meta_data.json", "user_data"):  # under the newest version cloud-init knows the service has
            assert [path for path in read if re.fullmatch(rf"/openstack/[\w-]+/{re.escape(leaf)}", path)], read


def test_every_unit_is_active_and_the_golden_container_runs_the_swr_digest(huawei, client):
    for booted in (huawei.head, huawei.node):
        booted.up(timeout=240)
        golden = booted.host.golden()
        assert golden.attrs["Config"]["Image"] == huawei.ref, "the container runs the stack's SWR digest"
        assert huawei.ref in client.images.get(huawei.ref).attrs["RepoDigests"]


def test_the_node_registers_with_the_heads_slurmctld_with_its_accelerators(huawei):
    huawei.head.up(timeout=240)
    huawei.node.up(timeout=240)
    node = hostname_of(huawei.instances["node"])

    def record() -> dict[str, str]:
        rc, out = head_exec(huawei, f"scontrol show node -o {node}")
        return dict(re.findall(r"(\w+)=(\S*)", out)) if rc == 0 else {}

    huawei.head.host.wait_for("the node registered and idle", lambda: record().get("State", "").split("+")[0] ==
                              "IDLE", timeout=180)
    rc, out = head_exec(huawei, "sinfo -h -N -o '%N %t'")
    assert rc == 0 and f"{node} idle" in out.splitlines(), out
    it = catalog.instance_type(huawei.spec.cloud, huawei.spec.nodes[0].instance_type)
    expected = f"npu:{huawei.npus}" if huawei.npus else f"gpu:{it.gpu_count}"
    assert record()["Gres"] == expected, record()


def test_the_node_has_its_npus_in_the_golden_container(huawei):
    """The NPU driver's devices, version file and npu-smi reach the golden container as the Ascend accelerator
    declares them (device nodes, host mounts), and slurmd's gres.conf names each NPU's device."""
    if not huawei.npus:
        pytest.skip(f"{STACK}'s node has no NPUs")
    huawei.node.up(timeout=240)
    node = huawei.node.host
    rc, out = node.sh("docker exec goldenenv sh -c 'ls /dev/davinci* /dev/devmm_svm /dev/hisi_hdc'")
    assert rc == 0 and set(out.split()) == set(ascend_host.devices(huawei.npus)), out
    rc, out = node.sh("docker exec goldenenv npu-smi info")
    assert rc == 0 and out.count("910B3") == huawei.npus and " OK " in out, out
    rc, out = node.sh(f"docker exec goldenenv cat {ascend_host.DRIVER_INFO}")
    assert rc == 0 and out.startswith("Version="), out


def test_the_munge_key_is_written_by_the_head_to_csms_and_read_by_the_node(huawei):
    for booted in (huawei.head, huawei.node):
        booted.host.wait_for("the munge key", lambda: booted.host.units_state(
            ["goldenenv-munge.service"]) == {"goldenenv-munge.service": "active"}, timeout=240)
    values = emulated_stack.script_values(huawei.node.user_data, MUNGE_SCRIPT)
    versions = huawei_apis.secret_versions(huawei.apis, huawei.spec.region, huawei.secret)
    assert list(versions) == ["v1", "v2"], "the plan's placeholder, then the head's key"
    assert versions["v1"]["secret_string"] == values["placeholder"]
    stored = base64.b64decode(versions["v2"]["secret_binary"])
    assert len(stored) == MUNGE_KEY_BYTES
    for booted in (huawei.head, huawei.node):
        _, modes = booted.host.sh(f"stat -c '%U %a %s' {values['key_file']}")
        assert modes.split() == ["root", "400", str(MUNGE_KEY_BYTES)], modes
        rc, encoded = booted.host.sh(f"base64 -w0 {values['key_file']}")
        assert rc == 0 and base64.b64decode(encoded) == stored, "the CSMS secret's key on both"
    for address in huawei.addresses.values():  # each host's keys: its agency's, from the metadata service
        assert (address, "GET", "/openstack/latest/securitykey", 200) in huawei_metadata.requests_of(huawei.metadata)
    calls = [c for c in huawei_apis.calls_of(huawei.apis) if c[0] == "kms"]
    head, node = huawei.agencies["head"], huawei.agencies["node"]
    assert ("kms", "CreateSecretVersion", head, "OK") in calls, calls
    assert ("kms", "ShowSecretVersion", node, "OK") in calls, calls
    assert not [c for c in calls if c[2] == node and c[1] != "ShowSecretVersion"], "a node only reads the key"


def test_each_host_logs_in_to_swr_with_a_temporary_login_of_its_agency_and_pulls_by_digest(huawei):
    """The engine is this machine's, shared by both hosts: the first to reach its pull logs in and pulls, the other
    finds the image there. So each host's login is also made here, by its boot's own call (CreateSecret) and
    `docker login` in a fresh client configuration."""
    for booted in (huawei.head, huawei.node):
        booted.up(timeout=240)
    pulled = {c[2] for c in huawei.registry.requests if "/manifests/" in c[1] and c[3] == 200}
    assert pulled and pulled <= set(huawei.agencies.values()), huawei.registry.requests
    registry = huawei.ref.split("/", 1)[0]
    for role, booted in (("head", huawei.head), ("node", huawei.node)):
        rc, out = hw(booted, "POST", "swr-api", "/v2/manage/utils/secret?projectname={region}")
        assert rc == 0, out
        auth = base64.b64decode(json.loads(out)["auths"][registry]["auth"]).decode()
        user, password = auth.split(":", 1)
        assert huawei_apis.logins_of(huawei.apis)[password]["agency"] == huawei.agencies[role]
        rc, out = booted.host.sh(
            f"export DOCKER_CONFIG=$(mktemp -d) && printf %s {shlex.quote(password)} | docker login --username "
            f"{shlex.quote(user)} --password-stdin {registry} 2>&1; rc=$?; rm -rf \"$DOCKER_CONFIG\"; exit $rc")
        assert rc == 0 and "Login Succeeded" in out, out
    rc, out = huawei.node.host.sh(
        f"export DOCKER_CONFIG=$(mktemp -d) && printf %s not-a-login | docker login --username "
        f"{huawei.spec.region}@forged --password-stdin {registry} 2>&1; rc=$?; rm -rf \"$DOCKER_CONFIG\"; exit $rc")
    assert rc != 0 and "unauthorized" in out.lower(), "a login SWR never issued does not log in"


def test_a_pull_is_held_to_the_agency_that_asked_for_the_login(huawei):
    """The stand-in refuses a pull the agency's planned policy does not grant, or of another organization's
    repository: the stack's repository is pulled by each host's agency; another organization's, or an agency with no
    policy, is refused."""
    organization = next(r for r in huawei.resources if r.type == ORGANIZATION).props["name"]
    identity = SwrRegistry(huawei.spec.region, organization, huawei.apis)
    repository = huawei.ref.split("@", 1)[0].split("/", 1)[1]
    for agency in huawei.agencies.values():
        identity.authorize(agency, repository)
        with pytest.raises(registry_stand_in.Denied):
            identity.authorize(agency, "another-organization/golden")
    with pytest.raises(registry_stand_in.Denied):
        identity.authorize("an-agency-the-stack-never-made", repository)


def test_the_metadata_service_and_the_apis_refuse_what_huawei_refuses(huawei):
    node, head = huawei.node, huawei.head
    url = f"http://{huawei_metadata.ADDRESS}"
    key = json.loads(emulated_host.http_get(node.host, url + "/openstack/latest/securitykey", {})["body"])
    issued = json.loads((huawei.apis / "credentials.json").read_text())[key["credential"]["access"]]
    assert issued["role"] == huawei.agencies["node"], "the node's own agency's keys"
    assert emulated_host.http_get(node.host, url + "/openstack/latest/no-such-file", {})["status"] == 404
    assert emulated_host.http_get(node.host, url + "/openstack/latest/meta_data.json",
                                  {"X-Metadata-Token": "never-issued"})["status"] == 401
    # the node's agency reads the key and nothing more; the head's may write it
    rc, out = hw(node, "POST", "kms", f"/v1/{{project}}/secrets/{huawei.secret}/versions",
                 json.dumps({"secret_binary": "eA=="}))
    assert rc != 0 and "403" in out, out
    rc, out = hw(node, "GET", "kms", "/v1/{project}/secrets/another-stacks-key/versions/latest")
    assert rc != 0 and "403" in out, out
    rc, out = hw(head, "GET", "kms", f"/v1/{{project}}/secrets/{huawei.secret}/versions/latest")
    assert rc == 0 and json.loads(out)["version"]["version_metadata"]["id"] == "v2", out
    # a call signed with a key the cloud never issued, and one whose signature does not hold
    for access in ("AKforged", key["credential"]["access"]):
        forged = node.host.sh(
            "curl -sS -X GET -H \"X-Sdk-Date: $(date -u +%Y%m%dT%H%M%SZ)\" -H 'Authorization: SDK-HMAC-SHA256 "
            f"Access={access}, SignedHeaders=host;x-sdk-date, Signature=00' "
            f"https://kms.{huawei.spec.region}{huawei_apis.SUFFIX}/v1/{PROJECT_ID}/secrets/{huawei.secret}/versions/"
            "latest")
        assert json.loads(forged[1])["error_code"] == "APIG.0301", forged
    calls = huawei_apis.calls_of(huawei.apis)
    assert ("kms", "-", "-", "APIG.0301") in calls, calls


def test_the_head_runs_slurmdbd_with_the_password_it_made_from_the_csms_key(huawei):
    """slurmdbd on the head's own MariaDB, the stack's cluster registered, the password made from the munge key the
    head keeps in CSMS (tests/nodeboot/head_accounting.py)."""
    huawei.head.up(timeout=240)
    versions = huawei_apis.secret_versions(huawei.apis, huawei.spec.region, huawei.secret)
    stored = {f"the CSMS secret's version {v}": str(value) for v, value in versions.items()}
    head_accounting.shows_accounting(huawei.head, huawei.spec, {
        "the head's user data": huawei.head.user_data, "the node's user data": huawei.node.user_data, **stored})
