"""The Azure platform as one VM sees it, for an emulated Azure host (stdlib only): the Instance Metadata Service
(IMDS) at 169.254.169.254, the WireServer at 168.63.129.16 that a VM reports ready to, the provisioning media's
ovf-env.xml, and the host-side pieces that let cloud-init's own Azure datasource run in a container. Started by
tests/nodeboot/test_emulated_azure.py in a container on the node's network that holds both addresses (the host routes
them to it, as Azure's DHCP lease routes them to the platform), with the host image's Python:

    python3 azure_imds.py STATE_FOLDER [PORT]

and in-process by the unit tests (serve()). What it answers, and its sources:

- IMDS (learn.microsoft.com, "Azure Instance Metadata Service"): every request must carry `Metadata: true` and no
  `X-Forwarded-For`, else 400 (`{"error": "Bad request. Required metadata header not specified"}`, the FAQ's
  "400 Bad Request, Required metadata header not specified"); `api-version` is mandatory and must be one IMDS
  supports (else 400 with the newest versions). GET /metadata/instance[/<key>/...]: the instance document (compute,
  network; primitives are strings; with extended=true from 2021-03-01 on, "extended"), a route parameter per key
  walks into it; a leaf answers only with format=text (else 400). customData is not served (deprecated and disabled
  in IMDS: custom data reaches a VM only through its provisioning media, here ovf-env.xml).
- Managed identities ("How to use managed identities ... on an Azure VM to acquire an access token"): GET
  /metadata/identity/oauth2/token?api-version=2018-02-01&resource=<App ID URI>[&client_id=|object_id=|msi_res_id=]
  answers {"access_token", "refresh_token": "", "expires_in", "expires_on", "not_before", "resource",
  "token_type": "Bearer"} (strings); without the header 400 {"error": "bad_request_102", "error_description":
  "Required metadata header not specified"}; an identity not attached to the VM 400 {"error": "invalid_request",
  "error_description": "Identity not found"}. The token is a JWT the emulated Microsoft Entra ID signs (HS256 with
  STATE_FOLDER/entra.key; Entra signs RS256): aud (the resource), oid (the identity's principal), appid (its client
  id), xms_mirid (its resource id), tid, iat/nbf/exp. The emulated Key Vault checks it (azure_apis.py).
- Scheduled events ("Scheduled Events for Linux VMs"): GET /metadata/scheduledevents?api-version=2020-07-01 answers
  {"DocumentIncarnation": n, "Events": [...]}, every event {"EventId", "EventType", "ResourceType": "VirtualMachine",
  "Resources": [VM names], "EventStatus", "NotBefore" (RFC 1123), "Description", "EventSource",
  "DurationInSeconds"}; the incarnation grows with every change. The other VMs of a placement group see each other's
  events, so a test schedules events for any VM name (schedule()). POST {"StartRequests": [{"EventId"}]} approves
  (200 for a known event, else 400).
- WireServer (cloud-init 22.4.2, cloudinit/sources/helpers/azure.py, and its tests' GOAL_STATE_TEMPLATE): GET
  /machine/?comp=goalstate answers the GoalState XML (Incarnation, ContainerId, RoleInstance InstanceId; no
  Certificates: the VM's keys come from IMDS); POST /machine?comp=health takes the health report (Ready, or NotReady
  with a ProvisioningFailed substatus), recorded in STATE_FOLDER/health.log: what Azure waits for before it calls
  the VM provisioned.

STATE_FOLDER/imds.json is read on every request (write_state, schedule); every request is appended to
STATE_FOLDER/requests.log as `METHOD PATH metadata=<header or ->`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import sys
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

IMDS_ADDRESS = "169.254.169.254"
WIRESERVER_ADDRESS = "168.63.129.16"
STATE = "imds.json"
SIGNING_KEY = "entra.key"
LOG = "requests.log"
HEALTH = "health.log"
API_VERSIONS = (
    "2017-03-01", "2017-04-02", "2017-08-01", "2017-10-01", "2017-12-01", "2018-02-01", "2018-04-02", "2018-10-01",
    "2019-02-01", "2019-03-11", "2019-04-30", "2019-06-01", "2019-06-04", "2019-08-01", "2019-08-15", "2019-11-01",
    "2020-06-01", "2020-07-15", "2020-09-01", "2020-10-01", "2020-12-01", "2021-01-01", "2021-02-01", "2021-03-01",
    "2021-05-01", "2021-08-01", "2021-10-01", "2021-11-01", "2021-11-15", "2021-12-13", "2023-07-01", "2023-11-15",
    "2024-03-15", "2024-07-17", "2025-04-07")
"""IMDS's supported versions ("Azure Instance Metadata Service": versioning)."""
EVENT_VERSIONS = ("2017-08-01", "2017-11-01", "2019-01-01", "2019-04-01", "2019-08-01", "2020-07-01")
"""Scheduled Events' versions ("Scheduled Events for Linux VMs": version and region availability)."""
EXTENDED_FROM = "2021-03-01"
"""The first version that answers extended=true (cloud-init's IMDS_EXTENDED_VER_MIN)."""
TOKEN_LIFETIME_S = 86399
CHASSIS_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"
"""An Azure VM's DMI chassis asset tag (cloud-init's ChassisAssetTag.AZURE_CLOUD)."""
_WRITE = threading.Lock()


