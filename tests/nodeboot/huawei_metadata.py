"""Huawei Cloud's ECS metadata service as the instances of one stack see it (stdlib only), and what makes an emulated
host a Huawei ECS to cloud-init. Started by tests/nodeboot/test_emulated_huawei.py in a container on the stack's
network that holds 169.254.169.254 (the hosts route that address to it, as a Huawei VPC routes it to the metadata
service), with the host image's Python:

    python3 huawei_metadata.py STATE_FOLDER [PORT]

What it answers, and its sources (docs/research/huawei.md §7 and §2.5):

- OpenStack paths ("Obtaining Metadata", ECS and BMS user guides: /openstack/latest/...): GET /openstack lists the
  versions (cloud-init selects a metadata URL by a 200 there, then reads the newest version it knows the listing to
  have: 2018-08-27 here; the list is OpenStack's, which versions Huawei's service lists is unverified);
  /openstack/<version>/meta_data.json (uuid,
  availability_zone, hostname, name, launch_index, project_id, region_id, instance_type, public_keys, meta),
  user_data (as the instance was given it; 404 without), network_data.json, vendor_data.json ({}),
  /openstack/latest/securitykey: the temporary AK/SK and security token of the instance's agency, {"credential":
  {"access", "secret", "securitytoken", "expires_at"}} (the shape huaweicloudsdkcore 3.1.219 auth/internal.py
  MetadataAccessor reads); an instance with no agency: 401 "Please configure Cloud Service Agency first" (NO_AGENCY).
- EC2-compatible paths (latest/meta-data/: hostname, instance-type, local-ipv4, placement/availability-zone).
- Session tokens (MetadataAccessor): PUT /meta-data/latest/api/token with X-Metadata-Token-Ttl-Seconds gives a
  token; a request carrying X-Metadata-Token must carry one this server gave (else 401). Requests without one are
  answered: the instance's metadata options leave tokens optional (ECS's default, http_tokens optional).

The server tells instances apart by the address a request comes from, as the real one does: STATE_FOLDER/
instances.json maps that address to the instance's record (instance()), read on every request; a request from any
other address is 404. Every request is appended to STATE_FOLDER/requests.log as `<caller address> <METHOD> <path>
<status>`.

The host side (host_files()): cloud-init's own OpenStack datasource (Debian 12's 22.4.2,
cloudinit/sources/DataSourceOpenStack.py) claims an x86 instance when the DMI chassis asset tag is HUAWEICLOUD, the
tag Huawei's hypervisor gives; in a container cloud-init reads no DMI, so a datasource package wraps upstream's
with DMI read from the emulated SMBIOS strings, its crawl otherwise unchanged (the network stage's, the one that
reads the metadata service: ECS hosts have DHCP up before it). The route to 169.254.169.254 through the server's
address stands for the VPC's.
"""

from __future__ import annotations

import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ADDRESS = "169.254.169.254"
INSTANCES = "instances.json"
LOG = "requests.log"
VERSIONS = ("2012-08-10", "2013-04-04", "2013-10-17", "2015-10-15", "2016-06-30", "2016-10-06", "2017-02-22",
            "2018-08-27", "latest")
CHASSIS_ASSET_TAG = "HUAWEICLOUD"
DATASOURCE_PACKAGE = "/usr/local/lib/python3.11/dist-packages/goldenenv_emulated"
"""Where cloud-init finds the emulated hosts' datasources (datasource_pkg_list; the Azure and GCE ones too)."""
DMI = "/etc/goldenenv-emulated/dmi"
NO_AGENCY = "Please configure Cloud Service Agency first"
"""What securitykey answers (401) an instance with no agency: the words huaweicloudsdkcore 3.1.219's
MetadataAccessor tells that case by (auth/internal.py _CONFIG_AGENCY_ERROR); the rest of the body is unverified."""
_WRITE = threading.Lock()
_TOKENS: set[str] = set()

