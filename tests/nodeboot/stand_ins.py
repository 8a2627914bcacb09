"""What an emulated host has instead of hardware and cloud services, each behaving as its public source says.

Everything else on the host is real: Debian 12's systemd as PID 1, cloud-init reading a NoCloud seed, sshd, the
Docker CLI, util-linux's mount, iproute2. The stand-ins:

- the engine: the host has no Docker engine of its own (this machine's engine refuses --privileged, so no
  Docker-in-Docker); its CLI reaches the machine's engine through the socket. `docker` on the host is a thin
  adapter over the real CLI that keeps what an engine per host would give: the container's name is the host's
  own (`goldenenv` on every host), `--network host` is the host's network, and a bind source means the host's
  path (it is translated to the same data's path on this machine). `--gpus`, RDMA devices and the unlimited
  locked memory RDMA needs stand for hardware the machine lacks and are dropped (this engine refuses
  `--ulimit memlock=-1`: "error setting rlimit type 8: operation not permitted").
- docker.service: on a node it is the engine; here it waits for the machine's engine socket.
- instance-store disks as the AWS Deep Learning AMI leaves them: its dlami-nvme.service claims them at every boot
  (blank after a stop/start) and mounts the volume at /opt/dlami/nvme; here a folder of this machine stands for
  the volume and is bound there, empty on every boot, as a stop/start leaves instance store.
- `mount -t lustre` / `mount -t nfs`: the file system server is a folder of this machine shared by every host of
  the stack; the mount helpers check the source as Lustre's and NFS's do, then bind that folder.
- the NVIDIA driver (`nvidia-smi` answering from a capture of the instance type), the eRDMA driver (`lsmod`,
  `modprobe erdma`, `rdma dev|link show` as iproute2 prints them, one device per ERI on the host's interfaces).
"""

from __future__ import annotations

import json

CONFIG = "/etc/goldenenv-emulated"
"""Per-host facts the stand-ins read: name, rootfs, sharedfs, nvme, erdma."""
BINDS = "/run/goldenenv-emulated/binds"
"""`<host path> <machine path>` for each bind a stand-in made; /run empties on every boot, as mounts do."""

DOCKER = r'''#!/usr/bin/python3
"""The host's docker: the real CLI on the machine's engine, with what an engine of the host's own would give."""
import os, sys

CONFIG = "%(config)s"
BINDS = "%(binds)s"
NAMED = {"rm", "exec", "stop", "start", "kill", "logs", "inspect", "restart", "wait", "top", "port"}
VALUED = {"-e", "--env", "-u", "--user", "-w", "--workdir", "--env-file", "-t", "--time", "--signal", "-s",
          "-f", "--format", "--since", "--tail", "-n", "--type"}


def fact(name):
    with open(os.path.join(CONFIG, name)) as f:
        return f.read().strip()


HOST = fact("name")


def scoped(name):
    return name if name.startswith(HOST + "-") else HOST + "-" + name


def mount_of(path):
    """(device, root within it, mount point) of the mount holding path (/proc/self/mountinfo)."""
    best = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and (best is None or len(point) >= len(best[2])):
                best = (fields[2], fields[3], point)
    return best


def machine_path(path):
    """The machine's path of a host path: inside a bind a stand-in made (or a bind of one, as scratch binds the
    DLAMI's volume), else on the host's root file system."""
    path = os.path.realpath(path)
    device, root, point = mount_of(path)
    try:
        with open(BINDS) as f:
            binds = [line.strip().split(" ", 1) for line in f if line.strip()]
    except FileNotFoundError:
        binds = []
    for inside, outside in binds:
        if mount_of(inside)[:2] == (device, root):
            return outside + path[len(point.rstrip("/")):] if point != "/" else outside + path
    return fact("rootfs") + path


def run_args(args):
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("--gpus", "--device") and i + 1 < len(args):
            i += 2
            continue
        if a == "--ulimit" and args[i + 1].startswith("memlock="):
            i += 2  # locked memory is for RDMA buffers; this machine's engine may not raise it (EPERM)
            continue
        if a == "--name":
            out += [a, scoped(args[i + 1])]
            i += 2
            continue
        if a == "--network" and args[i + 1] == "host":
            out += [a, "container:" + HOST]
            i += 2
            continue
        if a in ("--volume", "-v"):
            source, _, rest = args[i + 1].partition(":")
            out += [a, machine_path(source) + ":" + rest]
            i += 2
            continue
        out.append(a)
        i += 1
    return ["--label", "goldenenv-emulated=" + HOST] + out


def named_args(args):
    out, i, done = [], 0, False
    while i < len(args):
        a = args[i]
        if not done and a in VALUED and i + 1 < len(args):
            out += [a, args[i + 1]]
            i += 2
            continue
        if not done and not a.startswith("-"):
            out.append(scoped(a))
            done = True
        else:
            out.append(a)
        i += 1
    return out


argv = sys.argv[1:]
if argv and argv[0] == "run":
    argv = ["run"] + run_args(argv[1:])
elif argv and argv[0] in NAMED:
    argv = [argv[0]] + named_args(argv[1:])
elif argv[:2] == ["container", "inspect"]:
    argv = argv[:2] + named_args(argv[2:])
os.execv("/usr/bin/docker", ["docker"] + argv)
''' % {"config": CONFIG, "binds": BINDS}

