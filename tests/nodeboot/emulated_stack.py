"""A shipped cloud stack on emulated hosts, end to end: a registry on this machine holding the golden image by
digest, the team's key pair, the stack created on the emulated cloud (tests/nodeboot/emulated_cloud.py), and its
Slurm head and first node booted from the user data the program renders for them, with the stand-ins they need.

Used by the node-boot tests (conftest.py) and by scripts/bench_node_boot.py.
"""

from __future__ import annotations

import io
import ipaddress
import json
import random
import shlex
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import docker
import yaml

import emulated_cloud
import emulated_host
import stand_ins
from goldenenv import catalog, clouds, lifecycle, nodeboot, plan, slurm, stackconfig
from goldenenv.catalog import health
from goldenenv.images import publish
from goldenenv.images.base import ensure_base
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load

CLOUD_STACKS = ["aws-g5-dev", "aws-p5-2node", "aws-p4d-4node-spot", "alicloud-gn7i-dev",
                "alicloud-ebmgn8v-2node"]
"""The shipped cloud stacks whose boot the tests and scripts/bench_node_boot.py run."""
GOLDEN_LOCK = "cpu-dev"
"""The golden image the emulated nodes run: the stacks' own locks are GPU images this machine cannot build in a
test run; the boot, the pull by digest and the checks are the same for any lock."""
REGISTRY_DOCKERFILE = """\
FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker-registry \\
 && rm -rf /var/lib/apt/lists/* \\
 && printf 'version: 0.1\\nstorage:\\n  filesystem:\\n    rootdirectory: /var/lib/docker-registry\\nhttp:\\n  addr: :5000\\n' \\
      > /etc/docker/registry/anonymous.yml
CMD ["/usr/bin/docker-registry", "serve", "/etc/docker/registry/anonymous.yml"]
"""
CAPTURES = Path(__file__).resolve().parents[1] / "unit" / "captures"
KEY_PAIRS = {"aws": "aws:ec2/keyPair:KeyPair", "alicloud": "alicloud:ecs/ecsKeyPair:EcsKeyPair"}


