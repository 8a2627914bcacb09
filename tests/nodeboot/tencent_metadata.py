"""Tencent Cloud's CVM metadata server as the instances of one stack see it (stdlib only), for the emulated Tencent
hosts, and the config drive Tencent's images boot from. Started by tests/nodeboot/test_emulated_tencent.py in a
container on the stack's network under the server's name, metadata.tencentyun.com (the VPC's DNS), with the host
image's Python:

    python3 tencent_metadata.py STATE_FOLDER [PORT]

What it answers, and its sources:

- "Viewing Instance Metadata" (https://www.tencentcloud.com/document/product/213/4934, and
  https://cloud.tencent.com/developer/article/1883323): GET http://metadata.tencentyun.com/latest/meta-data/<path>,
  plain text, no token or header (CVM's metadata has no token mode); a folder (a path ending in /) lists its
  entries one a line, folders with a trailing /. The paths served: instance-id, instance-name, uuid, local-ipv4,
  public-ipv4, mac, placement/region, placement/zone, network/interfaces/macs/<mac>/{mac, primary-local-ipv4,
  vpc-id, subnet-id}; the version roots 1.0, 2017-09-19 and latest. A path the instance does not have: 404.
- CAM role credentials (tencentcloud-sdk-python common/credential.py CVMRoleCredential, tencentcloud-sdk-go
  common/cvm_role_provider.go): GET latest/meta-data/cam/security-credentials/ names the role bound to the
  instance; .../cam/security-credentials/<role> answers {"TmpSecretId", "TmpSecretKey", "Token", "ExpiredTime",
  "Expiration", "Code": "Success"}. Another role's name: 404 (only the instance's own role is served). An instance
  with no role: the folder is 404.
- Spot ("Spot instances: reclaim notice", https://www.tencentcloud.com/document/product/213/32487):
  latest/meta-data/spot/termination-time is 404 until the instance is to be reclaimed, then the time (UTC+8,
  "2026-12-07 18:00:00"; set_termination()).

The server tells instances apart by the address a request comes from, as the real one does (each instance reaches
it from its own private address): STATE_FOLDER/instances.json maps that address to the instance's record
(instance()), read on every request. Every request is appended to STATE_FOLDER/requests.log as
`<caller address> <METHOD> <path> <status>`.

The config drive (config_drive()): Tencent's images run cloud-init with `datasource_list: [ ConfigDrive,
TencentCloud ]` and `ConfigDrive: dsmode: local` (Tencent's "Linux 系统安装 cloud-init" guide,
https://cloud.tencent.com/document/product/213/17339, as the import-image tools that follow it quote it: the page
itself was not retrieved here), so cloud-init takes the instance's user data from an OpenStack-layout config drive
(openstack/latest/meta_data.json and user_data) and Tencent's own TencentCloud datasource is not in upstream
cloud-init (Debian 12's 22.4.2 has none). What Tencent's drive holds beyond that layout is unverified: here
meta_data.json carries uuid (the instance id), hostname, name, availability_zone and public_keys (the key pair), and
user_data the RunInstances UserData decoded from base64 (the program's gzip, which cloud-init unpacks).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "metadata.tencentyun.com"
INSTANCES = "instances.json"
LOG = "requests.log"
VERSIONS = ("1.0", "2017-09-19", "latest")
SEED = "/var/lib/cloud/seed/config_drive"
"""Where cloud-init's ConfigDrive datasource reads a drive's files when no config-2 device can be mounted (an
unprivileged container has no block devices): DataSourceConfigDrive.seed_dir, tried before any device."""
CLOUD_CFG = """\
# Tencent's image configuration (https://cloud.tencent.com/document/product/213/17339): a config drive first, then
# Tencent's own datasource (not in upstream cloud-init, so only ConfigDrive can claim the instance here)
datasource_list: [ ConfigDrive, TencentCloud ]
datasource:
  ConfigDrive:
    dsmode: local
  TencentCloud:
    metadata_urls: ['http://169.254.0.23', 'http://metadata.tencentyun.com']