DATASOURCE = r'''"""cloud-init's own OpenStack datasource (cloudinit.sources.DataSourceOpenStack, Debian 12's 22.4.2), on an
emulated Huawei ECS: upstream's crawl of the metadata service at 169.254.169.254, unchanged; only DMI, which
cloud-init does not read in a container, comes from the emulated SMBIOS strings in %(dmi)s (the chassis asset tag
HUAWEICLOUD that detect_openstack accepts)."""
from cloudinit import sources
from cloudinit.sources import DataSourceOpenStack as upstream

DMI = "%(dmi)s"


class _Dmi:
    @staticmethod
    def read_dmi_data(key):
        try:
            with open(f"{DMI}/{key}") as f:
                return f.read().strip() or None
        except OSError:
            return None


upstream.dmi = _Dmi


class DataSourceOpenStack(upstream.DataSourceOpenStack):
    pass


datasources = [(DataSourceOpenStack, (sources.DEP_FILESYSTEM, sources.DEP_NETWORK))]


def get_datasource_list(depends):
    return sources.list_from_depends(depends, datasources)
''' % {"dmi": DMI}

CLOUD_CFG = """\
# An emulated Huawei ECS: cloud-init's OpenStack datasource (goldenenv_emulated: DMI from the emulated SMBIOS) reading
# the metadata service at 169.254.169.254; no NoCloud seed.
datasource_list: [OpenStack]
datasource_pkg_list: [goldenenv_emulated]
datasource:
  OpenStack:
    metadata_urls: ['http://169.254.169.254']
    max_wait: 120
    timeout: 10
"""

ROUTE_UNIT = """[Unit]
Description=Route to Huawei's metadata service (emulated: what the VPC routes to it)
DefaultDependencies=no
Before=cloud-init-local.service cloud-init.service network-pre.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip route replace %(address)s/32 via %(server)s dev eth0
[Install]
WantedBy=cloud-init.service
"""


def host_files(*, server_address: str) -> dict[str, tuple[str, int]]:
    """What makes an emulated host a Huawei ECS to cloud-init: the SMBIOS chassis asset tag, the datasource and its
    configuration, and the route to the metadata service (via server_address, the container serving it)."""
    unit = "/etc/systemd/system/emulated-huawei-route.service"
    return {
        f"{DMI}/chassis-asset-tag": (CHASSIS_ASSET_TAG, 0o644),
        f"{DATASOURCE_PACKAGE}/__init__.py": ("", 0o644),
        f"{DATASOURCE_PACKAGE}/DataSourceOpenStack.py": (DATASOURCE, 0o644),
        "/etc/cloud/cloud.cfg.d/95-huawei.cfg": (CLOUD_CFG, 0o644),
        unit: (ROUTE_UNIT % {"address": ADDRESS, "server": server_address}, 0o644),
        "/etc/systemd/system/cloud-init.service.wants/emulated-huawei-route.service": (f"->{unit}", 0),
    }


def instance(*, uuid: str, name: str, hostname: str, zone: str, region: str, project_id: str, flavor: str,
             address: str, public_keys: dict[str, str], user_data: bytes | None, agency: str | None,
             credentials: dict | None) -> dict:
    """One instance's record: its meta_data.json, user data, address and its agency's temporary keys (as the
    emulated cloud issued them: AccessKeyId, AccessKeySecret, SecurityToken, Expiration)."""
    meta = {"uuid": uuid, "name": name, "hostname": hostname, "availability_zone": zone, "launch_index": 0,
            "project_id": project_id, "region_id": region, "instance_type": flavor, "public_keys": public_keys,
            "enterprise_project_id": "0", "meta": {"charging_mode": "0", "os_type": "Linux",
                                                   "image_name": "Ubuntu 22.04 server 64bit"}}
    return {"meta": meta, "user_data": user_data.decode("latin-1") if user_data is not None else None,
            "address": address, "agency": agency, "credentials": credentials}


def write(folder: Path, instances: dict[str, dict]) -> None:
    """The stack's instances by private address."""
    with _WRITE:
        (Path(folder) / f"{INSTANCES}.new").write_text(json.dumps(instances))
        (Path(folder) / f"{INSTANCES}.new").rename(Path(folder) / INSTANCES)


def requests_of(folder: Path) -> list[tuple[str, str, str, int]]:
    """(caller address, method, path, status) of every request so far."""
    try:
        lines = (Path(folder) / LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(a, m, p, int(s)) for a, m, p, s in (line.split(" ") for line in lines)]


