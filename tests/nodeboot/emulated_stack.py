"""A shipped cloud stack's node on an emulated host, end to end: a registry on this machine holding the golden
image by digest, the team's key pair, the plan's user data for the node, the stand-ins its boot needs.

Used by the node-boot tests (conftest.py) and by scripts/bench_node_boot.py.
"""

from __future__ import annotations

import io
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

import emulated_host
import stand_ins
from goldenenv import catalog, clouds, lifecycle, plan, stackconfig
from goldenenv.images import publish
from goldenenv.images.base import ensure_base
from goldenenv.images.dockerfile import BuildOptions
from goldenenv.images.lock import load

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
    # the node as it boots without a queue: the Slurm head and the secret stores its munge unit reads have no
    # stand-ins here yet, so these tests boot the stack's node with `scheduler: none`
    config["goldenenv:scheduler"] = "none"
    return config


def script_values(user_data: str, script: str) -> dict[str, str]:
    """The `name=value` assignments at the top of a boot script the user data writes ({} if it writes none)."""
    for f in yaml.safe_load(user_data)["write_files"]:
        if Path(f["path"]).name == script:
            pairs = (line.split("=", 1) for line in f["content"].splitlines()
                     if "=" in line and line.split("=", 1)[0].isidentifier())
            return {k: (shlex.split(v) or [""])[0] for k, v in pairs}
    return {}


@dataclass
class Booted:
    """A shipped stack's first node, booted on an emulated host from the user data plan renders for it."""

    stack: str
    host: emulated_host.Host
    user_data: str
    spec: object
    shares: dict[str, str]
    """sharedfs: the machine folder behind the shared file system; nvme: behind the instance store."""
    networks: list = field(default_factory=list)

    @property
    def units(self) -> list[str]:
        doc = yaml.safe_load(self.user_data)
        return [Path(f["path"]).name for f in doc["write_files"] if f["path"].startswith("/etc/systemd/system/")]

    def up(self, timeout: float = 150) -> None:
        """Wait until every goldenenv unit is active and the golden container runs."""
        self.host.wait_for("every goldenenv unit active and the golden container running", lambda: (
            set(self.host.units_state(self.units).values()) == {"active"} and self.host.golden() is not None),
            timeout)

    def remove(self) -> None:
        self.host.remove()
        for network in self.networks:
            network.remove()


def boot(client: docker.DockerClient, image: str, stack: str, golden_ref: str, key: dict, folder: Path) -> Booted:
    """Create the stack's first node from the user data plan renders for it; it boots in the background."""
    config = stack_config(stack, golden_ref, key["public"])
    spec = stackconfig.load(stack, *stackconfig.namespaced(config))
    resources, _ = plan.run_program(stack, config)
    user_data = emulated_host.user_data_of(resources, spec.cloud)
    # the cloud hands the node its key pair through the metadata service; cloud-init installs it for the login
    public_key = next(r for r in resources if r.type == KEY_PAIRS[spec.cloud]).props["publicKey"]
    it = catalog.instance_type(spec.cloud, spec.nodes[0].instance_type)
    name = f"ge-{stack}-{uuid.uuid4().hex[:4]}"
    shares = {}
    if spec.storage.parallel_fs.enabled:
        shares["sharedfs"] = str(folder / "sharedfs")
    if it.local_nvme_count:
        shares["nvme"] = str(folder / "nvme")
    for path in shares.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    erdma = it.rdma_interfaces if it.rdma == "erdma" else 0
    networks = [client.networks.create(f"{name}-net{i}", driver="bridge", labels={"goldenenv.test": "node"})
                for i in range(max(1, erdma))]  # one network per ERI: eth0, eth1 ...
    extra_files, extra_hosts = {}, {}
    cpfs = script_values(user_data, "cpfs-mount.sh")
    if cpfs:
        role = next(r for r in resources if r.type == "alicloud:ram/role:Role").props["roleName"]
        ca, server = stand_ins.tls_pair(cpfs["nas_endpoint"])
        extra_files = stand_ins.alibaba_files(
            role=role, file_system_id=cpfs["file_system_id"], export_id=cpfs["export_id"],
            domain=f"{cpfs['file_system_id']}.{spec.region}.cpfs.aliyuncs.com", ca_pem=ca, server_pem=server)
        extra_hosts = {cpfs["nas_endpoint"]: stand_ins.NAS_ADDRESS}
    capture = CAPTURES / f"nvidia_smi_{it.name}.csv"
    host = emulated_host.Host.create(
        client, image, name=name, networks=[n.name for n in networks], user_data=user_data, public_key=public_key,
        login=clouds.get(spec.cloud).ssh_user, key=key["key"], shares=list(shares.values()),
        sharedfs=shares.get("sharedfs"), nvme=shares.get("nvme"), erdma=erdma,
        nvidia_smi=capture.read_text() if capture.exists() else "", extra_files=extra_files,
        extra_hosts=extra_hosts)
    return Booted(stack, host, user_data, spec, shares, networks)