def instance_document(*, name: str, vm_id: str, location: str, zone: str, vm_size: str, computer_name: str,
                      admin_username: str, public_keys: list[dict], subscription_id: str, resource_group: str,
                      resource_id: str, image: dict, priority: str, eviction_policy: str, tags: dict[str, str],
                      address: str, prefix: int, mac: str, scale_set: str = "") -> dict:
    """/metadata/instance of one VM, as IMDS gives it (every primitive a string)."""
    subnet = address.rsplit(".", 1)[0] + ".0"
    return {
        "compute": {
            "azEnvironment": "AzurePublicCloud", "customData": "", "evictionPolicy": eviction_policy,
            "isHostCompatibilityLayerVm": "false", "licenseType": "", "location": location, "name": name,
            "offer": image.get("offer", ""), "osProfile": {
                "adminUsername": admin_username, "computerName": computer_name,
                "disablePasswordAuthentication": "true"},
            "osType": "Linux", "placementGroupId": str(uuid.uuid5(uuid.NAMESPACE_URL, scale_set)) if scale_set else "",
            "plan": {"name": "", "product": "", "publisher": ""}, "platformFaultDomain": "0",
            "platformUpdateDomain": "0", "priority": priority, "provider": "Microsoft.Compute",
            "publicKeys": [{"keyData": k["keyData"], "path": k["path"]} for k in public_keys],
            "publisher": image.get("publisher", ""), "resourceGroupName": resource_group, "resourceId": resource_id,
            "sku": image.get("sku", ""), "storageProfile": {"imageReference": {
                "id": image.get("id", ""), "offer": image.get("offer", ""), "publisher": image.get("publisher", ""),
                "sku": image.get("sku", ""), "version": image.get("version", "")}},
            "subscriptionId": subscription_id, "tags": ";".join(f"{k}:{v}" for k, v in tags.items()),
            "tagsList": [{"name": k, "value": v} for k, v in tags.items()], "userData": "",
            "version": image.get("version", ""), "vmId": vm_id, "vmScaleSetName": scale_set, "vmSize": vm_size,
            "zone": zone,
        },
        "network": {"interface": [{
            "ipv4": {"ipAddress": [{"privateIpAddress": address, "publicIpAddress": ""}],
                     "subnet": [{"address": subnet, "prefix": str(prefix)}]},
            "ipv6": {"ipAddress": []}, "macAddress": mac.replace(":", "").upper()}]},
    }


