"""An emulated cloud node: a container with Debian 12's systemd as PID 1, cloud-init given the exact user data the
plan renders for that node through a NoCloud seed, sshd, and the stand-ins of tests/nodeboot/stand_ins.py.

Its boot is the node's: cloud-init writes the boot files and enables the units once; systemd runs them on every
boot. A stop/start of the node is a stop/start of the container (systemd shuts down, /run empties, the bound
volumes are gone until a unit binds them again).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import shlex
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import yaml

import stand_ins
from goldenenv import slurm

HOST_DOCKERFILE = """\
FROM {base}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      systemd systemd-sysv dbus cloud-init openssh-server docker.io locales sudo iproute2 util-linux kmod procps \\
      python3 ca-certificates awscli \\
 && rm -rf /var/lib/apt/lists/* \\
 && (groupmod -g {docker_gid} docker || groupadd -g {docker_gid} docker) \\
 && systemctl mask docker.socket containerd.service systemd-udevd.service systemd-udevd-kernel.socket \\
      systemd-udevd-control.socket getty.target console-getty.service systemd-resolved.service \\
 && printf 'datasource_list: [NoCloud]\\nnetwork: {{config: disabled}}\\n' > /etc/cloud/cloud.cfg.d/90-emulated.cfg
# curl, which a Google Cloud host image has (the GCP munge step and Artifact Registry's login call it): a layer of its
# own, so the one above stays cached
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl \\
 && rm -rf /var/lib/apt/lists/*
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
LOGINS = {
    # the cloud's host image: who gets the instance's key pair (AWS Ubuntu images: ubuntu; Alibaba: root)
    "ubuntu": "system_info:\n  default_user:\n    name: ubuntu\n    groups: [docker]\n    shell: /bin/bash\n"
              "    sudo: ['ALL=(ALL) NOPASSWD:ALL']\n    lock_passwd: true\n",
    "root": "disable_root: false\nusers: []\n",
    # a default user with passwordless sudo and outside the docker group, as the cloud's node_login declares it
    # (DockerReach.SUDO: `sudo -n docker`): Azure's Ubuntu HPC images (cloud-init's Azure datasource names it as the
    # provisioning media's admin user, azureuser) and Google's Ubuntu images (ubuntu, the ssh-keys metadata's user;
    # the Host's login is this key, the user is ubuntu)
    "azureuser": "system_info:\n  default_user:\n    name: azureuser\n    shell: /bin/bash\n"
                 "    sudo: ['ALL=(ALL) NOPASSWD:ALL']\n    lock_passwd: true\n",
    "ubuntu-sudoer": "system_info:\n  default_user:\n    name: ubuntu\n    shell: /bin/bash\n"
                     "    sudo: ['ALL=(ALL) NOPASSWD:ALL']\n    lock_passwd: true\n",
}


def written(entry: dict) -> str:
    """A write_files entry's content as cloud-init writes it on the host (gz+b64 entries decoded, as it decodes them)."""
    if entry.get("encoding") in ("gz+b64", "gzip+base64", "gz+base64", "gzip+b64"):
        return gzip.decompress(base64.b64decode(entry["content"])).decode()
    if entry.get("encoding") in ("b64", "base64"):
        return base64.b64decode(entry["content"]).decode()
    return entry["content"]


def host_image(client: docker.DockerClient, base: str) -> str:
    """The emulated host's image, built once on the engine (a tag per base, socket group and Dockerfile)."""
    gid = Path("/var/run/docker.sock").stat().st_gid
    text = HOST_DOCKERFILE.format(base=base, docker_gid=gid)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return built(client, text, f"goldenenv-test/emulated-host:{base.rsplit(':', 1)[-1]}-{gid}-{digest}")


def built(client: docker.DockerClient, dockerfile: str, tag: str) -> str:
    """The image of this Dockerfile under `tag` (its digest in the tag), built only when the engine lacks it."""
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    return tag


def remove_network(network) -> None:
    """A stack's network gone, with whatever stand-in still serves on it (Docker removes no network with endpoints)."""
    network.reload()
    for container in network.containers:
        try:
            network.disconnect(container, force=True)
        except docker.errors.APIError:
            pass  # gone meanwhile
    network.remove()


def started(server, ready: bytes, what: str, timeout: float = 30):
    """A stand-in's container once its log says `ready`; removed, with its log in the error, if it ends first."""
    deadline = time.monotonic() + timeout
    while ready not in server.logs():
        server.reload()
        if server.status == "exited" or time.monotonic() > deadline:
            server.remove(force=True)
            raise RuntimeError(f"the {what} did not start:\n{server.logs().decode()}")
        time.sleep(0.2)
    return server


def ca_bundle(container) -> str:
    """The CA bundle of the host's image (Debian's ca-certificates), from a created container."""
    stream, _ = container.get_archive(CA_BUNDLE)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        return tar.extractfile(tar.getmembers()[0]).read().decode()


def tar_of(files: dict[str, tuple[str | bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, (content, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            if isinstance(content, str) and content.startswith("->"):
                info.type, info.linkname = tarfile.SYMTYPE, content[2:]
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class Host:
    """One emulated node on a network of its stack."""

    client: docker.DockerClient
    name: str
    container: docker.models.containers.Container
    login: str
    key: Path

    @classmethod
    def create(cls, client: docker.DockerClient, image: str, *, name: str, networks: list[str], user_data: str,
               public_key: str, login: str, key: Path, shares: list[str], sharedfs: str | None,
               nvme: str | None, erdma: int, gpus: int, nvidia_smi: str, health: dict | None = None,
               extra_files: dict | None = None, disks: stand_ins.Disks | None = None,
               hostname: str | None = None, address: str | None = None, trusted_ca: str | None = None,
               seed: bool = True) -> Host:
        """hostname: the host's name where cloud-init sets one (the head), else its own; address: its private
        address on the stack's network (networks[0]) where the cloud gave one, else the engine picks; trusted_ca:
        a CA (PEM) the host trusts besides its image's, as `update-ca-certificates` would have it; disks: the
        node's recorded disks, its local NVMe bare (Local SSD, NVMe Direct Disks) and backed by `nvme`; seed: give
        cloud-init user_data and the key through a NoCloud seed (False: its datasource reads them from the cloud's
        metadata server, set up by extra_files, and user_data and public_key are not used)."""
        volumes = {"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "ro"},
                   "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
                   **{path: {"bind": path, "mode": "rw"} for path in shares}}
        endpoint = {networks[0]: client.api.create_endpoint_config(ipv4_address=address)} if address else None
        container = client.containers.create(
            image, name=name, hostname=hostname or name, detach=True, network=networks[0],
            networking_config=endpoint, environment={"container": "docker"},
            tmpfs={"/run": "rw,exec", "/run/lock": "rw", "/tmp": "rw,exec"}, volumes=volumes,
            cap_add=["SYS_ADMIN", "NET_ADMIN"], labels={"goldenenv.test": "emulated-host"})
        for extra in networks[1:]:
            client.networks.get(extra).connect(container)
        container.reload()
        rootfs = container.attrs["GraphDriver"]["Data"]["MergedDir"]
        seed = {
            "/var/lib/cloud/seed/nocloud/user-data": (user_data, 0o600),
            "/var/lib/cloud/seed/nocloud/meta-data": (yaml.safe_dump({
                "instance-id": f"i-{name}", "local-hostname": name, "public-keys": [public_key]}), 0o600),
        } if seed else {}
        seed["/etc/cloud/cloud.cfg.d/91-login.cfg"] = (LOGINS[login], 0o644)
        fakes = stand_ins.files(name=name, rootfs=rootfs, sharedfs=sharedfs, nvme=nvme, erdma=erdma, gpus=gpus,
                                nvidia_smi=nvidia_smi, health=health, disks=disks)
        if trusted_ca:
            fakes[CA_BUNDLE] = (ca_bundle(container) + trusted_ca, 0o644)
        container.put_archive("/", tar_of({**fakes, **(extra_files or {}), **seed}))
        container.start()
        return cls(client, name, container, login, key)

    @property
    def address(self) -> str:
        self.container.reload()
        return next(iter(self.container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]

    @property
    def ssh_host(self) -> str:
        return f"ssh://{self.login}@{self.address}"

    def sh(self, command: str, user: str = "root") -> tuple[int, str]:
        done = self.container.exec_run(["sh", "-c", command], user=user)
        return done.exit_code, done.output.decode(errors="replace")

    def wait_for(self, what: str, check, timeout: float = 150) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: {what} not within {timeout:.0f} s\n{self.diagnose()}")
            time.sleep(1)

    def units_state(self, units: list[str]) -> dict[str, str]:
        _, out = self.sh("systemctl is-active " + " ".join(units) + " || true")
        return dict(zip(units, out.split(), strict=False))

    def golden(self) -> docker.models.containers.Container | None:
        found = self.client.containers.list(filters={"name": f"^{self.name}-goldenenv$"})
        return found[0] if found else None

    def restart(self) -> None:
        """A stop/start: systemd shuts down (the golden container stops with its unit), then boots again."""
        self.container.stop(timeout=60)
        self.container.start()

    def diagnose(self) -> str:
        _, out = self.sh("systemctl --no-pager list-units 'goldenenv-*' 'dlami*' 'docker*' cloud-final.service; "
                         "journalctl --no-pager -n 60 -u 'goldenenv-*' -u cloud-final -u dlami-nvme; "
                         "tail -n 30 /var/log/cloud-init-output.log")
        return out

    def remove(self) -> None:
        for leftover in self.client.containers.list(all=True, filters={"label": f"goldenenv-emulated={self.name}"}):
            leftover.remove(force=True)
        self.container.remove(force=True)


HEAD_TYPES = {"aws": "aws:ec2/instance:Instance", "alicloud": "alicloud:ecs/instance:Instance",
              "tencent": "tencentcloud:Instance/instance:Instance", "huawei": "huaweicloud:Ecs/instance:Instance"}
NODE_TYPES = {"aws": "aws:ec2/launchTemplate:LaunchTemplate", "alicloud": "alicloud:ecs/instance:Instance",
              "tencent": "tencentcloud:Instance/instance:Instance"}
USER_DATA = {"aws:ec2/instance:Instance": "userDataBase64", "aws:ec2/launchTemplate:LaunchTemplate": "userData",
             "alicloud:ecs/instance:Instance": "userData", "tencentcloud:Instance/instance:Instance": "userData"}


def is_head(kind: str, name: str) -> bool:
    """Whether a resource is a stack's Slurm head instance (named <cluster>-head)."""
    return kind in HEAD_TYPES.values() and name.endswith(f"-{slurm.HEAD_HOSTNAME}")


def head_resource(resources, cloud: str):
    """The stack's Slurm head instance, or None (goldenenv:scheduler none)."""
    return next((r for r in resources if r.type == HEAD_TYPES[cloud] and is_head(r.type, r.name)), None)


def node_resource(resources, cloud: str):
    """What carries the first GPU node's user data: AWS, the pool's launch template; Alibaba, its first instance."""
    head = head_resource(resources, cloud)
    return next(r for r in resources if r.type == NODE_TYPES[cloud] and r is not head)


def user_data_of(resource) -> str:
    """The user data as the plan renders it for that instance or launch template (gzip unpacked, as cloud-init
    unpacks it: Tencent's is gzipped to fit its 16 KB)."""
    data = base64.b64decode(resource.props[USER_DATA[resource.type]])
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode()


HTTP_GET = ("import json, sys, urllib.request, urllib.error\n"
            "req = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))\n"
            "try:\n    r = urllib.request.urlopen(req, timeout=10)\n"
            "except urllib.error.HTTPError as e:\n    r = e\n"
            "print(json.dumps({'status': r.status, 'body': r.read().decode(), 'headers': dict(r.headers)}))\n")


def http_get(host: Host, url: str, headers: dict[str, str]) -> dict:
    """A GET made from the host, as its programs make them (python's urllib): {status, body, headers}."""
    rc, out = host.sh(f"python3 -c {shlex.quote(HTTP_GET)} {shlex.quote(url)} {shlex.quote(json.dumps(headers))}")
    assert rc == 0, out
    return json.loads(out)