def security_key(record: dict) -> dict:
    given = record["credentials"]
    return {"credential": {"access": given["AccessKeyId"], "secret": given["AccessKeySecret"],
                           "securitytoken": given["SecurityToken"], "expires_at": given["Expiration"]}}


def openstack(record: dict, version: str, leaf: str) -> tuple[int, str, str]:
    """(status, content type, body) of /openstack/<version>/<leaf>."""
    if leaf == "meta_data.json":
        return 200, "application/json", json.dumps(record["meta"])
    if leaf == "user_data":
        return (404, "text/plain", "Not Found") if record["user_data"] is None else \
            (200, "application/octet-stream", record["user_data"])
    if leaf == "network_data.json":
        return 200, "application/json", json.dumps({"links": [], "networks": [], "services": []})
    if leaf in ("vendor_data.json", "vendor_data2.json"):
        return 200, "application/json", "{}"
    if leaf == "securitykey" and version == "latest":
        if not record["agency"]:
            return 401, "text/plain", NO_AGENCY
        return 200, "application/json", json.dumps(security_key(record))
    if leaf == "":
        return 200, "text/plain", "\n".join(["meta_data.json", "network_data.json", "user_data", "vendor_data.json"])
    return 404, "text/plain", "Not Found"


def ec2(record: dict, path: str) -> str | None:
    """The text at `path` under latest/meta-data/, or None (404): a folder (a path ending in /, or the root) lists
    its entries one a line, folders with a trailing /."""
    meta = record["meta"]
    node = {"hostname": meta["hostname"], "instance-type": meta["instance_type"], "local-ipv4": record["address"],
            "placement": {"availability-zone": meta["availability_zone"]}}
    for part in [p for p in path.split("/") if p]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, dict):
        if path and not path.endswith("/"):
            return None
        return "\n".join(k + "/" if isinstance(v, dict) else k for k, v in node.items())
    return None if path.endswith("/") else node


class Metadata(BaseHTTPRequestHandler):
    folder: Path

    def reply(self, status: int, body: str, kind: str = "text/plain") -> None:
        data = body.encode("latin-1") if kind == "application/octet-stream" else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with _WRITE, open(self.folder / LOG, "a") as log:
            log.write(f"{self.client_address[0]} {self.command} {self.path.split('?')[0]} {status}\n")

    def do_PUT(self) -> None:
        if self.path != "/meta-data/latest/api/token" or not self.headers.get("X-Metadata-Token-Ttl-Seconds"):
            return self.reply(400, "Bad Request")
        token = secrets.token_urlsafe(24)
        _TOKENS.add(token)
        self.reply(200, token)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        record = json.loads((self.folder / INSTANCES).read_text()).get(self.client_address[0])
        if record is None:
            return self.reply(404, "Not Found")
        token = self.headers.get("X-Metadata-Token")
        if token is not None and token not in _TOKENS:
            return self.reply(401, "Unauthorized")
        parts = path.strip("/").split("/")
        if parts[0] == "openstack":
            if len(parts) == 1:
                return self.reply(200, "\n".join(VERSIONS))
            if parts[1] not in VERSIONS:
                return self.reply(404, "Not Found")
            status, kind, body = openstack(record, parts[1], "/".join(parts[2:]))
            return self.reply(status, body, kind)
        if parts[0] == "latest" and len(parts) > 1 and parts[1] == "meta-data":
            found = ec2(record, path.split("/meta-data", 1)[1].removeprefix("/"))
            return self.reply(404, "Not Found") if found is None else self.reply(200, found)
        self.reply(404, "Not Found")

    def do_POST(self) -> None:
        self.reply(405, "Method Not Allowed")

    do_DELETE = do_POST

    def log_message(self, *args) -> None:
        pass


def serve(folder: Path, port: int = 80) -> ThreadingHTTPServer:
    handler = type("Handler", (Metadata,), {"folder": Path(folder)})
    return ThreadingHTTPServer(("0.0.0.0", port), handler)


if __name__ == "__main__":
    server = serve(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 80)
    print("huawei metadata server ready", flush=True)
    server.serve_forever()