def write_state(folder: Path, document: dict, identities: dict[str, dict], tenant_id: str) -> None:
    """The VM's instance document and its user-assigned identities (client id -> {"object_id", "resource_id"}), a
    new signing key for the emulated Entra ID, and no scheduled event."""
    folder = Path(folder)
    if not (folder / SIGNING_KEY).exists():
        (folder / SIGNING_KEY).write_text(os.urandom(32).hex())
    _write(folder, {"instance": document, "identities": identities, "tenant_id": tenant_id,
                    "events": {"DocumentIncarnation": 1, "Events": []},
                    "goalstate": {"incarnation": "1", "container_id": str(uuid.uuid4()),
                                  "instance_id": document["compute"]["vmId"] + "." + document["compute"]["name"]}})


def _write(folder: Path, data: dict) -> None:
    with _WRITE:
        (folder / f"{STATE}.new").write_text(json.dumps(data))
        (folder / f"{STATE}.new").rename(folder / STATE)


def _state(folder: Path) -> dict:
    return json.loads((Path(folder) / STATE).read_text())


def attach_identity(folder: Path, client_id: str, identity: dict | None) -> None:
    """A user-assigned identity ({"object_id", "resource_id"}) attached to the VM from now on; None detaches it."""
    data = _state(folder)
    if identity is None:
        data["identities"].pop(client_id, None)
    else:
        data["identities"][client_id] = identity
    _write(Path(folder), data)


def schedule(folder: Path, event_type: str, resources: list[str], notice_s: float = 30,
             status: str = "Scheduled") -> str:
    """Azure schedules an event for `resources` (VM names) `notice_s` from now: its EventId. A Preempt comes at least
    30 s ahead, which is the default."""
    data = _state(folder)
    event_id = str(uuid.uuid4()).upper()
    descriptions = {"Preempt": "Spot VM is being evicted.", "Terminate": "Virtual machine is being deleted.",
                    "Freeze": "Virtual machine is being paused because of a memory-preserving Live Migration "
                              "operation.", "Reboot": "Host server is undergoing maintenance.",
                    "Redeploy": "Host server is undergoing maintenance."}
    data["events"]["Events"].append({
        "EventId": event_id, "EventStatus": status, "EventType": event_type, "ResourceType": "VirtualMachine",
        "Resources": list(resources),
        "NotBefore": "" if status == "Started" else formatdate(time.time() + notice_s, usegmt=True),
        "Description": descriptions.get(event_type, ""), "EventSource": "Platform",
        "DurationInSeconds": -1 if event_type in ("Preempt", "Terminate") else 5})
    data["events"]["DocumentIncarnation"] += 1
    _write(folder, data)
    return event_id


def requests_of(folder: Path) -> list[tuple[str, str, str]]:
    """(method, path with query, Metadata header or "-") of every request so far."""
    try:
        lines = (Path(folder) / LOG).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(m, p, h.removeprefix("metadata=")) for m, p, h in (line.split(" ", 2) for line in lines)]


def health_reports(folder: Path) -> list[str]:
    """The health states the VM reported to the WireServer (Ready, NotReady/<substatus>), in order."""
    try:
        return (Path(folder) / HEALTH).read_text().split()
    except FileNotFoundError:
        return []


# the emulated Microsoft Entra ID's tokens

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue_token(folder: Path, *, object_id: str, client_id: str, resource_id: str, resource: str,
                tenant_id: str, lifetime_s: int = TOKEN_LIFETIME_S) -> dict:
    """An access token for a managed identity, as IMDS answers it (every value a string)."""
    now = int(time.time())
    claims = {"aud": resource, "iss": f"https://sts.windows.net/{tenant_id}/", "iat": now, "nbf": now,
              "exp": now + lifetime_s, "oid": object_id, "sub": object_id, "appid": client_id,
              "xms_mirid": resource_id, "tid": tenant_id, "idtyp": "app"}
    signing = _b64url(json.dumps({"typ": "JWT", "alg": "HS256"}).encode()) + "." + _b64url(json.dumps(claims).encode())
    key = bytes.fromhex((Path(folder) / SIGNING_KEY).read_text().strip())
    token = signing + "." + _b64url(hmac.new(key, signing.encode(), hashlib.sha256).digest())
    return {"access_token": token, "refresh_token": "", "expires_in": str(lifetime_s),
            "expires_on": str(now + lifetime_s), "not_before": str(now), "resource": resource,
            "token_type": "Bearer"}