BIND = r'''#!/bin/bash
# bind <machine folder> <host mount point>: mount it and record the pair for the host's docker
set -euo pipefail
mkdir -p "$2"
mount --bind "$1" "$2"
mkdir -p "$(dirname %(binds)s)"
echo "$(realpath "$2") $1" >> %(binds)s
''' % {"binds": BINDS}

ENGINE_UNIT = """[Unit]
Description=Docker engine (emulated host: the machine's engine, reached through its socket)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'until docker version >/dev/null 2>&1; do sleep 1; done'
TimeoutStartSec=120
[Install]
WantedBy=multi-user.target
"""

DLAMI_UNIT = """[Unit]
Description=DLAMI instance store (emulated: vg.01/lv_ephemeral at /opt/dlami/nvme)
After=local-fs.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/libexec/emulated/dlami-nvme
[Install]
WantedBy=multi-user.target
"""

DLAMI_SCRIPT = r'''#!/bin/bash
# As the DLAMI's nvme_ephemeral_drives.sh on a stop/start: blank disks, a new striped volume, mounted empty.
set -euo pipefail
volume=$(cat %(config)s/nvme)
find "$volume" -mindepth 1 -delete
/usr/local/libexec/emulated/bind "$volume" /opt/dlami/nvme
echo "dlami-nvme: vg.01/lv_ephemeral mounted at /opt/dlami/nvme"
''' % {"config": CONFIG}

MOUNT_LUSTRE = r'''#!/bin/bash
# mount.lustre <mgs nid>@tcp:/<fsname> <dir> [-o options]
set -euo pipefail
if ! [[ $1 =~ ^[A-Za-z0-9.-]+@tcp:/[A-Za-z0-9]+$ ]]; then
  echo "mount.lustre: $1: not a Lustre source (mgsnode@tcp:/fsname)" >&2; exit 22
fi
if [ -e %(config)s/lustre-down ]; then  # the file system is still being created: its MGS does not answer
  echo "mount.lustre: mount $1 at $2 failed: Input/output error" >&2; exit 5
fi
exec /usr/local/libexec/emulated/bind "$(cat %(config)s/sharedfs)" "$2"
''' % {"config": CONFIG}

MOUNT_NFS = r'''#!/bin/bash
# mount.nfs <server>:<export> <dir> [-o options]
set -euo pipefail
if ! [[ $1 =~ ^[A-Za-z0-9.-]+:/.* ]]; then
  echo "mount.nfs: $1: not an NFS source (server:/export)" >&2; exit 32
fi
exec /usr/local/libexec/emulated/bind "$(cat %(config)s/sharedfs)" "$2"
''' % {"config": CONFIG}

MODINFO = r'''#!/bin/bash
# the Lustre client modules come with the DLAMI
[ "${1:-}" = lustre ] && { echo "filename: /lib/modules/$(uname -r)/extra/lustre.ko"; exit 0; }
exec /usr/sbin/modinfo "$@"
'''

LSMOD = r'''#!/bin/bash
/usr/sbin/lsmod
[ -s %(config)s/erdma ] && echo "erdma                 118784  0"
exit 0
''' % {"config": CONFIG}

MODPROBE = r'''#!/bin/bash
[ "${1:-}" = erdma ] && [ -s %(config)s/erdma ] && exit 0
exec /usr/sbin/modprobe "$@"
''' % {"config": CONFIG}

RDMA = r'''#!/bin/bash
# iproute2's rdma: one erdma device per ERI, each behind one of the host's interfaces (eth0, eth1 ...)
set -euo pipefail
count=$(cat %(config)s/erdma 2>/dev/null || echo 0)
netdevs=($(ls /sys/class/net | grep -v '^lo$' | sort))
case "${1:-} ${2:-}" in
  "dev show"|"dev "|"dev")
    for ((i = 0; i < count; i++)); do
      echo "$i: erdma_$i: node_type ca fw 0.2.0 node_guid 0216:3eff:fe00:000$i sys_image_guid 0216:3eff:fe00:000$i"
    done ;;
  "link show"|"link "|"link")
    for ((i = 0; i < count; i++)); do
      echo "link erdma_$i/1 state ACTIVE physical_state LINK_UP netdev ${netdevs[$i]}"
    done ;;
  *) echo "rdma (emulated): $*: not emulated" >&2; exit 1 ;;
esac
''' % {"config": CONFIG}

