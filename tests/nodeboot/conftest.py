"""Shared pieces of the node-boot tests: the emulated host's image, a local registry holding the golden image by
digest, the stack's key pair, and a booted node per shipped cloud stack."""

from __future__ import annotations

import io
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

import emulated_host
import stand_ins
from goldenenv import catalog, lifecycle, plan, stackconfig
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def golden_base(client) -> str:
    return ensure_base(client, load(GOLDEN_LOCK).base, log=lambda m: None)


@pytest.fixture(scope="session")
def host_image(client, golden_base) -> str:
    return emulated_host.host_image(client, golden_base)


@pytest.fixture(scope="session")
def golden_ref(client, golden_base, tmp_path_factory) -> str:
    """The golden image pushed to a registry on this machine's loopback; what nodes pull: repository@sha256:..."""
    image, _ = client.images.build(fileobj=io.BytesIO(REGISTRY_DOCKERFILE.format(base=golden_base).encode()),
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
    lifecycle.ensure_image(lifecycle.load_spec("local"), BuildOptions.from_environment(), client, lambda m: None)
    images = tmp_path_factory.mktemp("published")
    (images / GOLDEN_LOCK).mkdir()
    entry = publish.push(load(GOLDEN_LOCK), f"127.0.0.1:{port}/goldenenv", client, log=lambda m: None,
                         images_dir=images)
    # a node has only what it pulls: drop the pushed name, so the boot pulls it by digest from the registry
    for tag in client.images.get(entry.ref).tags:
        if tag.startswith(entry.repository + ":"):
            client.images.remove(tag)
    yield entry.ref
    registry.remove(force=True)


@pytest.fixture(scope="session")
def stack_key(tmp_path_factory) -> dict:
    """The stack's key pair (made here) and an ssh config that trusts the emulated nodes' fresh host keys."""
    folder = tmp_path_factory.mktemp("stack-key")
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


KEY_PAIRS = {"aws": "aws:ec2/keyPair:KeyPair", "alicloud": "alicloud:ecs/ecsKeyPair:EcsKeyPair"}


def script_values(user_data: str, script: str) -> dict[str, str]:
    """The `name=value` assignments at the top of a boot script the user data writes ({} if it writes none)."""
    import shlex

    for f in yaml.safe_load(user_data)["write_files"]:
        if Path(f["path"]).name == script:
            pairs = (line.split("=", 1) for line in f["content"].splitlines()
                     if "=" in line and line.split("=", 1)[0].isidentifier())
            return {k: (shlex.split(v) or [""])[0] for k, v in pairs}
    return {}


class Booted:
    """A shipped stack's first node, booted on an emulated host from the user data plan renders for it."""

    def __init__(self, client, stack: str, host: emulated_host.Host, user_data: str, spec, shares: dict):
        self.client, self.stack, self.host, self.user_data, self.spec, self.shares = \
            client, stack, host, user_data, spec, shares

    @property
    def units(self) -> list[str]:
        doc = yaml.safe_load(self.user_data)
        return [Path(f["path"]).name for f in doc["write_files"] if f["path"].startswith("/etc/systemd/system/")]


@pytest.fixture(scope="session")
def boot(client, host_image, golden_ref, stack_key, tmp_path_factory):
    """boot(stack) -> Booted: the stack's first node on an emulated host (one at a time per stack, removed at the
    end of the session)."""
    booted: dict[str, Booted] = {}
    networks = []

    def start(stack: str) -> Booted:
        if stack in booted:
            return booted[stack]
        config = stack_config(stack, golden_ref, stack_key["public"])
        spec = stackconfig.load(stack, *stackconfig.namespaced(config))
        resources, _ = plan.run_program(stack, config)
        # the cloud hands the node its key pair through the metadata service; cloud-init installs it for the login
        public_key = next(r for r in resources if r.type == KEY_PAIRS[spec.cloud]).props["publicKey"]
        user_data = emulated_host.user_data_of(resources, spec.cloud)
        pool = spec.nodes[0]
        it = catalog.instance_type(spec.cloud, pool.instance_type)
        name = f"ge-{stack}-{uuid.uuid4().hex[:4]}"
        folder = tmp_path_factory.mktemp(stack)
        shares = {}
        if spec.storage.parallel_fs.enabled:
            shares["sharedfs"] = str(folder / "sharedfs")
        if it.local_nvme_count:
            shares["nvme"] = str(folder / "nvme")
        for path in shares.values():
            Path(path).mkdir()
        nets = []
        for i in range(max(1, it.rdma_interfaces if it.rdma == "erdma" else 1)):
            network = client.networks.create(f"{name}-net{i}", driver="bridge", labels={"goldenenv.test": "node"})
            networks.append(network)
            nets.append(network.name)
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
            client, host_image, name=name, networks=nets, user_data=user_data, public_key=public_key,
            login=lifecycle.clouds.get(spec.cloud).ssh_user, key=stack_key["key"], shares=list(shares.values()),
            sharedfs=shares.get("sharedfs"), nvme=shares.get("nvme"),
            erdma=it.rdma_interfaces if it.rdma == "erdma" else 0,
            nvidia_smi=capture.read_text() if capture.exists() else "", extra_files=extra_files,
            extra_hosts=extra_hosts)
        booted[stack] = Booted(client, stack, host, user_data, spec, shares)
        return booted[stack]

    yield start
    for b in booted.values():
        b.host.remove()
    for network in networks:
        network.remove()