def golden_base(client: docker.DockerClient) -> str:
    return ensure_base(client, load(GOLDEN_LOCK).base, log=lambda m: None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_registry(client: docker.DockerClient, base: str):
    """Debian's docker-registry, anonymous, on this machine's loopback: (container, host:port)."""
    image, _ = client.images.build(fileobj=io.BytesIO(REGISTRY_DOCKERFILE.format(base=base).encode()),
                                   tag="goldenenv-test/registry:anonymous", rm=True, forcerm=True)
    port = _free_port()
    registry = client.containers.run(image.id, detach=True, ports={"5000/tcp": ("127.0.0.1", port)},
                                     labels={"goldenenv.test": "registry"})
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
            break
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    return registry, f"127.0.0.1:{port}"


def publish_golden(client: docker.DockerClient, registry: str, images_dir: Path) -> str:
    """Build (if needed) and push the golden image; the repository@sha256 ref nodes pull. The pushed name is
    dropped here, so a node's boot pulls the image by digest from the registry, as a node has only what it pulls."""
    lifecycle.ensure_image(lifecycle.load_spec("local"), BuildOptions.from_environment(), client, lambda m: None)
    (images_dir / GOLDEN_LOCK).mkdir(parents=True, exist_ok=True)
    entry = publish.push(load(GOLDEN_LOCK), f"{registry}/goldenenv", client, log=lambda m: None,
                         images_dir=images_dir)
    for tag in client.images.get(entry.ref).tags:
        if tag.startswith(entry.repository + ":"):
            client.images.remove(tag)
    return entry.ref


def unseen_golden(client: docker.DockerClient, golden_ref: str) -> str:
    """The golden image under a digest this machine's engine has never pulled (its layers, a label of this run's
    added), pushed beside it: repository@sha256. The engine keeps every manifest it pulled and serves a pull by
    that digest from there without asking the registry, so a second run with the golden digest itself would never
    reach the registry's IAM; a node has nothing before its first pull."""
    repository = golden_ref.split("@", 1)[0]
    tag = f"run-{uuid.uuid4().hex[:12]}"
    dockerfile = f"FROM {golden_ref}\nLABEL goldenenv.test.registry-run={tag}\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=f"{repository}:{tag}", rm=True, pull=False)
    try:
        pushed = [json.loads(line) for chunk in client.images.push(repository, tag, stream=True)
                  for line in chunk.decode().splitlines() if line.strip()]
    finally:
        client.images.remove(f"{repository}:{tag}")
    errors = [p["error"] for p in pushed if "error" in p]
    digests = [p["aux"]["Digest"] for p in pushed if "Digest" in p.get("aux", {})]
    if errors or not digests:
        raise RuntimeError(f"pushing {repository}:{tag} to the test's registry failed: {errors or pushed}")
    return f"{repository}@{digests[-1]}"


def make_key(folder: Path) -> dict:
    """The team's key pair (made here) and an ssh config that trusts the emulated nodes' fresh host keys."""
    key = folder / "id_rsa"
    # RSA: the one type both clouds import (AWS: ed25519 or RSA; Alibaba: RSA or ECDSA)
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "3072", "-N", "", "-C", "goldenenv-test", "-f", str(key)],
                   check=True)
    config = folder / "ssh_config"
    config.write_text(f"Host *\n  IdentityFile {key}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                      "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  ConnectTimeout 10\n")
    return {"key": key, "public": (folder / "id_rsa.pub").read_text().strip(), "config": config}


def stack_config(stack: str, golden_ref: str, public_key: str) -> dict:
    """The shipped stack file, with the golden image the emulated nodes pull and the team's key."""
    config = stackconfig.read_stack_file(plan.stack_file(stack))
    config["goldenenv:image"] = {**(config.get("goldenenv:image") or {}), "ref": golden_ref}
    config["goldenenv:nodes"] = {**config["goldenenv:nodes"], "sshPublicKey": public_key}
    return config


def script_values(user_data: str, script: str) -> dict[str, str]:
    """The `name=value` assignments at the top of a boot script the user data writes ({} if it writes none)."""
    for f in yaml.safe_load(user_data)["write_files"]:
        if Path(f["path"]).name == script:
            pairs = (line.split("=", 1) for line in emulated_host.written(f).splitlines()
                     if "=" in line and line.split("=", 1)[0].isidentifier())
            return {k: (shlex.split(v) or [""])[0] for k, v in pairs}
    return {}


@dataclass
class Booted:
    """One host of a shipped stack (its head or its first node), booted on an emulated host from the user data the
    program renders for it."""

    role: str
    """head | node"""
    host: emulated_host.Host
    user_data: str
    spec: object
    shares: dict[str, str]
    """sharedfs: the machine folder behind the shared file system; nvme: behind the instance store."""
    credentials: dict
    """What the host's metadata service hands out for its role (the emulated cloud issued them)."""

    @property
    def units(self) -> list[str]:
        doc = yaml.safe_load(self.user_data)
        return [Path(f["path"]).name for f in doc["write_files"] if f["path"].startswith("/etc/systemd/system/")]

    def up(self, timeout: float = 150) -> None:
        """Wait until every goldenenv unit is active (a unit a timer runs again, between its runs: its timer active
        and its step done) and the golden container runs."""
        self.host.wait_for("every goldenenv unit active and the golden container running", lambda: (
            self.units_up() and self.host.golden() is not None), timeout)

    def units_up(self) -> bool:
        states = self.host.units_state(self.units)
        timed = {unit.removesuffix(".timer") + ".service" for unit in self.units if unit.endswith(".timer")}

        def up(unit: str) -> bool:
            if states.get(unit) == "active":
                return True
            return unit in timed and states.get(unit) == "inactive" and \
                self.host.sh(f"test -e {shlex.quote(nodeboot.ready_marker(unit))}")[0] == 0

        return all(up(unit) for unit in self.units)


@dataclass
class Stack:
    """A shipped stack on the emulated cloud: what its program declared (with the cloud's answers), its head and its
    first node, side by side on the stack's network."""

    name: str
    config: dict
    """The stack file as the program was given it (the golden image the hosts pull, the team's key)."""
    spec: object
    resources: list
    outputs: dict
    node: Booted
    head: Booted | None
    apis: emulated_cloud.CloudApis
    networks: list = field(default_factory=list)

    def up(self, timeout: float = 150) -> None:
        """The head and the node up (the node's golden container starts once the head has written the key)."""
        for booted in (self.head, self.node):
            if booted:
                booted.up(timeout)

    def remove(self) -> None:
        for booted in (self.node, self.head):
            if booted:
                booted.host.remove()
        for network in self.networks:
            self.apis.detach(network.name)
            emulated_host.remove_network(network)


class Stacks(dict):
    """Stack name -> Stack for the node-boot tests: the stacks given booted at once (their hosts boot side by side),
    any other booted when first asked for; `boot` boots a stack once per session."""

    def __init__(self, boot, wanted: list[str]):
        super().__init__((stack, boot(stack)) for stack in wanted)
        self._boot = boot

    def __missing__(self, stack: str) -> Stack:
        self[stack] = self._boot(stack)
        return self[stack]


def wanted_stacks(items) -> list[str]:
    """The stacks the selected tests that use the `stacks` fixture are parametrized over (their `stack`), in
    CLOUD_STACKS order: `-k aws-g5-dev` selects aws-g5-dev's tests only, so only its hosts boot."""
    named = set()
    for item in items:
        callspec = getattr(item, "callspec", None)
        if "stacks" in getattr(item, "fixturenames", ()) and callspec and "stack" in callspec.params:
            named.add(callspec.params["stack"])
    return sorted(named, key=lambda stack: (CLOUD_STACKS.index(stack) if stack in CLOUD_STACKS else len(CLOUD_STACKS),
                                            stack))


def not_booted(stack: str) -> Stack:
    """What a dry run of the node-boot tests (conftest.DRY_RUN) hands a test for a stack: nothing was created."""
    return Stack(stack, {}, None, [], {}, None, None, None)


def stack_network(client: docker.DockerClient, name: str, cidr: str):
    """The stack's private network: a free /24 of the stack's VPC range (another run may hold one), the head at its
    .10 (the address the emulated cloud gives the head), the engine's picks from its upper half: (network, head)."""
    block = ipaddress.ip_network(cidr)
    candidates = list(block.subnets(new_prefix=24)) if block.prefixlen < 24 else [block]
    random.shuffle(candidates)
    for subnet in candidates[:32]:
        pool = docker.types.IPAMPool(subnet=str(subnet), gateway=str(subnet[1]),
                                     iprange=str(list(subnet.subnets(new_prefix=25))[1]))
        try:
            network = client.networks.create(name, driver="bridge", ipam=docker.types.IPAMConfig(pool_configs=[pool]),
                                             labels={"goldenenv.test": "node"})
        except docker.errors.APIError as e:
            if "overlap" in str(e).lower():
                continue
            raise
        return network, str(subnet[10])
    raise RuntimeError(f"no free /24 in {cidr} for {name}: other runs' networks hold them (docker network ls)")


def gce_metadata_server(client: docker.DockerClient, image: str, network, state: Path):
    """gce_metadata.py in a container of the host image, on a Google Cloud host's network under the metadata
    server's names (metadata.google.internal, metadata), answering from `state`."""
    here = Path(__file__).resolve().parent
    server = client.containers.run(
        image, entrypoint=["/usr/bin/python3", "/stand-ins/gce_metadata.py", "/state"], detach=True,
        name=f"ge-gce-metadata-{uuid.uuid4().hex[:4]}", labels={"goldenenv.test": "gce-metadata"},
        volumes={str(here): {"bind": "/stand-ins", "mode": "ro"}, str(state): {"bind": "/state", "mode": "rw"}})
    network.connect(server, aliases=["metadata.google.internal", "metadata"])
    return emulated_host.started(server, b"metadata server ready", "metadata server")


def endpoints_of(user_datas: list[str]) -> list[str]:
    """The cloud API endpoints the boot scripts call: the AWS CLI's for Secrets Manager in the script's region,
    Alibaba's KMS and NAS endpoints as the scripts name them."""
    names = []
    for user_data in user_datas:
        if region := script_values(user_data, "munge-key-aws.sh").get("region"):
            names.append(f"secretsmanager.{region}.amazonaws.com")
        if endpoint := script_values(user_data, "munge-key-alicloud.sh").get("endpoint"):
            names.append(endpoint)
        if endpoint := script_values(user_data, "cpfs-mount.sh").get("nas_endpoint"):
            names.append(endpoint)
    return names


def healthy_hardware(spec, it: catalog.InstanceType) -> dict[str, str]:
    """What the node's GPUs and fabric answer its health check (stand_ins.healthy_evidence): the catalog's GPU,
    NVLink and fabric device counts for its pool, all healthy."""
    pool = spec.nodes[0]
    expect = health.pool_expectations(spec.cloud, it.name, pool.rdma)
    return stand_ins.healthy_evidence(expect, f"NVIDIA {it.gpu.name}", "570.86.15")


def role_of(resources, cloud: str, resource) -> tuple[str, list[str]]:
    """The instance role of a head instance or a node's launch template / instance, and its policy documents."""
    def find(kind: str, **props):
        return [r for r in resources if r.type == kind and all(r.props.get(k) == v for k, v in props.items())]

    if cloud == "aws":
        given = resource.props.get("iamInstanceProfile")
        given = given.get("arn", "") if isinstance(given, dict) else given
        profile = next(r for r in resources if r.type == "aws:iam/instanceProfile:InstanceProfile"
                       and (r.name == given or given.endswith(":" + r.name)))
        role = next(r for r in resources if r.type == "aws:iam/role:Role" and r.name == profile.props["role"])
        return role.name, [r.props["policy"] for r in find("aws:iam/rolePolicy:RolePolicy", role=role.id)]
    role = find("alicloud:ecs/ramRoleAttachment:RamRoleAttachment", instanceId=resource.id)[0].props["ramRoleName"]
    names = [a.props["policyName"] for a in find("alicloud:ram/rolePolicyAttachment:RolePolicyAttachment",
                                                 roleName=role)]
    return role, [p.props["policyDocument"] for p in resources
                  if p.type == "alicloud:ram/policy:Policy" and p.props.get("policyName") in names]


def boot(client: docker.DockerClient, image: str, stack: str, golden_ref: str, key: dict, folder: Path,
         apis: emulated_cloud.CloudApis) -> Stack:
    """Create the stack on the emulated cloud (its program, with the cloud's answers) and its head and first node
    from the user data the program renders for them; they boot in the background."""
    config = stack_config(stack, golden_ref, key["public"])
    spec = stackconfig.load(stack, *stackconfig.namespaced(config))
    name = f"ge-{stack}-{uuid.uuid4().hex[:4]}"
    network, head_address = stack_network(client, f"{name}-net0", str(spec.network.cidr))
    networks = [network]
    try:
        answers = emulated_cloud.CloudAnswers(clouds.get(spec.cloud), apis, spec.region, head_address)
        resources, outputs = emulated_cloud.run_program(stack, config, spec, answers)
        # the cloud hands a host its key pair through the metadata service; cloud-init installs it for the login
        public_key = next(r for r in resources if r.type == KEY_PAIRS[spec.cloud]).props["publicKey"]
        node_resource = emulated_host.node_resource(resources, spec.cloud)
        head_resource = emulated_host.head_resource(resources, spec.cloud)
        node_data = emulated_host.user_data_of(node_resource)
        head_data = emulated_host.user_data_of(head_resource) if head_resource else None
        apis.attach(network.name, endpoints_of([d for d in (node_data, head_data) if d]))
        cpfs = script_values(node_data, "cpfs-mount.sh")
        if cpfs:  # the file system the program declared, as the account has it once created
            apis.add_file_system(cpfs["file_system_id"], spec.region, [{
                "ExportId": cpfs["export_id"], "Path": "/",
                "ProtocolMountTargetDomain": f"{cpfs['file_system_id']}.{spec.region}.cpfs.aliyuncs.com"}])
        it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
        shares = {}
        if spec.storage.parallel_fs.enabled:
            shares["sharedfs"] = str(folder / "sharedfs")
        if it.local_nvme_count:
            shares["nvme"] = str(folder / "nvme")
        for path in shares.values():
            Path(path).mkdir(parents=True, exist_ok=True)
        erdma = it.rdma_interfaces if it.rdma == "erdma" else 0
        networks += [client.networks.create(f"{name}-net{i}", driver="bridge", labels={"goldenenv.test": "node"})
                     for i in range(1, erdma)]  # one network per ERI: eth0, eth1 ...
        login = clouds.get(spec.cloud).ssh_user

        def start(role: str, resource, user_data: str, host_name: str, host_shares: dict, **host) -> Booted:
            role_name, policies = role_of(resources, spec.cloud, resource)
            credentials = apis.issue(role_name, policies)
            files = stand_ins.cloud_files(cloud=spec.cloud, role=role_name, credentials=credentials,
                                          ca_pem=apis.authority.cert_pem)
            created = emulated_host.Host.create(
                client, image, name=host_name, user_data=user_data, public_key=public_key, login=login,
                key=key["key"], shares=list(host_shares.values()), sharedfs=host_shares.get("sharedfs"),
                nvme=host_shares.get("nvme"), extra_files=files, trusted_ca=apis.authority.cert_pem, **host)
            return Booted(role, created, user_data, spec, host_shares, credentials)

        capture = CAPTURES / f"nvidia_smi_{it.name}.csv"
        head = start("head", head_resource, head_data, f"{name}-head",
                     {k: v for k, v in shares.items() if k == "sharedfs"}, networks=[network.name], erdma=0,
                     gpus=0, nvidia_smi="", hostname=slurm.HEAD_HOSTNAME, address=head_address) if head_data else None
        node = start("node", node_resource, node_data, name, shares, networks=[n.name for n in networks],
                     erdma=erdma, gpus=it.gpu_count, nvidia_smi=capture.read_text() if capture.exists() else "",
                     health=healthy_hardware(spec, it))
    except BaseException:
        for leftover in client.containers.list(all=True, filters={"name": f"^{name}"}):
            leftover.remove(force=True)
        for n in networks:
            apis.detach(n.name)
            n.remove()
        raise
    return Stack(stack, config, spec, resources, outputs, node, head, apis, networks)