network: {config: disabled}
"""
_WRITE = threading.Lock()


def instance(*, instance_id: str, name: str, uuid: str, address: str, mac: str, region: str, zone: str,
             vpc_id: str, subnet_id: str, role: str | None, credentials: dict | None) -> dict:
    """One instance's record: its metadata tree and its role's temporary keys (credentials as the emulated cloud
    issued them: AccessKeyId, AccessKeySecret, SecurityToken, Expiration)."""
    interface = {"mac": mac, "primary-local-ipv4": address, "vpc-id": vpc_id, "subnet-id": subnet_id}
    tree = {"instance-id": instance_id, "instance-name": name, "uuid": uuid, "local-ipv4": address,
            "public-ipv4": None, "mac": mac, "placement": {"region": region, "zone": zone},
            "network": {"interfaces": {"macs": {mac: interface}}}}
    return {"tree": tree, "role": role, "credentials": credentials, "termination": None}


def write(folder: Path, instances: dict[str, dict]) -> None:
    """The stack's instances by private address."""
    with _WRITE:
        (Path(folder) / f"{INSTANCES}.new").write_text(json.dumps(instances))
        (Path(folder) / f"{INSTANCES}.new").rename(Path(folder) / INSTANCES)


def set_termination(folder: Path, address: str, when: str | None) -> None:
    """The spot reclaim time of the instance at `address` (UTC+8, "YYYY-MM-DD HH:MM:SS"); None: none."""
    instances = json.loads((Path(folder) / INSTANCES).read_text())
    instances[address]["termination"] = when
    write(folder, instances)


def requests_of(folder: Path) -> list[tuple[str, str, str, int]]:
    """(caller address, method, path, status) of every request so far."""
    try:
        lines = (Path(folder) / LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(a, m, p, int(s)) for a, m, p, s in (line.split(" ") for line in lines)]


def config_drive(*, instance_id: str, hostname: str, name: str, zone: str, key_name: str, public_key: str,
                 user_data: bytes) -> dict[str, tuple[bytes | str, int]]:
    """The config drive's files under the ConfigDrive datasource's seed folder, and Tencent's cloud-init
    configuration: path -> (content, mode), as emulated_host.Host.create's extra_files take them."""
    meta = {"uuid": instance_id, "hostname": hostname, "name": name, "availability_zone": zone,
            "public_keys": {key_name: public_key}, "files": [], "meta": {}}
    return {f"{SEED}/openstack/latest/meta_data.json": (json.dumps(meta), 0o600),
            f"{SEED}/openstack/latest/user_data": (user_data, 0o600),
            "/etc/cloud/cloud.cfg.d/95-tencent.cfg": (CLOUD_CFG, 0o644)}


def credentials_of(record: dict) -> dict:
    """The role's temporary keys as the metadata server answers them."""
    given = record["credentials"]
    return {"TmpSecretId": given["AccessKeyId"], "TmpSecretKey": given["AccessKeySecret"],
            "Token": given["SecurityToken"], "ExpiredTime": 4070908800, "Expiration": given["Expiration"],
            "Code": "Success"}


def answer(record: dict, path: str) -> str | None:
    """The text at `path` under meta-data/ for this instance, or None (404)."""
    tree = dict(record["tree"])
    if record["role"]:
        tree["cam"] = {"security-credentials": {record["role"]: json.dumps(credentials_of(record))}}
    if record["termination"]:
        tree["spot"] = {"termination-time": record["termination"]}
    node = tree
    for part in [p for p in path.split("/") if p]:
        if not isinstance(node, dict) or node.get(part) is None:
            return None
        node = node[part]
    if isinstance(node, dict):
        if path and not path.endswith("/"):
            return None
        return "\n".join(k + "/" if isinstance(v, dict) else k for k, v in node.items() if v is not None)
    return None if path.endswith("/") else str(node)


class Metadata(BaseHTTPRequestHandler):
    folder: Path

    def reply(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with _WRITE, open(self.folder / LOG, "a") as log:
            log.write(f"{self.client_address[0]} {self.command} {self.path.split('?')[0]} {status}\n")

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        instances = json.loads((self.folder / INSTANCES).read_text())
        record = instances.get(self.client_address[0])
        if path in ("/", ""):
            return self.reply(200, "\n".join(VERSIONS))
        parts = path.lstrip("/").split("/", 2)
        if record is None or parts[0] not in VERSIONS or len(parts) < 2 or parts[1] != "meta-data":
            return self.reply(404, "Not Found")
        found = answer(record, parts[2] if len(parts) > 2 else "")
        self.reply(404, "Not Found") if found is None else self.reply(200, found)

    def do_PUT(self) -> None:
        self.reply(405, "Method Not Allowed")

    do_POST = do_DELETE = do_PUT

    def log_message(self, *args) -> None:
        pass


def serve(folder: Path, port: int = 80) -> ThreadingHTTPServer:
    handler = type("Handler", (Metadata,), {"folder": Path(folder)})
    return ThreadingHTTPServer(("0.0.0.0", port), handler)


if __name__ == "__main__":
    server = serve(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 80)
    print("tencent metadata server ready", flush=True)
    server.serve_forever()