def verify_token(folder: Path, token: str) -> dict | None:
    """The claims of a token the emulated Entra ID signed and that has not expired, else None."""
    try:
        header, payload, signature = token.split(".")
        key = bytes.fromhex((Path(folder) / SIGNING_KEY).read_text().strip())
        expected = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, _unb64url(signature)):
            return None
        claims = json.loads(_unb64url(payload))
    except (ValueError, OSError):
        return None
    return claims if claims.get("nbf", 0) <= time.time() < claims.get("exp", 0) else None


# the provisioning media

def ovf_env(*, hostname: str, username: str, custom_data: str, disable_password: bool,
            public_keys: list[dict], provision_agent: bool = True) -> str:
    """ovf-env.xml as Azure's provisioning media carries it (the namespaces and sections cloud-init's OvfEnvXml
    reads: LinuxProvisioningConfigurationSet with HostName, UserName, CustomData (base64, as osProfile.customData
    is), DisableSshPasswordAuthentication, SSH/PublicKeys; PlatformSettingsSection)."""
    def text(value: str) -> str:
        return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    keys = "".join(f"<ns1:PublicKey><ns1:Path>{text(k['path'])}</ns1:Path><ns1:Value>{text(k['keyData'])}"
                   f"</ns1:Value></ns1:PublicKey>" for k in public_keys)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<ns0:Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" '
        'xmlns:ns0="http://schemas.dmtf.org/ovf/environment/1" xmlns:ns1="http://schemas.microsoft.com/windowsazure" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        "<ns1:ProvisioningSection><ns1:Version>1.0</ns1:Version><ns1:LinuxProvisioningConfigurationSet>"
        "<ns1:ConfigurationSetType>LinuxProvisioningConfiguration</ns1:ConfigurationSetType>"
        f"<ns1:HostName>{text(hostname)}</ns1:HostName><ns1:UserName>{text(username)}</ns1:UserName>"
        f"<ns1:CustomData>{text(custom_data)}</ns1:CustomData>"
        f"<ns1:DisableSshPasswordAuthentication>{str(disable_password).lower()}"
        "</ns1:DisableSshPasswordAuthentication>"
        f"<ns1:SSH><ns1:PublicKeys>{keys}</ns1:PublicKeys></ns1:SSH>"
        "</ns1:LinuxProvisioningConfigurationSet></ns1:ProvisioningSection>\n"
        "<ns1:PlatformSettingsSection><ns1:Version>1.0</ns1:Version><ns1:PlatformSettings>"
        "<ns1:KmsServerHostname>kms.core.windows.net</ns1:KmsServerHostname>"
        f"<ns1:ProvisionGuestAgent>{str(provision_agent).lower()}</ns1:ProvisionGuestAgent>"
        '<ns1:GuestAgentPackageName xsi:nil="true" /><ns1:PreprovisionedVm>false</ns1:PreprovisionedVm>'
        '<ns1:PreprovisionedVMType xsi:nil="true" />'
        "</ns1:PlatformSettings></ns1:PlatformSettingsSection>\n</ns0:Environment>\n")


# the host side: cloud-init's Azure datasource in a container