NVIDIA_SMI = r'''#!/bin/bash
# the NVIDIA driver: answers from a capture of this instance type
exec cat %(config)s/nvidia-smi.csv
''' % {"config": CONFIG}


def files(*, name: str, rootfs: str, sharedfs: str | None, nvme: str | None, erdma: int,
          nvidia_smi: str) -> dict[str, tuple[str, int]]:
    """Path on the host -> (content, mode) of every stand-in and the facts they read; "->target" is a symlink."""
    out = {
        "/usr/local/bin/docker": (DOCKER, 0o755),
        "/usr/local/libexec/emulated/bind": (BIND, 0o755),
        "/etc/systemd/system/docker.service": (ENGINE_UNIT, 0o644),
        "/etc/systemd/system/multi-user.target.wants/docker.service": ("->/etc/systemd/system/docker.service", 0),
        "/usr/local/sbin/nvidia-smi": (NVIDIA_SMI, 0o755),
        "/usr/local/sbin/lsmod": (LSMOD, 0o755),
        "/usr/local/sbin/modprobe": (MODPROBE, 0o755),
        "/usr/local/sbin/modinfo": (MODINFO, 0o755),
        "/usr/local/sbin/rdma": (RDMA, 0o755),
        "/usr/sbin/mount.lustre": (MOUNT_LUSTRE, 0o755),
        "/usr/sbin/mount.nfs": (MOUNT_NFS, 0o755),
        f"{CONFIG}/name": (name, 0o644),
        f"{CONFIG}/rootfs": (rootfs, 0o644),
        f"{CONFIG}/erdma": (str(erdma) if erdma else "", 0o644),
        f"{CONFIG}/nvidia-smi.csv": (nvidia_smi, 0o644),
    }
    if sharedfs:
        out[f"{CONFIG}/sharedfs"] = (sharedfs, 0o644)
    if nvme:
        out[f"{CONFIG}/nvme"] = (nvme, 0o644)
        out["/usr/local/libexec/emulated/dlami-nvme"] = (DLAMI_SCRIPT, 0o755)
        out["/etc/systemd/system/dlami-nvme.service"] = (DLAMI_UNIT, 0o644)
        out["/etc/systemd/system/multi-user.target.wants/dlami-nvme.service"] = ("->/etc/systemd/system/dlami-nvme.service", 0)
    return out

ALIBABA_METADATA = "100.100.100.200"
"""Alibaba's metadata server address; on the host it is bound to the host's own loopback."""
NAS_ADDRESS = "127.0.0.2"
"""Where the host resolves the region's NAS API endpoint (/etc/hosts): the stand-in below, on the host's loopback."""