DATASOURCE_PACKAGE = "/usr/local/lib/python3.11/dist-packages/goldenenv_emulated"
"""Where cloud-init finds the emulated hosts' datasources (datasource_pkg_list; the GCE one's too: stand_ins.py)."""
DMI = "/etc/goldenenv-emulated/dmi"
"""The VM's SMBIOS strings as Azure's hypervisor fills them, one file per cloud-init DMI key."""

DATASOURCE = r'''"""cloud-init's own Azure datasource (cloudinit.sources.DataSourceAzure, Debian 12's 22.4.2), emulated host.

Its crawl is upstream's, unchanged: the provisioning data from ovf-env.xml (the seed folder
/var/lib/cloud/seed/azure stands for the provisioning media), the instance document from IMDS at 169.254.169.254
with Metadata: true (api-version 2021-08-01, extended), the admin user and hostname from it, the SSH keys from its
compute.publicKeys, the user data from the OVF's CustomData, then the ready report to the WireServer
(168.63.129.16: GoalState, then a Ready health report). Two things differ, both what a container lacks:
- DMI: cloud-init's dmi.read_dmi_data answers None in any container; here it reads the VM's SMBIOS strings from
  %(dmi)s (the Azure chassis asset tag, the system UUID that is the VM's vmId), as the hypervisor gives them.
- DHCP: upstream brings up an ephemeral DHCP lease (dhclient) to reach IMDS and the WireServer before the network
  is configured; the emulated host's interface is up before cloud-init runs (the engine configures it) and its
  routes to both addresses stand for the ones Azure's lease carries (option 121), so the "ephemeral network" is
  the host's own, up already.
"""
from cloudinit import sources
from cloudinit.sources import DataSourceAzure as upstream
from cloudinit.sources.helpers import azure as helper

DMI = "%(dmi)s"


class _Dmi:
    @staticmethod
    def read_dmi_data(key):
        try:
            with open(f"{DMI}/{key}") as f:
                return f.read().strip() or None
        except OSError:
            return None


upstream.dmi = helper.dmi = _Dmi


class DataSourceAzure(upstream.DataSourceAzure):
    _network_up = False

    def _setup_ephemeral_networking(self, *, iface=None, retry_sleep=1, timeout_minutes=5):
        self._network_up = True

    def _teardown_ephemeral_networking(self):
        self._network_up = False

    def _is_ephemeral_networking_up(self):
        return self._network_up

    def check_instance_id(self, sys_cfg):
        return self.get_instance_id() == (_Dmi.read_dmi_data("system-uuid") or "").lower()


datasources = [(DataSourceAzure, (sources.DEP_FILESYSTEM,))]


def get_datasource_list(depends):
    return sources.list_from_depends(depends, datasources)
''' % {"dmi": DMI}

CLOUD_CFG = """\
# An emulated Azure host: cloud-init's Azure datasource (goldenenv_emulated: DMI from the emulated SMBIOS, no DHCP of
# its own) reading ovf-env.xml from the seed folder and the instance from IMDS; no NoCloud seed.
datasource_list: [Azure]
datasource_pkg_list: [goldenenv_emulated]
"""

ROUTES_UNIT = """[Unit]
Description=Routes to Azure's IMDS and WireServer (emulated: what the VM's DHCP lease routes to the platform)
DefaultDependencies=no
Before=cloud-init-local.service network-pre.target
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/ip route replace %(imds)s/32 via %(platform)s dev eth0
ExecStart=/usr/sbin/ip route replace %(wireserver)s/32 via %(platform)s dev eth0
[Install]
WantedBy=cloud-init-local.service
"""


def host_files(*, ovf: str, vm_id: str, platform_address: str) -> dict[str, tuple[str, int]]:
    """What makes an emulated host an Azure VM to cloud-init: the provisioning media's ovf-env.xml in the seed
    folder, the SMBIOS strings, the datasource and its configuration, and the routes to the platform's addresses
    (via platform_address, the container this module serves from)."""
    unit = "/etc/systemd/system/emulated-azure-routes.service"
    return {
        "/var/lib/cloud/seed/azure/ovf-env.xml": (ovf, 0o600),
        f"{DMI}/chassis-asset-tag": (CHASSIS_ASSET_TAG, 0o644),
        f"{DMI}/system-uuid": (vm_id, 0o644),
        f"{DMI}/sys_vendor": ("Microsoft Corporation", 0o644),
        f"{DATASOURCE_PACKAGE}/__init__.py": ("", 0o644),
        f"{DATASOURCE_PACKAGE}/DataSourceAzure.py": (DATASOURCE, 0o644),
        "/etc/cloud/cloud.cfg.d/95-azure.cfg": (CLOUD_CFG, 0o644),
        unit: (ROUTES_UNIT % {"imds": IMDS_ADDRESS, "wireserver": WIRESERVER_ADDRESS,
                              "platform": platform_address}, 0o644),
        "/etc/systemd/system/cloud-init-local.service.wants/emulated-azure-routes.service": (f"->{unit}", 0),
    }


# the server

GOAL_STATE = """<?xml version="1.0" encoding="utf-8"?>
<GoalState xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:noNamespaceSchemaLocation="goalstate10.xsd">
  <Version>2012-11-30</Version>
  <Incarnation>{incarnation}</Incarnation>
  <Machine>
    <ExpectedState>Started</ExpectedState>
    <StopRolesDeadlineHint>300000</StopRolesDeadlineHint>
    <LBProbePorts><Port>16001</Port></LBProbePorts>
    <ExpectHealthReport>FALSE</ExpectHealthReport>
  </Machine>
  <Container>
    <ContainerId>{container_id}</ContainerId>
    <RoleInstanceList>
      <RoleInstance>
        <InstanceId>{instance_id}</InstanceId>
        <State>Started</State>
      </RoleInstance>
    </RoleInstanceList>
  </Container>
</GoalState>
"""
MISSING_HEADER = {"error": "Bad request. Required metadata header not specified"}