ALIBABA_CLOUD = r'''#!/usr/bin/python3
"""Alibaba's metadata server in hardened mode and the NAS API's DescribeProtocolMountTarget, on the host itself.

Metadata (ECS docs, "Instance metadata", hardened mode): PUT /latest/api/token with
X-aliyun-ecs-metadata-token-ttl-seconds gives a token; every read needs it as X-aliyun-ecs-metadata-token, else
403; ram/security-credentials/ names the instance's RAM role, ram/security-credentials/<role> gives its STS
credentials as JSON (AccessKeyId, AccessKeySecret, SecurityToken, Expiration). The NAS API (RPC style, signature
version 1.0): the request must carry those credentials and a valid HMAC-SHA1 signature, else the API's error.
"""
import base64, hashlib, hmac, json, secrets, ssl, sys, threading, urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONFIG = json.load(open("%(config)s/alibaba.json"))
TOKENS = set()
CREDENTIALS = {"AccessKeyId": "STS.emulated" + secrets.token_hex(4), "AccessKeySecret": secrets.token_hex(16),
               "SecurityToken": secrets.token_hex(32), "Expiration": "2099-01-01T00:00:00Z", "Code": "Success"}


class Metadata(BaseHTTPRequestHandler):
    def answer(self, code, body, kind="text/plain"):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path != "/latest/api/token" or not self.headers.get("X-aliyun-ecs-metadata-token-ttl-seconds"):
            return self.answer(400, "Bad Request")
        token = secrets.token_urlsafe(24)
        TOKENS.add(token)
        self.answer(200, token)

    def do_GET(self):
        if self.headers.get("X-aliyun-ecs-metadata-token") not in TOKENS:
            return self.answer(403, "Forbidden")  # hardened mode: no token, no metadata
        role = CONFIG["role"]
        if self.path == "/latest/meta-data/ram/security-credentials/":
            return self.answer(200, role)
        if self.path == "/latest/meta-data/ram/security-credentials/" + role:
            return self.answer(200, json.dumps(CREDENTIALS), "application/json")
        self.answer(404, "Not Found")

    def log_message(self, *args):
        pass


def encode(value):
    return urllib.parse.quote(str(value), safe="~")


class Nas(Metadata):
    def do_GET(self):
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        signature = query.pop("Signature", "")
        canonical = "&".join(encode(k) + "=" + encode(query[k]) for k in sorted(query))
        expected = base64.b64encode(hmac.new((CREDENTIALS["AccessKeySecret"] + "&").encode(),
                                             ("GET&%%2F&" + encode(canonical)).encode(), hashlib.sha1).digest()).decode()
        if query.get("AccessKeyId") != CREDENTIALS["AccessKeyId"] or \
                query.get("SecurityToken") != CREDENTIALS["SecurityToken"]:
            return self.answer(403, json.dumps({"Code": "InvalidAccessKeyId.NotFound"}), "application/json")
        if not hmac.compare_digest(signature, expected):
            return self.answer(400, json.dumps({"Code": "IncompleteSignature"}), "application/json")
        if query.get("Action") != "DescribeProtocolMountTarget" or query.get("FileSystemId") != CONFIG["file_system_id"]:
            return self.answer(404, json.dumps({"Code": "InvalidFileSystem.NotFound"}), "application/json")
        self.answer(200, json.dumps({"RequestId": secrets.token_hex(8), "ProtocolMountTargets": [
            {"ExportId": CONFIG["export_id"], "ProtocolMountTargetDomain": CONFIG["domain"], "Path": "/"}]}),
            "application/json")


metadata = ThreadingHTTPServer(("%(metadata)s", 80), Metadata)
nas = ThreadingHTTPServer(("%(nas)s", 443), Nas)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("%(config)s/nas.pem")
nas.socket = context.wrap_socket(nas.socket, server_side=True)
threading.Thread(target=metadata.serve_forever, daemon=True).start()
nas.serve_forever()
''' % {"config": CONFIG, "metadata": ALIBABA_METADATA, "nas": NAS_ADDRESS}

ALIBABA_CLOUD_UNIT = """[Unit]
Description=Alibaba Cloud services of this node (emulated: metadata in hardened mode, the NAS API)
Before=goldenenv-sharedfs.service network-online.target
[Service]
ExecStartPre=-/usr/sbin/ip addr add %(metadata)s/32 dev lo
ExecStartPre=-/usr/sbin/ip addr add %(nas)s/32 dev lo
ExecStartPre=/usr/sbin/update-ca-certificates
ExecStart=/usr/local/libexec/emulated/alibaba-cloud
Restart=always
[Install]
WantedBy=multi-user.target
""" % {"metadata": ALIBABA_METADATA, "nas": NAS_ADDRESS}


def alibaba_files(*, role: str, file_system_id: str, export_id: str, domain: str, ca_pem: str, server_pem: str) -> dict[str, tuple[str, int]]:
    """The metadata server and the NAS API for a node of a CPFS stack: its role, its export, TLS the host trusts."""
    return {
        "/usr/local/libexec/emulated/alibaba-cloud": (ALIBABA_CLOUD, 0o755),
        "/etc/systemd/system/emulated-alibaba-cloud.service": (ALIBABA_CLOUD_UNIT, 0o644),
        "/etc/systemd/system/multi-user.target.wants/emulated-alibaba-cloud.service":
            ("->/etc/systemd/system/emulated-alibaba-cloud.service", 0),
        f"{CONFIG}/alibaba.json": (json.dumps({"role": role, "file_system_id": file_system_id,
                                               "export_id": export_id, "domain": domain}), 0o600),
        f"{CONFIG}/nas.pem": (server_pem, 0o600),
        "/usr/local/share/ca-certificates/emulated-alibaba.crt": (ca_pem, 0o644),
    }


def tls_pair(hostname: str) -> tuple[str, str]:
    """A CA (PEM) and a server certificate for hostname signed by it, with its key (PEM): made here, per run."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "goldenenv emulated cloud CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(hostname)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    server = cert.public_bytes(pem) + key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption())
    return ca.public_bytes(pem).decode(), server.decode()