class Handler(BaseHTTPRequestHandler):
    state: Path
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body, kind: str = "application/json; charset=utf-8") -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _log(self) -> None:
        with _WRITE, open(self.state / LOG, "a") as f:
            f.write(f"{self.command} {self.path} metadata={self.headers.get('Metadata') or '-'}\n")

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        self._log()
        self._route("GET", b"")

    def do_POST(self) -> None:
        self._log()
        self._route("POST", self._body())

    def _route(self, method: str, body: bytes) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/machine"):
            return self._wireserver(method, url, body)
        query = urllib.parse.parse_qs(url.query)
        identity = url.path.startswith("/metadata/identity/")
        if self.headers.get("Metadata") != "true" or self.headers.get("X-Forwarded-For"):
            return self._send(400, {"error": "bad_request_102", "error_description":
                                    "Required metadata header not specified"} if identity else MISSING_HEADER)
        if url.path.rstrip("/") == "/metadata/versions":  # the one unversioned endpoint
            return self._send(200, {"apiVersions": list(API_VERSIONS)})
        if any(len(v) > 1 for v in query.values()):
            return self._send(400, {"error": "Bad request. Query parameters are duplicated."})
        version = (query.get("api-version") or [""])[0]
        events = url.path.rstrip("/") == "/metadata/scheduledevents"
        if version not in (EVENT_VERSIONS if events else API_VERSIONS):
            return self._send(400, {"error": "Bad request. api-version is invalid or was not specified in the "
                                             "request. For more information refer to aka.ms/azureimds",
                                    "newest-versions": list(API_VERSIONS[::-1][:3])})
        data = _state(self.state)
        if events:
            return self._events(method, data, body)
        if method != "GET":
            return self._send(405, {"error": "Method not allowed"})
        if identity and url.path.rstrip("/") == "/metadata/identity/oauth2/token":
            return self._token(data, {k: v[0] for k, v in query.items()})
        if url.path.rstrip("/") == "/metadata/instance" or url.path.startswith("/metadata/instance/"):
            return self._instance(data, url.path, {k: v[0] for k, v in query.items()})
        self._send(404, {"error": "Not found"})

    def _instance(self, data: dict, path: str, query: dict[str, str]) -> None:
        document = dict(data["instance"])
        if query.get("extended") == "true" and query["api-version"] >= EXTENDED_FROM:
            document["extended"] = {"compute": {"ppsType": "None"}}
        node = document
        for part in [p for p in path[len("/metadata/instance"):].split("/") if p]:
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                return self._send(404, {"error": "Not found"})
        leaf = not isinstance(node, (dict, list))
        if leaf != (query.get("format") == "text"):
            return self._send(400, {"error": "Bad request. Leaf nodes are only served with format=text, other "
                                             "nodes with format=json."})  # wording (unverified)
        if leaf:
            return self._send(200, str(node), "text/plain; charset=utf-8")
        self._send(200, node)

    def _token(self, data: dict, query: dict[str, str]) -> None:
        if not query.get("resource"):
            return self._send(400, {"error": "invalid_request",
                                    "error_description": "Required audience parameter not specified"})
        identities = data["identities"]
        wanted = [(cid, i) for cid, i in identities.items()
                  if query.get("client_id") in (None, cid) and query.get("object_id") in (None, i["object_id"])
                  and query.get("msi_res_id") in (None, i["resource_id"])]
        if not wanted or (len(wanted) > 1 and not ({"client_id", "object_id", "msi_res_id"} & set(query))):
            return self._send(400, {"error": "invalid_request", "error_description": "Identity not found"})
        client_id, identity = wanted[0]
        self._send(200, issue_token(self.state, object_id=identity["object_id"], client_id=client_id,
                                    resource_id=identity["resource_id"], resource=query["resource"],
                                    tenant_id=data["tenant_id"]))

    def _events(self, method: str, data: dict, body: bytes) -> None:
        if method == "GET":
            return self._send(200, data["events"])
        try:
            wanted = [r["EventId"] for r in json.loads(body)["StartRequests"]]
        except (ValueError, KeyError, TypeError):
            return self._send(400, {"error": "Bad request"})
        known = {e["EventId"] for e in data["events"]["Events"]}
        self._send(200 if wanted and set(wanted) <= known else 400, "")

    def _wireserver(self, method: str, url, body: bytes) -> None:
        comp = urllib.parse.parse_qs(url.query).get("comp", [""])[0]
        goal = _state(self.state)["goalstate"]
        if method == "GET" and url.path in ("/machine", "/machine/") and comp == "goalstate":
            return self._send(200, GOAL_STATE.format(**goal), "text/xml; charset=utf-8")
        if method == "POST" and url.path in ("/machine", "/machine/") and comp == "health":
            try:
                report = ET.fromstring(body)
                state = report.findtext(".//Health/State") or ""
                sub = report.findtext(".//Health/Details/SubStatus")
                instance = report.findtext(".//RoleInstanceList/Role/InstanceId")
            except ET.ParseError:
                return self._send(400, "", "text/xml")
            if instance != goal["instance_id"]:
                return self._send(400, "", "text/xml")
            with _WRITE, open(self.state / HEALTH, "a") as f:
                f.write((f"{state}/{sub}" if sub else state) + "\n")
            return self._send(200, "", "text/xml")
        self._send(404, "", "text/xml")

    def log_message(self, *args) -> None:
        pass


def serve(state: Path, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """The platform's endpoints on (host, port), answering from state/imds.json; serve_forever() is the caller's."""
    handler = type("AzureImds", (Handler,), {"state": Path(state)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "/state")
    server = serve(folder, "0.0.0.0", int(sys.argv[2]) if len(sys.argv) > 2 else 80)
    print("azure platform ready", flush=True)
    server.serve_forever()
